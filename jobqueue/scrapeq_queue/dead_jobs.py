"""Dead jobs: listing rows that failed for good and putting them back in the queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import InvalidJob, translate_database_errors
from scrapeq_queue.rows import FailedJob


@translate_database_errors
async def failed_jobs(
    connection: psycopg.AsyncConnection[Any],
    *,
    queue: str | None = None,
    owner_namespace: str | None = None,
    owner_name: str | None = None,
    limit: int = 50,
) -> list[FailedJob]:
    """Failed rows matching every given filter (None = any), newest first, at most `limit`."""
    if limit < 1:
        raise InvalidJob(f"limit must be at least 1, not {limit}")
    cursor = await connection.execute(
        statements.JOBS_FAILED,
        {
            "queue": queue,
            "owner_namespace": owner_namespace,
            "owner_name": owner_name,
            "limit": limit,
        },
    )
    return [FailedJob.from_row(row) for row in await cursor.fetchall()]


def _substring_pattern(text: str) -> str:
    # ILIKE treats % and _ as wildcards and \ as the escape character: escape all three so the
    # user's text matches literally, anywhere in last_error.
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@translate_database_errors
async def retry_failed(
    connection: psycopg.AsyncConnection[Any],
    *,
    ids: Sequence[int] | None = None,
    queue: str | None = None,
    owner_namespace: str | None = None,
    owner_name: str | None = None,
    owner_uid: str | None = None,
    error_pattern: str | None = None,
) -> int:
    """Re-queue failed rows matching every given filter; return how many were re-queued.

    At least one filter is required (InvalidJob otherwise), so a bare call never re-runs every
    failure ever recorded. Matching rows become pending and due now with retry_count 0 (a full
    retry budget again); last_error, last_error_reason and the attempts history are kept, and
    the next claim continues the attempt numbering (fencing is unaffected). `error_pattern` is
    a case-insensitive substring of last_error. `owner_uid` narrows to one ScrapeJob object
    (the operator's filter: a name reused after a delete is another uid). One NOTIFY wakes idle
    workers. The finished totals in scrapeq_queue_counters are "ever" totals and are not
    decremented.
    """
    filters = (ids, queue, owner_namespace, owner_name, owner_uid, error_pattern)
    if not any(given is not None and given != "" for given in filters):
        raise InvalidJob(
            "refusing to retry every failed job: give ids, a queue, an owner or an error pattern"
        )
    cursor = await connection.execute(
        statements.JOBS_RETRY_FAILED,
        {
            "ids": None if ids is None else list(ids),
            "queue": queue,
            "owner_namespace": owner_namespace,
            "owner_name": owner_name,
            "owner_uid": owner_uid,
            "error_pattern": None if not error_pattern else _substring_pattern(error_pattern),
        },
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0
