"""The operator's object store: where ScrapeJobs' output batches and manifests are written.

The same bucket as the workers' (the same settings), written with the same client (obstore,
docs/architecture.md record 10): requests run on the client's own threads, so an upload never
blocks the operator's event loop, and each one is bounded (connect and request timeouts, a few
retries within a budget, an overall deadline). Whatever goes wrong is `OutputStoreUnavailable`:
the uploader tries again later and nothing is lost, because the batch stays cut in the database
until its object is in.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

import obstore
from obstore.exceptions import BaseError as ObjectStoreError
from obstore.store import S3Store

from scrapeq_operator.settings import OperatorSettings

# A batch is at most a few tens of MiB: 60 s covers a slow store; one that does not accept a
# connection within 5 s is down.
CONNECT_TIMEOUT: Final = timedelta(seconds=5)
REQUEST_TIMEOUT: Final = timedelta(seconds=60)
RETRIES: Final = 2
RETRY_BUDGET: Final = timedelta(seconds=20)
# The whole upload, the client's retries included.
UPLOAD_DEADLINE_SECONDS: Final = 90.0


class OutputStoreUnavailable(Exception):
    """The store did not take (or return) an object in time: try again later."""


@dataclass(frozen=True)
class WrittenObject:
    """An object in the bucket: its key, size and SHA-256 (hex)."""

    key: str
    bytes: int
    sha256: str


class OutputStore:
    """Writes output objects to the bucket of the operator's settings."""

    def __init__(self, settings: OperatorSettings) -> None:
        if settings.object_store_bucket is None:
            raise ValueError("no object store bucket is configured")
        self.bucket = settings.object_store_bucket
        self.prefix = settings.object_store_prefix.strip("/")
        endpoint = settings.object_store_endpoint
        options: dict[str, str] = {}
        if endpoint:
            options["endpoint"] = endpoint
        if settings.object_store_region:
            options["region"] = settings.object_store_region
        self._store = S3Store(
            self.bucket,
            virtual_hosted_style_request=not settings.object_store_path_style,
            client_options={
                "connect_timeout": CONNECT_TIMEOUT,
                "timeout": REQUEST_TIMEOUT,
                "allow_http": bool(endpoint and endpoint.startswith("http://")),
            },
            retry_config={
                "max_retries": RETRIES,
                "retry_timeout": RETRY_BUDGET,
                "backoff": {
                    "init_backoff": timedelta(milliseconds=200),
                    "max_backoff": timedelta(seconds=2),
                    "base": 2,
                },
            },
            **options,  # type: ignore[arg-type]
        )

    async def put(self, key: str, data: bytes, *, content_type: str) -> WrittenObject:
        """Write `data` as `key`, replacing any object there; OutputStoreUnavailable when the
        store cannot take it within the deadline."""
        try:
            async with asyncio.timeout(UPLOAD_DEADLINE_SECONDS):
                await obstore.put_async(
                    self._store,
                    key,
                    data,
                    attributes={"Content-Type": content_type},
                    use_multipart=False,
                )
        except TimeoutError as error:
            raise OutputStoreUnavailable(
                f"the object store did not take {key} within {UPLOAD_DEADLINE_SECONDS:.0f}s"
            ) from error
        except ObjectStoreError as error:
            raise OutputStoreUnavailable(
                f"the object store refused or could not be reached for {key}: {_first_line(error)}"
            ) from error
        return WrittenObject(key=key, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
