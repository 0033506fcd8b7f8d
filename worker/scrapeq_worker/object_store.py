"""The worker's object store: an S3-compatible bucket that page artifacts and oversized results
are written to (docs/worker.md, "Object storage").

Uploads are asynchronous (obstore's client runs its I/O on its own threads, never on the event
loop that drives the pages) and bounded: a connect timeout, a request timeout, a few retries
within a retry budget, and an overall deadline around each upload. Whatever goes wrong with
the store is `RetryLater(reason="storage_unavailable")`: the row is tried again later and
nothing it found is lost.

Object keys are deterministic per row, `<prefix>/<queue>/<job id>/<name>`, so an upload that
is retried (after a failed attempt, or by another worker after a lost lease) replaces the
object rather than adding another.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

import obstore
from obstore.exceptions import BaseError as ObjectStoreError
from obstore.exceptions import NotFoundError
from obstore.store import S3Store

from .errors import PermanentFailure, RetryLater

# One upload's bounds. Artifacts are at most a few MiB (docs/worker.md, "Artifacts"): 30 s
# covers a slow store; a store that does not accept a connection within 5 s is down.
CONNECT_TIMEOUT: Final = timedelta(seconds=5)
REQUEST_TIMEOUT: Final = timedelta(seconds=30)
# The client's own retries of one request (a dropped connection, a 503), within this budget.
RETRIES: Final = 2
RETRY_BUDGET: Final = timedelta(seconds=20)
# The whole upload, retries included: past it the row is retried later.
UPLOAD_DEADLINE_SECONDS: Final = 60.0
# A streamed object (a URL list) is fetched in ranges of this size, each one request read whole
# before it is handed on: its reader takes minutes over a million URLs (as fast as their rows
# are inserted), and one request streamed at that pace outlived REQUEST_TIMEOUT. Memory holds
# one range.
STREAM_RANGE_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True)
class ObjectStoreConfig:
    """Where the bucket is. `endpoint` None means AWS S3 itself; credentials are explicit only
    when both keys are given, otherwise the client's default chain (AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY, a web identity token file as IRSA mounts it, the container or
    instance metadata service)."""

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    prefix: str = ""
    path_style: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None


@dataclass(frozen=True)
class StoredObject:
    """One uploaded object: its key in the bucket, its size and its SHA-256 (hex)."""

    key: str
    bytes: int
    sha256: str

    def as_json(self) -> dict[str, object]:
        return {"key": self.key, "bytes": self.bytes, "sha256": self.sha256}


class ObjectStore:
    """Uploads objects to one bucket under one prefix."""

    def __init__(self, config: ObjectStoreConfig) -> None:
        self.config = config
        self.prefix = config.prefix.strip("/")
        credentials: dict[str, str] = {}
        if config.access_key_id and config.secret_access_key:
            credentials = {
                "access_key_id": config.access_key_id,
                "secret_access_key": config.secret_access_key,
            }
        endpoint = {"endpoint": config.endpoint} if config.endpoint else {}
        region = {"region": config.region} if config.region else {}
        self._store = S3Store(
            config.bucket,
            virtual_hosted_style_request=not config.path_style,
            client_options={
                "connect_timeout": CONNECT_TIMEOUT,
                "timeout": REQUEST_TIMEOUT,
                "allow_http": bool(config.endpoint and config.endpoint.startswith("http://")),
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
            **endpoint,  # type: ignore[arg-type]
            **region,  # type: ignore[arg-type]
            **credentials,  # type: ignore[arg-type]
        )

    def key(self, queue: str, job_id: int, name: str) -> str:
        """The object key of artifact `name` of row `job_id`: the same on every attempt."""
        parts = [self.prefix] if self.prefix else []
        return "/".join([*parts, queue, str(job_id), name])

    async def put(self, key: str, data: bytes, *, content_type: str) -> StoredObject:
        """Upload `data` as `key` (replacing any object there); raise RetryLater
        (storage_unavailable) when the store cannot take it within the upload deadline."""
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
            raise RetryLater(
                f"the object store did not take {key} within {UPLOAD_DEADLINE_SECONDS:.0f}s",
                reason="storage_unavailable",
            ) from error
        except ObjectStoreError as error:
            raise RetryLater(
                f"the object store refused or could not be reached for {key}: {_first_line(error)}",
                reason="storage_unavailable",
            ) from error
        return StoredObject(key=key, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    async def get(self, key: str) -> bytes:
        """The bytes of object `key` (for reading results back)."""
        try:
            async with asyncio.timeout(UPLOAD_DEADLINE_SECONDS):
                result = await obstore.get_async(self._store, key)
                return bytes(await result.bytes_async())
        except (TimeoutError, ObjectStoreError) as error:
            raise RetryLater(
                f"the object store could not return {key}: {_first_line(error)}",
                reason="storage_unavailable",
            ) from error

    @contextlib.asynccontextmanager
    async def stream(self, key: str, *, chunk_bytes: int) -> AsyncIterator[AsyncIterator[bytes]]:
        """The bytes of object `key` in order, in chunks of at most `chunk_bytes`, never held
        whole (a source row's URL list): read in ranges of STREAM_RANGE_BYTES, one request
        each, all of the same version of the object. Raises PermanentFailure
        (object_not_found) for a key the bucket does not hold, RetryLater
        (storage_unavailable) when the store cannot answer or the object changes, also while
        the chunks are read."""
        try:
            meta = await obstore.head_async(self._store, key)
        except (FileNotFoundError, NotFoundError) as error:
            raise PermanentFailure(
                f"the object store holds no object {key}", reason="object_not_found"
            ) from error
        except ObjectStoreError as error:
            raise RetryLater(
                f"the object store could not return {key}: {_first_line(error)}",
                reason="storage_unavailable",
            ) from error
        size, version = int(meta["size"]), meta.get("e_tag")

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, size, STREAM_RANGE_BYTES):
                try:
                    result = await obstore.get_async(
                        self._store,
                        key,
                        options={
                            "range": (start, min(size, start + STREAM_RANGE_BYTES)),
                            "if_match": version,
                        },
                    )
                    piece = memoryview(await result.bytes_async())
                except ObjectStoreError as error:
                    raise RetryLater(
                        f"the object store stopped sending {key}: {_first_line(error)}",
                        reason="storage_unavailable",
                    ) from error
                for offset in range(0, len(piece), chunk_bytes):
                    yield bytes(piece[offset : offset + chunk_bytes])

        yield chunks()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
