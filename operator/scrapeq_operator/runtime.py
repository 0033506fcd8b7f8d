"""What the operator owns while it runs: the database pool, the API client, background tasks.

One instance per process, created by the kopf startup handler and closed by the cleanup
handler, so every task has an owner and a shutdown path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import psycopg
import psycopg_pool
from scrapeq_queue.errors import DatabaseUnavailable

from scrapeq_operator.cluster import Cluster
from scrapeq_operator.errors import DatabaseUnavailableError
from scrapeq_operator.settings import OperatorSettings

logger = logging.getLogger(__name__)

# Handlers fail fast when PostgreSQL is down (kopf retries them later), instead of holding a
# handler slot for the pool's default 30 s.
POOL_TIMEOUT_SECONDS = 5.0
# Handlers and the two loops share these (the LISTEN connection is separate); each call is one
# short statement, so a few connections carry thousands of ScrapeJobs.
POOL_MAX_SIZE = 6

# Everything that means "PostgreSQL is not answering right now".
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    DatabaseUnavailableError,
    psycopg_pool.PoolTimeout,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


class OperatorRuntime:
    """The database pool, the Kubernetes client and the background tasks of one operator."""

    def __init__(self, settings: OperatorSettings, cluster: Cluster) -> None:
        self.settings = settings
        self.cluster = cluster
        self.pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] = (
            psycopg_pool.AsyncConnectionPool(
                settings.database_url,
                min_size=1,
                max_size=POOL_MAX_SIZE,
                kwargs={"autocommit": True},
                timeout=POOL_TIMEOUT_SECONDS,
                check=psycopg_pool.AsyncConnectionPool.check_connection,
                open=False,
                name="scrapeq-operator",
            )
        )
        # Queues with due rows that no worker pool serves, as the autoscaler last saw them
        # (queue_coverage.py); the status sync marks their ScrapeJobs Stalled.
        self.unserved_queues: frozenset[str] = frozenset()
        self._tasks: list[asyncio.Task[None]] = []
        self._slots = asyncio.Semaphore(POOL_MAX_SIZE)

    async def open(self) -> None:
        # wait=False: a database that is down at start must not stop the operator from
        # starting; handlers and loops retry until it is back.
        await self.pool.open(wait=False)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection; DatabaseUnavailableError when none can be had.

        Callers first queue for one of POOL_MAX_SIZE slots, without a deadline: a thousand
        ScrapeJobs created at once wait their turn instead of timing out in the pool, and the
        pool's timeout then only measures whether PostgreSQL answers.
        """
        async with self._slots:
            try:
                async with self.pool.connection() as connection:
                    yield connection
            except psycopg_pool.PoolTimeout as error:
                raise DatabaseUnavailableError(f"no database connection: {error}") from error

    def spawn(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a background loop owned by this runtime until `close`."""
        task = asyncio.create_task(coroutine, name=name)
        task.add_done_callback(_log_unexpected_exit)
        self._tasks.append(task)

    async def close(self) -> None:
        """Cancel the background loops, then close the pool and the API client."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.pool.close()
        self.cluster.close()


def _log_unexpected_exit(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.error("background task %s stopped: %r", task.get_name(), error, exc_info=error)
