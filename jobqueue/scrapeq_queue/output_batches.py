"""Object-storage output: ScrapeJobs' finished rows assigned to numbered batches, exactly once.

The operator registers a ScrapeJob's output before its rows are inserted (they are inserted
undelivered from then on, so retention keeps them). The uploader cuts a batch (rows assigned,
number taken, committed), uploads its object under a key made of that number, then marks it
uploaded, which clears `undelivered` on its rows in the same transaction. A batch cut but not
marked is uploaded again, to the same key, by whichever uploader comes next; a row finished
after a cut goes into a later batch. See docs/architecture.md, record 12.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors
from scrapeq_queue.webhook_outbox import WebhookTarget

OutputFormat = Literal["jsonl", "csv"]
OUTPUT_FORMATS: Final[tuple[OutputFormat, ...]] = ("jsonl", "csv")
# A batch's rows are read and encoded in memory at once; results are capped per row, so this
# bounds one batch to a few hundred MiB at worst (and far less for typical results).
MAX_BATCH_ROWS: Final = 100_000
MAX_BATCH_SECONDS: Final = 3600.0
FINISHED_STATES: Final = ("completed", "failed", "cancelled")
# As many as spec.webhooks may hold (the column's CHECK says the same).
MAX_BATCH_WEBHOOKS: Final = 5


@dataclass(frozen=True)
class OutputSettings:
    """How one ScrapeJob's output is written: format, when a batch is cut, and where."""

    format: OutputFormat = "jsonl"
    batch_rows: int = 1000
    batch_seconds: float = 5.0
    key_prefix: str = ""
    changes_only: bool = False
    # The endpoints of spec.webhooks that asked for an event per uploaded batch.
    batch_webhooks: tuple[WebhookTarget, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in OUTPUT_FORMATS:
            raise ValueError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}")
        if not 1 <= self.batch_rows <= MAX_BATCH_ROWS:
            raise ValueError(f"batchRows must be between 1 and {MAX_BATCH_ROWS}")
        if not 0 < self.batch_seconds <= MAX_BATCH_SECONDS:
            raise ValueError(f"batchSeconds must be above 0 and at most {MAX_BATCH_SECONDS:.0f}")
        if len(self.batch_webhooks) > MAX_BATCH_WEBHOOKS:
            raise ValueError(f"at most {MAX_BATCH_WEBHOOKS} webhooks hear of each batch")


@dataclass(frozen=True)
class Output:
    """A registered output the uploader has work for."""

    owner_uid: str
    owner_namespace: str
    owner_name: str
    settings: OutputSettings
    job_ended: bool
    failures: int


@dataclass(frozen=True)
class OutputProgress:
    """What an output waits for: finished rows in no batch yet (and how long the oldest has
    waited), batches cut but not uploaded, and whether rows are still unfinished."""

    ready_rows: int
    oldest_ready_seconds: float | None
    open_batches: int
    unfinished_rows: bool


@dataclass(frozen=True)
class OutputBatch:
    """A batch cut from an output: its number and its rows."""

    sequence: int
    row_ids: tuple[int, ...]
    cut_at: datetime


@dataclass(frozen=True)
class OutputRow:
    """One finished row as a batch object holds it."""

    id: int
    url: str
    state: str
    result: Any
    error: str | None
    finished_at: datetime | None
    # A source row (a sitemap or URL list the job's pages came from), not a page.
    source: bool = False


@dataclass(frozen=True)
class UploadedBatch:
    """A batch whose object is in the bucket: what the manifest lists for it."""

    sequence: int
    key: str
    rows: int
    lines: int
    skipped: int
    bytes: int
    sha256: str
    counts: Mapping[str, int]
    uploaded_at: datetime


@dataclass(frozen=True)
class OutputState:
    """An output's row in the table (inspection, tests)."""

    batches_cut: int
    job_ended_at: datetime | None
    manifest_key: str | None
    finished_at: datetime | None
    failures: int
    last_error: str | None


