"""Retention: deleting finished rows so the hot table stays small."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

# Rows deleted per transaction: keeps each delete short so it never holds back vacuum or
# blocks claims for long.
PRUNE_BATCH_ROWS: Final = 5_000


@translate_database_errors
async def prune_finished(
    connection: psycopg.AsyncConnection[Any],
    *,
    completed_older_than: timedelta,
    keep_failed: timedelta | None = None,
    batch_rows: int = PRUNE_BATCH_ROWS,
) -> int:
    """Delete finished rows past their retention (with their attempts); return how many.

    Completed and cancelled rows go when finished more than `completed_older_than` ago;
    failed rows are kept for inspection, forever when `keep_failed` is None, else for
    `keep_failed`. Followed children of a deleted row keep their depth and lose parent_id.
    """
    now_row = await (await connection.execute(statements.DATABASE_NOW)).fetchone()
    assert now_row is not None
    now = now_row[0]
    params = {
        "completed_before": now - completed_older_than,
        "failed_before": None if keep_failed is None else now - keep_failed,
        "batch": batch_rows,
    }
    deleted = 0
    while True:
        cursor = await connection.execute(statements.JOBS_PRUNE_BATCH, params)
        row = await cursor.fetchone()
        batch = int(row[0]) if row else 0
        deleted += batch
        if batch < batch_rows:
            return deleted
