"""What the operator owns while it runs: the database pool, the API client, background tasks.

One instance per process, created by the kopf startup handler and closed by the cleanup
handler, so every task has an owner and a shutdown path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

import kopf
from scrapeq_queue import Connection, ConnectionPool, DatabaseUnavailable

from scrapeq_operator import metrics
from scrapeq_operator.cluster import Cluster, ObjectRef
from scrapeq_operator.settings import OperatorSettings

logger = logging.getLogger(__name__)

# Handlers and the two loops share these (the LISTEN connection is separate); each call is one
# short statement, so a few connections carry thousands of ScrapeJobs.
POOL_MAX_SIZE = 6

# Every loop ends within milliseconds of a cancel it receives (its rounds are short
# statements and API calls); one still running after this long did not receive it.
CANCEL_GRACE_SECONDS = 5.0


class FatalTasks:
    """Which background tasks died, and how to stop the operator when one does.

    Every loop handles its own failures round by round; one that ends with an error anyway is
    a bug the process must not hide: `stop` ends kopf as SIGTERM does (cleanup handlers run)
    and `scrapeq operator` exits with status 1, so that the kubelet restarts the pod."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self.stop = stop
        self.died: list[str] = []

    def report(self, name: str) -> None:
        self.died.append(name)
        self.stop()


class OperatorRuntime:
    """The database pool, the Kubernetes client and the background tasks of one operator."""

    def __init__(
        self, settings: OperatorSettings, cluster: Cluster, fatal: FatalTasks | None = None
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        # None (tests that build a runtime by hand): a dead task is only logged.
        self.fatal = fatal
        self.pool = ConnectionPool(
            settings.database_url,
            max_size=POOL_MAX_SIZE,
            timeout=settings.database_timeout_seconds,
            name="scrapeq-operator",
            prepared_statements=not settings.database_pooled,
        )
        # Queues with due rows that no worker pool serves, as the autoscaler last saw them
        # (queue_coverage.py); the status sync marks their ScrapeJobs Stalled.
        self.unserved_queues: frozenset[str] = frozenset()
        # ScrapeJobs whose create handler queued their rows and left their status alone, until
        # the status sync sees kopf's mark on them: kopf's PATCH marking one handled changes no
        # status, so the sync may write its first status without waiting for that PATCH
        # (status_sync.StatusSync._plan). Lost with the process: the sync then waits, as for
        # any job whose create handler it did not see.
        self.created_without_status: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        # The pool does not wait for the database: one that is down at start must not stop
        # the operator from starting; handlers and loops retry until it is back.
        await self.pool.open()

    def connection(self) -> AbstractAsyncContextManager[Connection]:
        """A pooled autocommit connection; DatabaseUnavailable when none can be had (callers
        queue for one of POOL_MAX_SIZE slots without a deadline, see ConnectionPool)."""
        return self.pool.connection()

    async def retry_later(
        self,
        error: DatabaseUnavailable,
        *,
        doing: str,
        target: ObjectRef,
        retry: int,
        reason: str,
        step: str,
    ) -> kopf.TemporaryError:
        """What a handler raises when the database is down: kopf retries it every
        `database_retry_seconds`; the first attempt also posts one Warning Event (`reason`)
        about the ScrapeJob. `doing` completes "cannot …", `step` labels the error metric."""
        metrics.RECONCILE_ERRORS_TOTAL.labels(step).inc()
        if retry == 0:
            await self.cluster.announce(
                target,
                type_="Warning",
                reason=reason,
                message=f"cannot {doing} yet, database unavailable; retrying: {error}",
            )
        return kopf.TemporaryError(
            f"cannot {doing}, database unavailable: {error}",
            delay=self.settings.database_retry_seconds,
        )

    def spawn(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a background loop owned by this runtime until `close`; one that dies with an
        error stops the operator (FatalTasks)."""
        task = asyncio.create_task(coroutine, name=name)
        task.add_done_callback(self._task_ended)
        self._tasks.append(task)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        logger.critical(
            "background task %s died: %r; stopping the operator",
            task.get_name(),
            error,
            exc_info=error,
        )
        if self.fatal is not None:
            self.fatal.report(task.get_name())

    async def _cancel_tasks(self) -> None:
        """Cancel every loop until it has ended. A cancel can be lost on the way (on Python
        3.11, asyncio.wait_for inside a library returns its result when the cancel lands as
        its wait completes): a loop still running after CANCEL_GRACE_SECONDS is cancelled
        again, and said so, instead of holding the shutdown until kopf kills the process."""
        running = {task for task in self._tasks if not task.done()}
        while running:
            for task in running:
                task.cancel()
            _, running = await asyncio.wait(running, timeout=CANCEL_GRACE_SECONDS)
            for task in running:
                logger.warning(
                    "background task %s still runs %.0f s after it was cancelled; "
                    "cancelling it again",
                    task.get_name(),
                    CANCEL_GRACE_SECONDS,
                )

    async def close(self) -> None:
        """Cancel the background loops, then close the pool and the API client."""
        # Waiting for the loops raises nothing: a loop that died was reported, and its error
        # retrieved, when it ended (_task_ended), so the rest of the shutdown always runs.
        await self._cancel_tasks()
        self._tasks.clear()
        await self.pool.close()
        self.cluster.close()