@translate_database_errors
async def register_output(
    connection: psycopg.AsyncConnection[Any],
    *,
    owner_uid: str,
    owner_namespace: str,
    owner_name: str,
    settings: OutputSettings,
) -> None:
    """Register the output of a ScrapeJob before its rows are inserted; registering again keeps
    the first settings."""
    await connection.execute(
        statements.OUTPUT_REGISTER,
        {
            "owner_uid": owner_uid,
            "owner_namespace": owner_namespace,
            "owner_name": owner_name,
            "format": settings.format,
            "batch_rows": settings.batch_rows,
            "batch_seconds": settings.batch_seconds,
            "key_prefix": settings.key_prefix,
            "changes_only": settings.changes_only,
            "batch_webhooks": json.dumps(
                [
                    {"url": t.url, "secret_name": t.secret_name, "secret_key": t.secret_key}
                    for t in settings.batch_webhooks
                ]
            ),
        },
    )


@translate_database_errors
async def mark_output_ended(connection: psycopg.AsyncConnection[Any], owner_uid: str) -> bool:
    """The ScrapeJob ended: its last batch and manifest are due. False when it has no output."""
    cursor = await connection.execute(statements.OUTPUT_MARK_ENDED, {"owner_uid": owner_uid})
    return await cursor.fetchone() is not None


@translate_database_errors
async def outputs_due(connection: psycopg.AsyncConnection[Any], *, limit: int) -> list[Output]:
    """Up to `limit` outputs without a manifest that are not waiting after a failure, the
    longest-waiting first; each one taken goes to the back of the line."""
    cursor = await connection.execute(statements.OUTPUTS_DUE, {"limit": limit})
    return [
        Output(
            owner_uid=row[0],
            owner_namespace=row[1],
            owner_name=row[2],
            settings=OutputSettings(
                format=row[3],
                batch_rows=int(row[4]),
                batch_seconds=float(row[5]),
                key_prefix=row[6],
                changes_only=bool(row[7]),
                batch_webhooks=tuple(
                    WebhookTarget(hook["url"], hook["secret_name"], hook["secret_key"])
                    for hook in row[10] or ()
                ),
            ),
            job_ended=bool(row[8]),
            failures=int(row[9]),
        )
        for row in await cursor.fetchall()
    ]


@translate_database_errors
async def output_progress(
    connection: psycopg.AsyncConnection[Any], owner_uid: str
) -> OutputProgress:
    """What the output of `owner_uid` waits for now."""
    cursor = await connection.execute(statements.OUTPUT_PROGRESS, {"owner_uid": owner_uid})
    row = await cursor.fetchone()
    assert row is not None
    return OutputProgress(
        ready_rows=int(row[0]),
        oldest_ready_seconds=None if row[1] is None else float(row[1]),
        open_batches=int(row[2]),
        unfinished_rows=bool(row[3]),
    )


@translate_database_errors
async def cut_output_batch(
    connection: psycopg.AsyncConnection[Any], owner_uid: str, *, limit: int
) -> OutputBatch | None:
    """Assign up to `limit` finished rows in no batch yet to the output's next batch, and
    commit; None when no row is ready. Two callers never cut the same row or number."""
    async with connection.transaction():
        locked = await connection.execute(statements.OUTPUT_LOCK, {"owner_uid": owner_uid})
        if await locked.fetchone() is None:
            return None
        cursor = await connection.execute(
            statements.OUTPUT_BATCH_CUT, {"owner_uid": owner_uid, "limit": limit}
        )
        row = await cursor.fetchone()
    if row is None:
        return None
    return OutputBatch(sequence=int(row[0]), row_ids=tuple(int(i) for i in row[1]), cut_at=row[2])


@translate_database_errors
async def open_output_batches(
    connection: psycopg.AsyncConnection[Any], owner_uid: str
) -> list[OutputBatch]:
    """The output's batches cut but not uploaded, oldest first."""
    cursor = await connection.execute(statements.OUTPUT_BATCHES_OPEN, {"owner_uid": owner_uid})
    return [
        OutputBatch(sequence=int(row[0]), row_ids=tuple(int(i) for i in row[1]), cut_at=row[2])
        for row in await cursor.fetchall()
    ]


