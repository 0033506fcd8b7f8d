"""The output uploader: the one operator-wide loop that writes ScrapeJobs' output to the bucket.

Each round looks at the outputs with work (`scrapeq_queue.output_batches`): it uploads again any
batch that was cut but not marked (an earlier operator stopped, or the store failed), cuts a new
batch when enough finished rows wait (`batchRows`) or the oldest has waited `batchSeconds` (or
the ScrapeJob ended), uploads it under its numbered key and marks it uploaded, which delivers
its rows. When the ScrapeJob has ended and every row is in an uploaded batch, it writes the
manifest and the output is finished. Each step's state is in PostgreSQL, so a restarted loop
(or another operator) carries on from it; an upload that fails is tried again after a growing
delay, with a Warning Event (OutputUnavailable) on the ScrapeJob the first time, and nothing
is lost. After each batch and after the manifest, `status.output` shows where the output is.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from scrapeq_queue import DatabaseUnavailable, record_batch_events
from scrapeq_queue import output_batches as outputs
from scrapeq_queue.output_batches import Output, OutputBatch

from scrapeq_operator import metrics
from scrapeq_operator.cluster import ObjectRef
from scrapeq_operator.output_encoding import (
    CONTENT_TYPES,
    batch_key,
    encode_batch,
    encode_manifest,
    manifest_document,
    manifest_key,
)
from scrapeq_operator.output_store import OutputStore, OutputStoreUnavailable
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.vocabulary import GROUP, VERSION
from scrapeq_operator.webhook_events import batch_event_data, retry_delay

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)

# Outputs looked at per round, one after the other: a round stays short, and a busy cluster's
# outputs take turns (the least recently due first).
OUTPUTS_PER_ROUND: Final = 50


class OutputUploader:
    """Write due output batches and manifests; `run` is the loop, `upload_round` one pass."""

    def __init__(
        self, settings: OperatorSettings, runtime: OperatorRuntime, store: OutputStore
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.store = store
        self._failing: set[str] = set()

    async def run(self) -> None:
        """Upload until cancelled; a failing round is logged and counted, never fatal."""
        while True:
            try:
                await self.upload_round()
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("output").inc()
                logger.warning("output: database unavailable, uploading later: %s", error)
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("output").inc()
                logger.exception("output: upload round failed")
            await asyncio.sleep(self.settings.output_poll_seconds)

    async def upload_round(self) -> int:
        """Advance every due output once; return how many batches and manifests were written."""
        async with self.runtime.connection() as connection:
            due = await outputs.outputs_due(connection, limit=OUTPUTS_PER_ROUND)
        written = 0
        for output in due:
            written += await self.advance(output)
        return written

    async def advance(self, output: Output) -> int:
        """Upload what `output` has ready; a store failure delays it (never raises for that)."""
        try:
            written = await self._advance(output)
        except OutputStoreUnavailable as error:
            metrics.OUTPUT_BATCHES_TOTAL.labels("failed").inc()
            await self._failed(output, str(error))
            return 0
        if output.failures:
            await self._recovered(output)
        return written

    async def _advance(self, output: Output) -> int:
        written = 0
        async with self.runtime.connection() as connection:
            left_over = await outputs.open_output_batches(connection, output.owner_uid)
        for open_batch in left_over:
            await self._upload(output, open_batch)
            written += 1
        while True:
            async with self.runtime.connection() as connection:
                progress = await outputs.output_progress(connection, output.owner_uid)
            if not self._batch_due(output, progress):
                break
            async with self.runtime.connection() as connection:
                batch = await outputs.cut_output_batch(
                    connection, output.owner_uid, limit=output.settings.batch_rows
                )
            if batch is None:
                break
            await self._upload(output, batch)
            written += 1
        if (
            output.job_ended
            and progress.ready_rows == 0
            and progress.open_batches == 0
            and not progress.unfinished_rows
        ):
            await self._write_manifest(output)
            written += 1
        return written

    @staticmethod
    def _batch_due(output: Output, progress: outputs.OutputProgress) -> bool:
        if progress.ready_rows == 0:
            return False
        if output.job_ended or progress.ready_rows >= output.settings.batch_rows:
            return True
        waited = progress.oldest_ready_seconds or 0.0
        return waited >= output.settings.batch_seconds

    async def _upload(self, output: Output, batch: OutputBatch) -> None:
        async with self.runtime.connection() as connection:
            rows = await outputs.output_batch_rows(connection, output.owner_uid, batch)
        encoded = encode_batch(
            rows, output.settings.format, changes_only=output.settings.changes_only
        )
        key = batch_key(output.settings.key_prefix, batch.sequence, output.settings.format)
        written = await self.store.put(
            key, encoded.data, content_type=CONTENT_TYPES[output.settings.format]
        )
        # The batch's webhook events are recorded with its upload, in one transaction: a batch
        # marked uploaded always has them, and marking it again after a crash adds none.
        async with self.runtime.connection() as connection, connection.transaction():
            delivered = await outputs.mark_output_batch_uploaded(
                connection,
                output.owner_uid,
                batch.sequence,
                key=key,
                lines=encoded.lines,
                skipped=encoded.skipped,
                size=written.bytes,
                sha256=written.sha256,
                counts=encoded.counts,
            )
            await record_batch_events(
                connection,
                owner_uid=output.owner_uid,
                owner_namespace=output.owner_namespace,
                owner_name=output.owner_name,
                sequence=batch.sequence,
                targets=output.settings.batch_webhooks,
                data=batch_event_data(
                    namespace=output.owner_namespace,
                    name=output.owner_name,
                    uid=output.owner_uid,
                    bucket=self.store.bucket,
                    sequence=batch.sequence,
                    key=key,
                    rows=encoded.lines,
                    size=written.bytes,
                    sha256=written.sha256,
                    counts=encoded.counts,
                ),
            )
        metrics.OUTPUT_BATCHES_TOTAL.labels("uploaded").inc()
        metrics.OUTPUT_ROWS_DELIVERED_TOTAL.inc(delivered)
        metrics.OUTPUT_DELIVERY_LAG_SECONDS.observe(
            max(0.0, (datetime.now(UTC) - batch.cut_at).total_seconds())
        )
        await self._show(output, manifest=None)

    async def _write_manifest(self, output: Output) -> None:
        async with self.runtime.connection() as connection:
            batches = await outputs.uploaded_output_batches(connection, output.owner_uid)
        prefix = output.settings.key_prefix
        document = manifest_document(
            namespace=output.owner_namespace,
            name=output.owner_name,
            uid=output.owner_uid,
            bucket=self.store.bucket,
            prefix=prefix,
            format=output.settings.format,
            batches=batches,
        )
        key = manifest_key(prefix)
        await self.store.put(key, encode_manifest(document), content_type="application/json")
        async with self.runtime.connection() as connection:
            finished = await outputs.mark_output_finished(
                connection, output.owner_uid, manifest_key=key
            )
        if finished:
            metrics.OUTPUT_MANIFESTS_TOTAL.inc()
        await self._show(output, manifest=key)

    async def _show(self, output: Output, *, manifest: str | None) -> None:
        """Patch status.output: where the output is and how much of it there is (no
        credentials). A ScrapeJob deleted meanwhile is no reason to stop uploading."""
        async with self.runtime.connection() as connection:
            batches = await outputs.uploaded_output_batches(connection, output.owner_uid)
        shown: dict[str, Any] = {
            "bucket": self.store.bucket,
            "prefix": output.settings.key_prefix,
            "format": output.settings.format,
            "batches": len(batches),
            "rows": sum(batch.rows for batch in batches),
        }
        if manifest is not None:
            shown["manifest"] = manifest
        try:
            await self.runtime.cluster.patch_scrapejob_status(
                output.owner_namespace,
                output.owner_name,
                uid=output.owner_uid,
                resource_version=None,
                status={"output": shown},
            )
        except Exception as error:
            logger.info(
                "output: could not show the output of %s/%s in its status: %s",
                output.owner_namespace,
                output.owner_name,
                error,
            )

    async def _failed(self, output: Output, error: str) -> None:
        delay = retry_delay(
            output.failures + 1,
            base_seconds=self.settings.output_retry_base_seconds,
            max_seconds=self.settings.output_retry_max_seconds,
        )
        async with self.runtime.connection() as connection:
            failures = await outputs.record_output_failure(
                connection, output.owner_uid, delay_seconds=delay, error=error
            )
        self._failing.add(output.owner_uid)
        metrics.OUTPUT_FAILING.set(len(self._failing))
        logger.warning(
            "output of %s/%s: upload failed (%d in a row), trying again in %.1fs: %s",
            output.owner_namespace,
            output.owner_name,
            failures,
            delay,
            error,
        )
        if failures == 1:
            await self.runtime.cluster.announce(
                _scrapejob(output),
                type_="Warning",
                reason="OutputUnavailable",
                message=f"cannot write the output yet, retrying; nothing is lost: {error}",
            )

    async def _recovered(self, output: Output) -> None:
        async with self.runtime.connection() as connection:
            recovered = await outputs.record_output_success(connection, output.owner_uid)
        self._failing.discard(output.owner_uid)
        metrics.OUTPUT_FAILING.set(len(self._failing))
        if recovered:
            await self.runtime.cluster.announce(
                _scrapejob(output),
                type_="Normal",
                reason="OutputRecovered",
                message="the object store takes the output again",
            )


def _scrapejob(output: Output) -> ObjectRef:
    return ObjectRef(
        f"{GROUP}/{VERSION}",
        "ScrapeJob",
        output.owner_namespace,
        output.owner_name,
        output.owner_uid,
    )
