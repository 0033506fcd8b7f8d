"""Wake-ups: the NOTIFY channel the table's insert trigger signals, and waiting on it.

LISTEN needs a session of its own: not a pooled connection behind PgBouncer in transaction
mode, and not one that runs other statements while waiting. Workers keep polling as a fallback
(delayed rows become due without any NOTIFY).
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from scrapeq_queue.errors import translate_database_errors

# Must match the channel in migrations/0001_initial.sql (scrapeq_notify_jobs).
NOTIFY_CHANNEL: Final = "scrapeq_jobs"

LISTEN: Final = "LISTEN scrapeq_jobs"


@translate_database_errors
async def listen(connection: psycopg.AsyncConnection[Any]) -> None:
    """Subscribe an autocommit connection to NOTIFY_CHANNEL."""
    await connection.execute(LISTEN)


@translate_database_errors
async def wait_for_notification(
    connection: psycopg.AsyncConnection[Any],
    timeout: float,  # noqa: ASYNC109 - the timeout is psycopg's own notifies(timeout=), not a wrapper
) -> bool:
    """Wait up to `timeout` seconds for a notification on a listening connection.

    True when one arrived (new or released work may be due), False on timeout. Raises
    DatabaseUnavailable when the connection breaks, so the caller reconnects and listens again.
    """
    async for _ in connection.notifies(timeout=timeout, stop_after=1):
        return True
    return False
