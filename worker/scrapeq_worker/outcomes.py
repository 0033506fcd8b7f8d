"""Outcome reporting: every job's end becomes exactly one queue write, with its metrics and
its log line.

* a success completes the row; completions without followed links are written together with
  whatever other completions are waiting (group commit: one statement and one commit for the
  batch, while the previous batch is being written the next one gathers);
* a retryable failure schedules the row again (with the site's Retry-After when it sent one,
  and pausing the whole site when it keeps failing or asks to be left alone);
* a permanent failure fails the row for good;
* a job this worker cannot run (no browser, say) is handed back untouched.

Writes are retried through database outages until they are recorded or the worker stops. A job
that is no longer this worker's (lease lost, or released) writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from scrapeq_queue import ClaimedJob, Completion, FollowUrl, PageWrite

from .background import OnEnd, wait_for_event
from .errors import PageBlocked, PermanentFailure, RetryLater
from .following import followed_rows
from .http_status import SERVER_ERROR_REASONS
from .metrics import WorkerMetrics
from .queue_gateway import QueueGateway
from .scraper import ScrapeResult

logger = logging.getLogger(__name__)

# A completion waiting to be written and the future its job waits on.
_Waiting = tuple[Completion, "asyncio.Future[bool | None]"]
COMPLETION_WRITER = "worker-completions"
# Group commit: a batch of fewer than COMPLETION_LINGER_BELOW completions waits this long for
# more before it is written (less, once that many wait). A completion statement costs
# PostgreSQL about the same for one row as for several, and rows that end fast (a 304, a static
# page) end a few per millisecond: the wait makes their batches larger, and their statements
# and commits fewer, for at most 2 ms more on a job (docs/worker.md, "How a worker runs").
COMPLETION_LINGER_SECONDS: Final = 0.002
COMPLETION_LINGER_BELOW: Final = 8


def _owner(job: ClaimedJob) -> str | None:
    if job.owner_namespace and job.owner_name:
        return f"{job.owner_namespace}/{job.owner_name}"
    return None


def job_log(job: ClaimedJob, **more: Any) -> dict[str, Any]:
    """The structured log fields of one job."""
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "queue": job.queue,
        "owner": _owner(job),
        **more,
    }


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class OutcomeReporter:
    """Writes the outcomes of one worker's jobs."""

    def __init__(
        self,
        gateway: QueueGateway,
        metrics: WorkerMetrics,
        *,
        still_ours: Callable[[ClaimedJob], bool],
        on_writer_end: OnEnd,
    ) -> None:
        """`still_ours(job)`: the job's outcome may still be written. `on_writer_end` hears of
        a completion writer that died of an error (jobs would wait for a writer that is gone)."""
        self._gateway = gateway
        self._metrics = metrics
        self._still_ours = still_ours
        self._on_writer_end = on_writer_end
        self._completions: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None
        # Set once COMPLETION_LINGER_BELOW completions wait: the writer's wait ends at once.
        self._batch_full = asyncio.Event()

    async def succeeded(self, job: ClaimedJob, scraped: ScrapeResult, duration: float) -> None:
        if not self._still_ours(job):
            return
        follow = followed_rows(
            job.payload,
            scraped.follow_urls,
            scraped.follow,
            owned=job.owner_uid is not None,
            labels=scraped.follow_labels,
        )
        if scraped.next_page is not None:
            follow.append(scraped.next_page)
        try:
            current = await self._store_result(job, scraped, duration, follow)
        except Exception as error:
            logger.exception("could not store the result of job %s", job.id, extra=job_log(job))
            await self.retry(
                job,
                RetryLater(
                    f"could not store the result: {type(error).__name__}: {error}",
                    reason="internal_error",
                ),
                duration,
            )
            return
        if current and scraped.recrawl is not None:
            self._metrics.recrawl_pages.labels(job.queue, scraped.recrawl).inc()
        if current:
            self._metrics.jobs_completed.labels(job.queue).inc()
            self._metrics.job_duration.labels(job.queue, "completed").observe(duration)
            logger.info(
                "completed %s in %.0f ms",
                job.url,
                duration * 1000,
                extra=job_log(job, outcome="completed", follow=len(follow)),
            )
        elif current is False:
            self._metrics.jobs_fenced.labels(job.queue).inc()

    async def retry(self, job: ClaimedJob, error: RetryLater, duration: float) -> None:
        if not self._still_ours(job):
            return
        outcome = await self._gateway.retry_job(
            job,
            error=error.message,
            reason=error.reason,
            duration_seconds=duration,
            retry_after_seconds=error.delay_seconds,
            # A site that says "come back later" (429/503 with Retry-After) or keeps failing
            # means every worker should leave it alone, not only this row.
            pause_site_seconds=(
                error.delay_seconds
                if error.reason in SERVER_ERROR_REASONS or isinstance(error, PageBlocked)
                else None
            ),
            server_error=error.reason in SERVER_ERROR_REASONS,
        )
        if isinstance(error, PageBlocked):
            # A blocked row is retried by its own retry policy; with a session, the session
            # pool has counted the block and the retry takes another session
            # (session_pool.py).
            self._metrics.pages_blocked.labels(job.queue, error.rule).inc()
        if outcome == "retrying":
            self._metrics.jobs_retried.labels(job.queue, error.reason).inc()
            self._metrics.job_duration.labels(job.queue, "retried").observe(duration)
        elif outcome == "failed":
            self._metrics.jobs_failed.labels(job.queue, error.reason).inc()
            self._metrics.job_duration.labels(job.queue, "failed").observe(duration)
        elif outcome == "fenced":
            self._metrics.jobs_fenced.labels(job.queue).inc()
        logger.warning(
            "%s: %s (%s)",
            outcome or "unrecorded",
            error.message,
            error.reason,
            extra=job_log(job, outcome=outcome, reason=error.reason),
        )

    async def failed(self, job: ClaimedJob, error: PermanentFailure, duration: float) -> None:
        if not self._still_ours(job):
            return
        current = await self._gateway.fail_job(
            job, error=error.message, reason=error.reason, duration_seconds=duration
        )
        if current:
            self._metrics.jobs_failed.labels(job.queue, error.reason).inc()
            self._metrics.job_duration.labels(job.queue, "failed").observe(duration)
        elif current is False:
            self._metrics.jobs_fenced.labels(job.queue).inc()
        logger.warning(
            "failed: %s (%s)",
            error.message,
            error.reason,
            extra=job_log(job, outcome="failed", reason=error.reason),
        )

    async def handed_back(self, job: ClaimedJob, why: str) -> None:
        """Release a job this worker cannot run: pending and due now, no retry counted."""
        if not self._still_ours(job):
            return
        if await self._gateway.release(job):
            self._metrics.jobs_released.labels(job.queue).inc()
            logger.warning(
                "released job %s: this worker cannot work (%s)",
                job.id,
                why,
                extra=job_log(job, outcome="released"),
            )

    async def _store_result(
        self, job: ClaimedJob, scraped: ScrapeResult, duration: float, follow: list[FollowUrl]
    ) -> bool | None:
        """Complete the job; True = recorded, False = fenced out, None = not recorded before
        the worker stopped."""
        # The crawl memory of the fetch commits with the completion (decision record 14).
        crawl_key = job.payload.get("crawlKey")
        memory = (
            PageWrite(crawl_key, job.url, scraped.visit)
            if scraped.visit is not None and isinstance(crawl_key, str)
            else None
        )
        if follow:
            # Children and parent commit together, so this one cannot join a batch.
            return await self._gateway.complete_job(
                job,
                result=scraped.result,
                duration_seconds=duration,
                follow_urls=follow,
                follow_limit=scraped.follow.max_pages if scraped.follow else None,
                memory=memory,
            )
        return await self._complete_in_batch(
            Completion(job.id, job.attempt, scraped.result, duration, memory=memory)
        )

    # --- group commit --------------------------------------------------------------------------

    async def _complete_in_batch(self, completion: Completion) -> bool | None:
        """Record a completion together with whatever others are waiting (group commit).

        While one batch is being written, the next ones queue up; each write is one statement
        and one commit for all of them. True = recorded, False = fenced out, None = the
        database stayed unavailable until the worker stopped.
        """
        future: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        # Seen even when the waiting job was cancelled meanwhile (its wait is shielded).
        future.add_done_callback(_retrieve_exception)
        self._completions.append((completion, future))
        if len(self._completions) >= COMPLETION_LINGER_BELOW:
            self._batch_full.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_completions(), name=COMPLETION_WRITER)
            self._writer.add_done_callback(self._writer_ended)
        return await asyncio.shield(future)

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        # A writer ends when it has nothing left to write; only an error is news.
        if not task.cancelled() and task.exception() is not None:
            self._on_writer_end(task.get_name(), task.exception())

    async def _write_completions(self) -> None:
        batch: list[_Waiting] = []
        try:
            while self._completions:
                if len(self._completions) < COMPLETION_LINGER_BELOW:
                    self._batch_full.clear()
                    await wait_for_event(self._batch_full, COMPLETION_LINGER_SECONDS)
                batch, self._completions = self._completions, []
                await self._write_batch(batch)
        except BaseException as error:
            # No job may wait forever for its outcome: whatever ended this writer answers
            # every completion it had taken (the next completion starts a new writer).
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(error)
            raise

    async def _write_batch(self, batch: list[_Waiting]) -> None:
        try:
            done = await self._gateway.complete_many([completion for completion, _ in batch])
        except Exception as error:
            # Not a connection problem: the database refused this batch. One completion it
            # cannot store must not take the others with it, so each is written on its own.
            if len(batch) == 1:
                batch[0][1].set_exception(error)
                return
            logger.warning(
                "could not complete %d jobs together (%s: %s); completing them one by one",
                len(batch),
                type(error).__name__,
                error,
            )
            for entry in batch:
                await self._write_batch([entry])
            return
        for completion, future in batch:
            if not future.done():
                future.set_result(None if done is None else completion.job_id in done)
