"""Wake-ups: the NOTIFY channel the table's insert trigger signals, and waiting on it.

LISTEN needs a session of its own: not a pooled connection behind PgBouncer in transaction
mode, and not one that runs other statements while waiting. Workers keep polling as a fallback
(delayed rows become due without any NOTIFY).

`listen_and_wake` is the one listening loop for every component: it holds that session, calls
back on every notification and after every reconnection, and outlives database outages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Final, NoReturn

import psycopg

from scrapeq_queue.connections import connect, reconnect_delay
from scrapeq_queue.errors import QueueError, translate_database_errors

logger = logging.getLogger(__name__)

# Must match the channel in migrations/0001_initial.sql (scrapeq_notify_jobs).
NOTIFY_CHANNEL: Final = "scrapeq_jobs"

LISTEN: Final = "LISTEN scrapeq_jobs"

# The channel on which a row that opted in (column notify_finished) signals that it finished:
# completed, failed for good or cancelled, with {"id", "queue", "state"} as the payload. Must
# match sql/finished_signal.sql; for SQL producers (docs/queue.md, "Signals for SQL
# producers"): scrapeq's own components do not listen to it.
FINISHED_CHANNEL: Final = "scrapeq_finished"


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


# How long one wait for a notification lasts before waiting again; each wait also notices a
# connection that died quietly.
IDLE_CHECK_SECONDS: Final = 30.0


async def listen_and_wake(
    conninfo: str,
    wake: Callable[[], None],
    *,
    application_name: str = "scrapeq-listen",
    idle_check_seconds: float = IDLE_CHECK_SECONDS,
) -> NoReturn:
    """Listen on NOTIFY_CHANNEL until cancelled, calling `wake()` on every notification.

    `wake()` is also called each time the LISTEN session is (re)established: rows inserted
    while nobody listened sent notifications nobody heard, and a reconnection is the sign that
    the database is back. A lost connection is reopened after `reconnect_delay` (at most about
    a second), for as long as the outage lasts; the first failure of an outage is logged as a
    warning, the recovery as info. Only cancellation (or an exception from `wake`) ends it.
    """
    failures = 0
    lost_at = 0.0
    while True:
        connection: psycopg.AsyncConnection[Any] | None = None
        try:
            connection = await connect(conninfo, application_name=application_name)
            await listen(connection)
            if failures:
                logger.info(
                    "LISTEN connection back after %.1fs (%d attempts)",
                    time.monotonic() - lost_at,
                    failures,
                )
            failures = 0
            wake()
            while True:
                if await wait_for_notification(connection, idle_check_seconds):
                    wake()
        except QueueError as error:
            failures += 1
            if failures == 1:
                lost_at = time.monotonic()
                logger.warning("LISTEN connection lost (%s); reconnecting", error)
        finally:
            if connection is not None:
                with contextlib.suppress(psycopg.Error, OSError):
                    await connection.close()
        await asyncio.sleep(reconnect_delay(failures))