@translate_database_errors
async def output_batch_rows(
    connection: psycopg.AsyncConnection[Any], owner_uid: str, batch: OutputBatch
) -> list[OutputRow]:
    """The rows of `batch` as its object holds them, in id order."""
    cursor = await connection.execute(
        statements.OUTPUT_BATCH_ROWS, {"owner_uid": owner_uid, "row_ids": list(batch.row_ids)}
    )
    return [
        OutputRow(
            id=int(row[0]),
            url=row[1],
            state=row[2],
            result=row[3],
            error=row[4],
            finished_at=row[5],
            source=bool(row[6]),
        )
        for row in await cursor.fetchall()
    ]


@translate_database_errors
async def mark_output_batch_uploaded(
    connection: psycopg.AsyncConnection[Any],
    owner_uid: str,
    sequence: int,
    *,
    key: str,
    lines: int,
    skipped: int,
    size: int,
    sha256: str,
    counts: Mapping[str, int],
) -> int:
    """Batch `sequence` is in the bucket under `key`: mark it uploaded and its rows delivered,
    in one transaction. Return how many rows were delivered now (0: it was marked before)."""
    cursor = await connection.execute(
        statements.OUTPUT_BATCH_MARK_UPLOADED,
        {
            "owner_uid": owner_uid,
            "sequence": sequence,
            "object_key": key,
            "lines": lines,
            "skipped": skipped,
            "bytes": size,
            "sha256": sha256,
            "counts": json.dumps(dict(counts)),
        },
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def uploaded_output_batches(
    connection: psycopg.AsyncConnection[Any], owner_uid: str
) -> list[UploadedBatch]:
    """Every uploaded batch of the output, in order."""
    cursor = await connection.execute(statements.OUTPUT_BATCHES_UPLOADED, {"owner_uid": owner_uid})
    return [
        UploadedBatch(
            sequence=int(row[0]),
            key=row[1],
            rows=int(row[2]),
            lines=int(row[3]),
            skipped=int(row[4]),
            bytes=int(row[5]),
            sha256=row[6],
            counts={str(k): int(v) for k, v in (row[7] or {}).items()},
            uploaded_at=row[8],
        )
        for row in await cursor.fetchall()
    ]


@translate_database_errors
async def mark_output_finished(
    connection: psycopg.AsyncConnection[Any], owner_uid: str, *, manifest_key: str
) -> bool:
    """The manifest is in the bucket; False when the output was finished before."""
    cursor = await connection.execute(
        statements.OUTPUT_MARK_FINISHED, {"owner_uid": owner_uid, "manifest_key": manifest_key}
    )
    return await cursor.fetchone() is not None


@translate_database_errors
async def record_output_failure(
    connection: psycopg.AsyncConnection[Any], owner_uid: str, *, delay_seconds: float, error: str
) -> int:
    """An upload of this output failed: look again after `delay_seconds`. Return the failures
    in a row, this one included."""
    cursor = await connection.execute(
        statements.OUTPUT_RECORD_FAILURE,
        {"owner_uid": owner_uid, "delay_seconds": delay_seconds, "error": error},
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def record_output_success(connection: psycopg.AsyncConnection[Any], owner_uid: str) -> bool:
    """An upload succeeded; True when the output had failed before (it recovered now)."""
    cursor = await connection.execute(statements.OUTPUT_RECORD_SUCCESS, {"owner_uid": owner_uid})
    return await cursor.fetchone() is not None


@translate_database_errors
async def output_state(
    connection: psycopg.AsyncConnection[Any], owner_uid: str
) -> OutputState | None:
    """The output of `owner_uid` as the table holds it; None when it has none."""
    cursor = await connection.execute(statements.OUTPUT_OF_OWNER, {"owner_uid": owner_uid})
    row = await cursor.fetchone()
    if row is None:
        return None
    return OutputState(
        batches_cut=int(row[0]),
        job_ended_at=row[1],
        manifest_key=row[2],
        finished_at=row[3],
        failures=int(row[4]),
        last_error=row[5],
    )


def batch_counts(rows: Sequence[OutputRow]) -> dict[str, int]:
    """The rows by state, every finished state present (0 when none)."""
    counts = dict.fromkeys(FINISHED_STATES, 0)
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return counts
