"""The worker loop: claim small batches, scrape up to `concurrency` pages at once, report each
outcome through the queue package, renew leases, drain on SIGTERM.

Shape of one worker process:

* the main loop keeps at most `concurrency + batch_size` jobs: it claims up to `batch_size`
  in one statement whenever there is room, starts a task per job (tasks wait for one of the
  `concurrency` page slots, so a slot never waits for a claim), then sleeps until a job
  finishes, a NOTIFY arrives, or `poll_seconds` pass;
* a listener task holds its own LISTEN connection (LISTEN cannot share a busy connection);
* a lease task renews the leases of held jobs every third of `lease_seconds`, stops work
  whose lease was lost, and returns other workers' expired leases to the queue;
* every job task turns the scrape's outcome into exactly one queue write: complete (batched
  with whatever other completions are waiting), retry (with the site's Retry-After when it
  sent one) or fail. An unexpected exception in a job is logged and retried as
  `internal_error`; it never reaches the loop.

Database outages are retried on a fresh connection at least once a second (the queue
package's `reconnect_delay`), so work resumes within about a second of the server coming back;
leases are renewed as soon as it answers again, and the rescue of other workers' expired leases
waits until every live worker had the time to renew its own. Claims use one connection and
writes another, each behind a lock, because a psycopg connection interleaves statements of
concurrent tasks into each other's transactions.

A worker that cannot work (no writable temporary directory, no browser, a schema behind) claims
nothing and reports not-ready until the cause is gone (see readiness.py). A background task
that dies stops the worker with exit status 1, so that its pod restarts.

SIGTERM (or SIGINT): stop claiming, release jobs that have not started, give pages in flight
`drain_seconds` to finish, release the rest back to pending (not counted as a retry), close
the browser, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import scrapeq_queue
from scrapeq_queue import (
    ClaimedJob,
    Completion,
    Connection,
    DatabaseUnavailable,
    FollowUrl,
    QueueError,
    RobotsCopy,
    SchemaOutOfDate,
)
from scrapeq_queue.sealed_credentials import SealingKeys

from .browser import BrowserPool
from .errors import BrowserUnavailable, PermanentFailure, RetryLater, WorkerError
from .following import followed_payload
from .http_engine import HttpEngine
from .http_status import SERVER_ERROR_REASONS
from .job_options import JobOptions, options_from_payload
from .metrics import MetricsServer, WorkerMetrics
from .network_guard import NetworkGuard
from .readiness import RECHECK_SECONDS, Problem, Readiness, browser_problem, temp_dir_problem
from .robots import (
    MAX_ROBOTS_BYTES,
    ROBOTS_TIMEOUT_SECONDS,
    RobotsRead,
    RobotsRules,
    respects_robots,
)
from .scraper import Scraper, ScrapeResult
from .settings import WorkerSettings

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
# A completion waiting to be written and the future its job waits on.
_Waiting = tuple[Completion, "asyncio.Future[bool | None]"]

# After the drain deadline, how long releasing the leftovers may still take.
_RELEASE_GRACE_SECONDS = 3.0
_COMPLETION_WRITER = "worker-completions"
# Browser failures that are the worker's, not the job's: the job goes back to the queue
# untouched and the worker stops claiming until the cause is gone.
_CANNOT_WORK: dict[str, Problem] = {
    "browser_missing": "browser",
    "browser_launch_failed": "browser",
    "temp_dir_unwritable": "temp_dir",
}


@dataclass
class _Running:
    job: ClaimedJob
    task: asyncio.Task[None]
    started: float = field(default_factory=time.monotonic)
    # Set when the job must not write its outcome any more (lease lost, or released).
    abandoned: bool = False
    # Set once the job holds a page slot (before that it only waits in this worker).
    page_started: bool = False
    # Set once the page is done and its outcome is being written. Such a task is never
    # cancelled: cutting a psycopg statement short can leave the shared connection unusable.
    reporting: bool = False


class _Channel:
    """One database connection and the lock that keeps its statements from interleaving.

    The worker has two: claims on one, outcome writes and lease renewals on the other, so a
    claim never waits behind a batch of completions (each commit waits for its WAL flush).
    """

    def __init__(self, database_url: str, application_name: str) -> None:
        self._database_url = database_url
        self._application_name = application_name
        self.lock = asyncio.Lock()
        self.connection: Connection | None = None

    async def connected(self) -> Connection:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            self.connection = connection = await scrapeq_queue.connect(
                self._database_url, application_name=self._application_name
            )
        return connection

    @property
    def usable(self) -> bool:
        return self.connection is not None and not self.connection.closed

    async def drop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


async def _require_current_schema(connection: Connection) -> bool:
    await scrapeq_queue.require_current_schema(connection)
    return True


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _owner(job: ClaimedJob) -> str | None:
    if job.owner_namespace and job.owner_name:
        return f"{job.owner_namespace}/{job.owner_name}"
    return None


def _job_log(job: ClaimedJob, **more: Any) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "queue": job.queue,
        "owner": _owner(job),
        **more,
    }


class Worker:
    """One worker process's loop. `await run()` returns the exit status."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        metrics: WorkerMetrics | None = None,
        install_signal_handlers: bool = True,
        recheck_seconds: float = RECHECK_SECONDS,
    ) -> None:
        """`recheck_seconds`: how often a worker that cannot work checks again."""
        if not settings.database_url:
            raise ValueError("the worker needs a database (--database-url or DATABASE_URL)")
        self.settings = settings
        self.worker_id = settings.resolved_worker_id
        self.metrics = metrics or WorkerMetrics()
        self.guard = NetworkGuard(allow_networks=settings.allow_networks)
        # Only from the environment, never a flag: a key on the command line shows in `ps`.
        self.sealing_keys = SealingKeys.from_environment()
        self.browser = BrowserPool(
            settings.browser_settings(),
            self.guard,
            on_restart=lambda reason: self.metrics.browser_restarts.labels(reason).inc(),
            metrics=self.metrics,
        )
        self.http = HttpEngine(
            self.guard,
            max_response_bytes=settings.max_response_bytes,
            user_agent=settings.user_agent,
            upstream_proxy=settings.upstream_proxy,
        )
        # robots.txt goes through the plain-HTTP engine: the same guard, proxy and user agent;
        # the cluster's copy of each file is in the queue database.
        self.robots = RobotsRules(
            lambda url: self.http.fetch_text(
                url, timeout_seconds=ROBOTS_TIMEOUT_SECONDS, max_bytes=MAX_ROBOTS_BYTES
            ),
            shared=self,
        )
        self.scraper = Scraper(
            self.browser,
            self.http,
            per_domain_concurrency=settings.per_domain_concurrency,
            max_result_bytes=settings.max_result_bytes,
            metrics=self.metrics,
        )
        self._install_signal_handlers = install_signal_handlers
        self._running: dict[int, _Running] = {}
        self._completions: list[_Waiting] = []
        self._completion_writer: asyncio.Task[None] | None = None
        self._pages: asyncio.Semaphore | None = None
        self._claims: _Channel | None = None
        self._writes: _Channel | None = None
        self._wake: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._last_tick = time.monotonic()
        self.readiness = Readiness(
            self.metrics.ready,
            self.metrics.not_ready,
            initially="database",
            why="not connected yet",
        )
        # When the readiness checks run next (None: not until a job shows a problem).
        self._recheck_seconds = recheck_seconds
        # How many readiness rounds have run (each `recheck_seconds` while one check fails).
        self.readiness_rounds = 0
        self._recheck_at: float | None = 0.0
        # The local checks (temporary directory, browser) are due at start and while one fails.
        self._local_checks_due = True
        self._schema_verified = False
        # A launch failed: only launching again tells whether the browser is back.
        self._launch_failed = False
        # Consecutive failed database operations, and when the last one failed.
        self._database_failures = 0
        self._last_database_failure = -math.inf
        self._database_back: asyncio.Event | None = None
        self._exit_status = 0
        self.metrics_server: MetricsServer | None = None
        self.jobs_finished = 0

    # --- public --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin the graceful drain (what SIGTERM does). Safe to call more than once."""
        if self._stopping is not None and not self._stopping.is_set():
            logger.info("stop requested: draining %d in-flight jobs", len(self._running))
            self._stopping.set()
            self.readiness.report("stopping", "draining")
        if self._wake is not None:
            self._wake.set()

    @property
    def live(self) -> bool:
        """The main loop made progress recently (for /healthz)."""
        limit = max(60.0, self.settings.poll_seconds * 10, self._recheck_seconds * 3)
        return time.monotonic() - self._last_tick < limit

    @property
    def ready(self) -> bool:
        """Connected to the database, able to work and taking work (for /readyz)."""
        return self.readiness.ready

    async def run(self) -> int:
        """Run until the queue is empty (burst) or a stop is requested. Returns 0, or 1 when
        the worker could not work in a burst run or one of its background tasks died."""
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._database_back = asyncio.Event()
        self._pages = asyncio.Semaphore(self.settings.concurrency)
        assert self.settings.database_url is not None
        self._claims = _Channel(self.settings.database_url, f"scrapeq-worker {self.worker_id}")
        self._writes = _Channel(
            self.settings.database_url, f"scrapeq-worker-writes {self.worker_id}"
        )
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        if self._install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request_stop)
                    handled.append(sig)
        background: list[asyncio.Task[None]] = []
        try:
            if self.settings.metrics_port:
                self.metrics_server = MetricsServer(
                    self.metrics,
                    host=self.settings.metrics_host,
                    port=self.settings.metrics_port,
                    is_live=lambda: self.live,
                    not_ready_because=lambda: (
                        None if self.readiness.ready else self.readiness.describe()
                    ),
                )
                await self.metrics_server.start()
            await self.http.start()
            # The browser starts with the first rendered job: a worker that only sees
            # `render: false` jobs never pays for Chromium.
            background.append(
                asyncio.create_task(
                    scrapeq_queue.listen_and_wake(
                        self.settings.database_url,
                        self._wake.set,
                        application_name=f"scrapeq-worker-listen {self.worker_id}",
                    ),
                    name="worker-listen",
                )
            )
            background.append(asyncio.create_task(self._keep_leases(), name="worker-leases"))
            for task in background:
                task.add_done_callback(self._background_ended)
            await self._claim_loop()
            await self._drain()
        finally:
            for task in background:
                task.cancel()
            # A task that failed was reported when it ended (_background_ended).
            await asyncio.gather(*background, return_exceptions=True)
            await self._abandon_all()
            await self.browser.close()
            await self.http.close()
            await self._claims.drop()
            await self._writes.drop()
            if self.metrics_server is not None:
                await self.metrics_server.stop()
            for sig in handled:
                loop.remove_signal_handler(sig)
        logger.info(
            "worker %s stopped after %d jobs (exit status %d)",
            self.worker_id,
            self.jobs_finished,
            self._exit_status,
        )
        return self._exit_status

    def _background_ended(self, task: asyncio.Task[Any]) -> None:
        """The listener and the lease keeper run until the worker cancels them, and the
        completion writer until it has nothing to write: one that ends any other way stops
        the worker with exit status 1 (its pod restarts) instead of leaving it half working,
        say without lease renewals, or with jobs waiting for a writer that is gone."""
        if task.cancelled():
            return
        error = task.exception()
        if error is None and task.get_name() == _COMPLETION_WRITER:
            return
        logger.critical(
            "background task %s ended (%r); stopping the worker",
            task.get_name(),
            error,
            exc_info=error,
        )
        self._exit_status = 1
        self.request_stop()

    # --- the claim loop ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self._stopping is not None
        assert self._wake is not None
        while not self._stopping.is_set():
            self._last_tick = time.monotonic()
            # Cleared before claiming: a NOTIFY or a finished job during the claim still wakes us.
            self._wake.clear()
            if self._recheck_at is not None and time.monotonic() >= self._recheck_at:
                await self._check_readiness()
            if not self.readiness.can_claim or not self._schema_verified:
                if self.settings.burst and not self.readiness.can_claim:
                    logger.error(
                        "burst mode: this worker cannot work (%s); exiting",
                        self.readiness.describe(),
                    )
                    self._exit_status = 1
                    return
                # Jobs it holds but has not started go back for healthy workers at once.
                await self._abandon_all(only_waiting=True)
                if self._recheck_at is None:
                    self._recheck_at = time.monotonic() + self._recheck_seconds
                await self._pause(max(0.0, self._recheck_at - time.monotonic()))
                continue
            free = self._free_slots()
            claimed: list[ClaimedJob] | None = []
            if free > 0:
                limit = min(self.settings.batch_size, free)
                claimed = await self._database(
                    lambda connection: scrapeq_queue.claim_jobs(
                        connection,
                        worker_id=self.worker_id,
                        queues=self.settings.queues,
                        limit=limit,  # noqa: B023 - called before the loop moves on
                        lease_seconds=self.settings.lease_seconds,
                        politeness=self.settings.politeness,
                    ),
                    what="claim jobs",
                    claims=True,
                )
                for job in claimed or ():
                    self._start(job)
            if claimed is None:
                continue  # a database error; _database already waited out the backoff
            # An empty claim can also mean that every due row's site is at its politeness
            # limit, delayed or paused: a burst run ends only when nothing is due at all.
            if (
                self.settings.burst
                and not claimed
                and not self._running
                and await self._nothing_due()
            ):
                logger.info("burst mode: no job is due; exiting")
                return
            if claimed and self._free_slots() > 0:
                continue  # there may be more due work for the free slots
            await wait_for_event(self._wake, self.settings.poll_seconds)

    async def _obey_robots_txt(self, job: ClaimedJob, options: JobOptions) -> None:
        """Raise when the site's robots.txt forbids the job's URL (or cannot be read); the job
        that fetched the file records its Crawl-delay for every claimer (scrapeq_hosts). The
        file is fetched the way the job's page is: through the job's own upstream proxies."""
        if not respects_robots(job.payload, self.settings.respect_robots_txt):
            return
        fetch = None
        if options.upstream_proxies:
            proxies = options.upstream_proxies

            async def fetch(url: str) -> tuple[int, str]:
                return await self.http.fetch_text(
                    url,
                    timeout_seconds=ROBOTS_TIMEOUT_SECONDS,
                    max_bytes=MAX_ROBOTS_BYTES,
                    upstream_proxies=proxies,
                )

        verdict = await self.robots.check(job.url, fetch)
        if verdict.fresh and job.host_key is not None:
            host_key = job.host_key
            await self._database(
                lambda connection: scrapeq_queue.set_crawl_delay(
                    connection, host_key, verdict.crawl_delay_seconds or 0.0
                ),
                what=f"record the Crawl-delay of {host_key}",
            )

    async def robots_copy(self, origin: str, lease_seconds: float) -> RobotsCopy | None:
        """The cluster's copy of `origin`'s robots.txt, or the lease to fetch it (RobotsRules'
        shared store); None when the database failed."""
        return await self._database(
            lambda connection: scrapeq_queue.robots_copy(
                connection, origin, lease_seconds=lease_seconds
            ),
            what=f"read the cluster's robots.txt of {origin}",
        )

    async def store_robots_copy(self, origin: str, read: RobotsRead, ttl_seconds: float) -> None:
        """Store this worker's read of `origin`'s robots.txt for the cluster."""
        await self._database(
            lambda connection: scrapeq_queue.store_robots_copy(
                connection,
                origin,
                status=read.status,
                body=read.body,
                problem=read.problem,
                ttl_seconds=ttl_seconds,
            ),
            what=f"store the robots.txt of {origin}",
        )

    async def _nothing_due(self) -> bool:
        backlog = await self._database(
            lambda connection: scrapeq_queue.queue_backlog(connection, self.settings.queues),
            what="read the backlog",
            claims=True,
        )
        return backlog is not None and all(queue.due_pending == 0 for queue in backlog.values())

    async def _check_readiness(self) -> None:
        """Run every readiness check and schedule the next round while one fails."""
        self.readiness_rounds += 1
        if self._local_checks_due:
            self.readiness.report("temp_dir", await asyncio.to_thread(temp_dir_problem))
            self.readiness.report("browser", await self._browser_problem())
            self._local_checks_due = self.readiness.holds("temp_dir") or self.readiness.holds(
                "browser"
            )
        if not self._schema_verified:
            verified = await self._database(
                _require_current_schema, what="check the database schema", claims=True
            )
            if verified:
                self._schema_verified = True
                self.readiness.report("schema", None)
        if self.readiness.can_claim and self._schema_verified:
            self._recheck_at = None
        elif self.readiness.can_claim:
            # Only the database did not answer; that attempt already waited its short backoff.
            self._recheck_at = time.monotonic()
        else:
            self._recheck_at = time.monotonic() + self._recheck_seconds

    async def _browser_problem(self) -> str | None:
        problem = await browser_problem(self.settings.chromium, self.browser.executable)
        if problem is None and self._launch_failed:
            try:
                await self.browser.start()
            except BrowserUnavailable as error:
                return error.message
            self._launch_failed = False
        return problem

    def _cannot_work(self, problem: Problem, message: str) -> None:
        """A job showed that this worker cannot work: stop claiming until a check passes."""
        self.readiness.report(problem, message)
        if problem == "browser":
            self._launch_failed = True
        if problem == "schema":
            self._schema_verified = False
        else:
            self._local_checks_due = True
        if self._recheck_at is None:
            self._recheck_at = time.monotonic() + self._recheck_seconds

    def _start(self, job: ClaimedJob) -> None:
        self.metrics.jobs_claimed.labels(job.queue).inc()
        latency = (job.claimed_at - job.run_at).total_seconds()
        self.metrics.claim_latency.labels(job.queue).observe(max(0.0, latency))
        task = asyncio.create_task(self._work(job), name=f"job-{job.id}")
        self._running[job.id] = _Running(job, task)

    # --- one job -------------------------------------------------------------------------------

    async def _work(self, job: ClaimedJob) -> None:
        started = time.monotonic()  # reset once a page slot is free: waiting is not work
        try:
            scraped: ScrapeResult | None = None
            failure: WorkerError | None = None
            assert self._pages is not None
            async with self._pages:
                self._page_started(job)
                started = time.monotonic()
                try:
                    options = options_from_payload(
                        job.payload,
                        default_timeout_seconds=self.settings.page_timeout_seconds,
                        sealing_keys=self.sealing_keys,
                        default_block_resources=self.settings.block_resources,
                    )
                    await self._obey_robots_txt(job, options)
                    scraped = await self.scraper.scrape(
                        job.url, options, depth=job.depth, owner=job.owner_uid
                    )
                except WorkerError as error:
                    failure = error
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    logger.exception("unexpected error in job %s", job.id, extra=_job_log(job))
                    failure = RetryLater(
                        f"internal error: {type(error).__name__}: {error}",
                        reason="internal_error",
                    )
            # Out of the page slot: the next job renders while this outcome is written.
            self._reporting(job)
            duration = time.monotonic() - started
            if isinstance(failure, BrowserUnavailable) and failure.reason in _CANNOT_WORK:
                # The worker's fault, not the job's: back to the queue, no retry spent.
                self._cannot_work(_CANNOT_WORK[failure.reason], failure.message)
                await self._hand_back(job)
            elif isinstance(failure, RetryLater):
                await self._report_retry(job, failure, duration)
            elif isinstance(failure, PermanentFailure):
                await self._report_failure(job, failure, duration)
            elif failure is not None:
                await self._report_retry(
                    job, RetryLater(failure.message, reason=failure.reason), duration
                )
            else:
                assert scraped is not None
                await self._report_success(job, scraped, duration)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Reporting itself failed for good; the lease will expire and the job be rescued.
            logger.exception("could not record the outcome of job %s", job.id, extra=_job_log(job))
        finally:
            self._running.pop(job.id, None)
            self.jobs_finished += 1
            if self._wake is not None:
                self._wake.set()

    def _reporting(self, job: ClaimedJob) -> None:
        running = self._running.get(job.id)
        if running is not None:
            running.reporting = True

    def _page_started(self, job: ClaimedJob) -> None:
        running = self._running.get(job.id)
        if running is not None:
            running.page_started = True

    def _free_slots(self) -> int:
        """How many more jobs to claim: the worker holds at most `concurrency` pages plus one
        batch waiting for a page slot, so a slot never waits for a claim round trip and a slow
        database cannot make claimed work pile up."""
        held_limit = self.settings.concurrency + self.settings.batch_size
        return max(0, held_limit - len(self._running))

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
        if self._completion_writer is None or self._completion_writer.done():
            self._completion_writer = asyncio.create_task(
                self._write_completions(), name=_COMPLETION_WRITER
            )
            self._completion_writer.add_done_callback(self._background_ended)
        return await asyncio.shield(future)

    async def _write_completions(self) -> None:
        batch: list[_Waiting] = []
        try:
            while self._completions:
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

    async def _write_batch(
        self, batch: list[tuple[Completion, asyncio.Future[bool | None]]]
    ) -> None:
        try:
            done = await self._database(
                lambda connection: scrapeq_queue.complete_many(
                    connection, [completion for completion, _ in batch]
                ),
                what=f"complete {len(batch)} jobs",
                persistent=True,
            )
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

    def _still_ours(self, job: ClaimedJob) -> bool:
        running = self._running.get(job.id)
        return running is not None and not running.abandoned

    async def _report_success(
        self, job: ClaimedJob, scraped: ScrapeResult, duration: float
    ) -> None:
        if not self._still_ours(job):
            return
        follow_payload = (
            followed_payload(job.payload, scraped.follow) if scraped.follow is not None else None
        )
        follow = [FollowUrl(url, payload=follow_payload) for url in scraped.follow_urls]
        try:
            current = await self._store_result(job, scraped, duration, follow)
        except Exception as error:
            logger.exception("could not store the result of job %s", job.id, extra=_job_log(job))
            await self._report_retry(
                job,
                RetryLater(
                    f"could not store the result: {type(error).__name__}: {error}",
                    reason="internal_error",
                ),
                duration,
            )
            return
        if current:
            self.metrics.jobs_completed.labels(job.queue).inc()
            self.metrics.job_duration.labels(job.queue, "completed").observe(duration)
            logger.info(
                "completed %s in %.0f ms",
                job.url,
                duration * 1000,
                extra=_job_log(job, outcome="completed", follow=len(follow)),
            )
        elif current is False:
            self.metrics.jobs_fenced.labels(job.queue).inc()

    async def _store_result(
        self, job: ClaimedJob, scraped: ScrapeResult, duration: float, follow: list[FollowUrl]
    ) -> bool | None:
        """Complete the job; True = recorded, False = fenced out, None = not recorded before
        the worker stopped."""
        if follow:
            # Children and parent commit together, so this one cannot join a batch.
            return await self._database(
                lambda connection: scrapeq_queue.complete_job(
                    connection,
                    job.id,
                    job.attempt,
                    result=scraped.result,
                    duration_seconds=duration,
                    follow_urls=follow,
                    follow_limit=scraped.follow.max_pages if scraped.follow else None,
                ),
                what=f"complete job {job.id}",
                persistent=True,
            )
        return await self._complete_in_batch(
            Completion(job.id, job.attempt, scraped.result, duration)
        )

    async def _report_retry(self, job: ClaimedJob, error: RetryLater, duration: float) -> None:
        if not self._still_ours(job):
            return
        outcome = await self._database(
            lambda connection: scrapeq_queue.retry_job(
                connection,
                job.id,
                job.attempt,
                error=error.message,
                reason=error.reason,
                duration_seconds=duration,
                retry_after_seconds=error.delay_seconds,
                # A site that says "come back later" (429/503 with Retry-After) or keeps
                # failing means every worker should leave it alone, not only this row.
                pause_host_seconds=(
                    error.delay_seconds if error.reason in SERVER_ERROR_REASONS else None
                ),
                server_error=error.reason in SERVER_ERROR_REASONS,
                host_key=job.host_key,
            ),
            what=f"retry job {job.id}",
            persistent=True,
        )
        if outcome == "retrying":
            self.metrics.jobs_retried.labels(job.queue, error.reason).inc()
            self.metrics.job_duration.labels(job.queue, "retried").observe(duration)
        elif outcome == "failed":
            self.metrics.jobs_failed.labels(job.queue, error.reason).inc()
            self.metrics.job_duration.labels(job.queue, "failed").observe(duration)
        elif outcome == "fenced":
            self.metrics.jobs_fenced.labels(job.queue).inc()
        logger.warning(
            "%s: %s (%s)",
            outcome or "unrecorded",
            error.message,
            error.reason,
            extra=_job_log(job, outcome=outcome, reason=error.reason),
        )

    async def _report_failure(
        self, job: ClaimedJob, error: PermanentFailure, duration: float
    ) -> None:
        if not self._still_ours(job):
            return
        current = await self._database(
            lambda connection: scrapeq_queue.fail_job(
                connection,
                job.id,
                job.attempt,
                error=error.message,
                reason=error.reason,
                duration_seconds=duration,
            ),
            what=f"fail job {job.id}",
            persistent=True,
        )
        if current:
            self.metrics.jobs_failed.labels(job.queue, error.reason).inc()
            self.metrics.job_duration.labels(job.queue, "failed").observe(duration)
        elif current is False:
            self.metrics.jobs_fenced.labels(job.queue).inc()
        logger.warning(
            "failed: %s (%s)",
            error.message,
            error.reason,
            extra=_job_log(job, outcome="failed", reason=error.reason),
        )

    # --- database access -----------------------------------------------------------------------

    async def _database(
        self,
        operation: Callable[[Connection], Awaitable[_T]],
        *,
        what: str,
        persistent: bool = False,
        claims: bool = False,
    ) -> _T | None:
        """Run one queue operation on the write (or, with `claims`, the claim) connection;
        None when the database failed.

        `persistent` operations (recording an outcome) are retried until they succeed or the
        worker stops; others (claims, renewals) give up after one short wait so that their
        loop can re-evaluate. The wait after a lost connection is at most about a second
        (`reconnect_delay`), so work resumes that soon after the database is back. A schema
        behind this code makes the worker not ready (it stops claiming) instead.
        """
        channel = self._claims if claims else self._writes
        assert channel is not None
        assert self._stopping is not None
        while True:
            try:
                async with channel.lock:
                    connection = await channel.connected()
                    result = await operation(connection)
            except SchemaOutOfDate as error:
                self._cannot_work("schema", str(error))
                if not persistent or self._stopping.is_set():
                    return None
                await self._pause(self._recheck_seconds)
                continue
            except (DatabaseUnavailable, QueueError) as error:
                delay = self._database_failed(what, error)
                await channel.drop()
                if not persistent or self._stopping.is_set():
                    await self._pause(delay)
                    return None
                await asyncio.sleep(delay)
                continue
            self._database_answered()
            return result

    def _database_failed(self, what: str, error: Exception) -> float:
        """Count a failed operation; return how long to wait before the next attempt."""
        self.metrics.database_errors.inc()
        self._database_failures += 1
        self._last_database_failure = time.monotonic()
        self.readiness.report("database", f"unavailable: {error}")
        delay = scrapeq_queue.reconnect_delay(self._database_failures)
        # The first failure of an outage says what happened; the retries that follow every
        # second or so would only repeat it.
        log = logger.warning if self._database_failures == 1 else logger.debug
        log("could not %s: %s; retrying in %.1fs", what, error, delay)
        return delay

    def _database_answered(self) -> None:
        if self._database_failures:
            logger.info("the database answers again after %d failures", self._database_failures)
            self._database_failures = 0
            assert self._database_back is not None
            self._database_back.set()
        self.readiness.report("database", None)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when a stop is requested."""
        assert self._stopping is not None
        await wait_for_event(self._stopping, seconds)

    async def _hand_back(self, job: ClaimedJob) -> None:
        """Release a job this worker cannot run: pending and due now, no retry counted."""
        if not self._still_ours(job):
            return
        released = await self._database(
            lambda connection: scrapeq_queue.release_jobs(
                connection, worker_id=self.worker_id, jobs=[job.token]
            ),
            what=f"release job {job.id}",
            persistent=True,
        )
        if released:
            self.metrics.jobs_released.labels(job.queue).inc()
            logger.warning(
                "released job %s: this worker cannot work (%s)",
                job.id,
                self.readiness.describe(),
                extra=_job_log(job, outcome="released"),
            )

    # --- background tasks ----------------------------------------------------------------------

    async def _keep_leases(self) -> None:
        """Renew in-flight leases every third of the lease, and at once when the database is
        back after an outage; abandon jobs whose lease is gone; return expired leases of dead
        workers to the queue once per lease period.

        Renewing a lease that expired during an outage is sound: renewal (like completion) is
        fenced by attempt, and succeeds only while no one has rescued the row. So after an
        outage this worker rescues nothing until it has been connected for a whole renewal
        interval, the time every live worker needs to renew its own leases.
        """
        assert self._stopping is not None
        assert self._database_back is not None
        interval = self.settings.lease_seconds / 3
        last_rescue = time.monotonic()
        while True:
            await wait_for_event(self._database_back, interval)
            self._database_back.clear()
            # A failed renewal is retried after the short reconnect delay, not a whole interval.
            while not await self._renew_leases() and not self._stopping.is_set():
                pass
            now = time.monotonic()
            if (
                now - last_rescue >= self.settings.lease_seconds
                and now - self._last_database_failure >= interval
            ):
                last_rescue = now
                rescued = await self._database(
                    scrapeq_queue.rescue_expired_leases, what="rescue expired leases"
                )
                if rescued:
                    self.metrics.leases_rescued.inc(rescued)

    async def _renew_leases(self) -> bool:
        """Renew the leases of every job still ours; False when the database did not answer."""
        running = [entry for entry in self._running.values() if not entry.abandoned]
        if not running:
            return True
        tokens = [entry.job.token for entry in running]
        renewed = await self._database(
            lambda connection: scrapeq_queue.renew_leases(
                connection,
                worker_id=self.worker_id,
                jobs=tokens,
                lease_seconds=self.settings.lease_seconds,
            ),
            what="renew leases",
        )
        if renewed is None:
            return False
        for entry in running:
            if entry.job.id not in renewed and entry.job.id in self._running:
                logger.warning(
                    "lease of job %s lost (cancelled or rescued); stopping it",
                    entry.job.id,
                    extra=_job_log(entry.job),
                )
                entry.abandoned = True
                if not entry.reporting:
                    entry.task.cancel()
        return True

    # --- drain ---------------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Let in-flight jobs finish until the drain deadline; release what is left."""
        if not self._running:
            return
        deadline = time.monotonic() + self.settings.drain_seconds
        logger.info(
            "draining: %d jobs in flight, %.0fs to finish",
            len(self._running),
            self.settings.drain_seconds,
        )
        # Jobs still waiting for a page slot go straight back to the queue for other workers.
        await self._abandon_all(only_waiting=True)
        tasks = [entry.task for entry in self._running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        await self._abandon_all()

    async def _abandon_all(self, *, only_waiting: bool = False) -> None:
        """Stop every job still running (or, with `only_waiting`, every job that has not got
        a page slot yet) and hand it back to the queue as pending."""
        writing = [entry.task for entry in self._running.values() if entry.reporting]
        if writing and not only_waiting:
            # Outcomes being written finish on their own (a statement or two).
            await asyncio.wait(writing, timeout=_RELEASE_GRACE_SECONDS)
        leftovers = [
            entry
            for entry in self._running.values()
            if not entry.abandoned
            and not entry.reporting
            and not (only_waiting and entry.page_started)
        ]
        if not leftovers:
            return
        for entry in leftovers:
            entry.abandoned = True
            entry.task.cancel()
        await asyncio.gather(*(entry.task for entry in leftovers), return_exceptions=True)
        tokens = [entry.job.token for entry in leftovers]
        try:
            async with asyncio.timeout(_RELEASE_GRACE_SECONDS):
                assert self._writes is not None
                async with self._writes.lock:
                    connection = await self._writes.connected()
                    released = await scrapeq_queue.release_jobs(
                        connection, worker_id=self.worker_id, jobs=tokens
                    )
        except (TimeoutError, QueueError) as error:
            logger.error(
                "could not release %d jobs (%s); their leases will expire and they will be rescued",
                len(tokens),
                error,
            )
            return
        for entry in leftovers:
            self.metrics.jobs_released.labels(entry.job.queue).inc()
        logger.info("released %d unfinished jobs back to the queue", released)


async def wait_for_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` pass; True when it was set.

    Not `asyncio.wait_for`: on Python 3.11 it can swallow a cancellation that arrives as the
    event is set, and a background loop cancelled at shutdown then runs on, so the worker never
    exits (seen after a database restart: the lease keeper was woken and cancelled at once).
    `asyncio.timeout` passes the cancellation on.
    """
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
