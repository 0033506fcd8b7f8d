"""The worker loop: claim small batches, scrape up to `concurrency` pages at once, drain on
SIGTERM.

Shape of one worker process:

* the claim loop keeps at most `concurrency + batch_size` jobs: once at least `batch_size` of
  those places are free it claims them all in one statement, starts a task per job (tasks wait
  for one of the `concurrency` page slots, so a slot never waits for a claim), then sleeps
  until a job finishes, a NOTIFY arrives, or `poll_seconds` pass;
* every job task turns the scrape's outcome into exactly one queue write (outcomes.py). An
  unexpected exception in a job is logged and retried as `internal_error`; it never reaches
  the loop;
* beside the loop run the listener (NOTIFY of new work), the lease keeper (leases.py) and the
  rescuer (rescuer.py), each owned by an `async with` block of `run`. One that dies stops the
  worker with exit status 1, so that its pod restarts.

Every queue operation goes through the queue gateway (queue_gateway.py), which rides out
database outages. A worker that cannot work (no writable temporary directory, no browser, a
schema behind) claims nothing and reports not-ready until the cause is gone (readiness.py).

SIGTERM (or SIGINT): stop claiming, release jobs that have not started, give pages in flight
`drain_seconds` to finish, release the rest back to pending (not counted as a retry), close
the browser, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import scrapeq_queue
from scrapeq_queue import ClaimedJob, PageMemory
from scrapeq_queue.sealed_credentials import SealingKeys
from scrapeq_queue.site_policies import SITE_NOT_ALLOWED_REASON, SiteRule

from .background import owned_task, wait_for_event
from .browser import BrowserPool
from .errors import BrowserUnavailable, PermanentFailure, RetryLater, WorkerError
from .http_engine import HttpEngine
from .job_options import JobOptions, options_from_payload
from .leases import Leases
from .metrics import MetricsServer, WorkerMetrics
from .network_guard import NetworkGuard
from .object_store import ObjectStore
from .outcomes import OutcomeReporter, job_log
from .parser_publication import ParserPublication
from .parsers import ParserRegistry, ParserRunner
from .queue_gateway import PostgresBackend, QueueBackend, QueueGateway, Token
from .readiness import (
    RECHECK_SECONDS,
    LocalChecks,
    MachineChecks,
    Problem,
    Readiness,
    ReadinessSchedule,
)
from .recrawl import skipped_document
from .rescuer import Rescuer
from .robots import MAX_ROBOTS_BYTES, ROBOTS_TIMEOUT_SECONDS, RobotsRules, respects_robots
from .scraper import Scraper, ScrapeResult
from .session_pool import SessionPool
from .settings import WorkerSettings
from .url_sources import SourceExpansion, is_object_source, is_source_row
from .user_agent import product_token, user_agent

logger = logging.getLogger(__name__)

# Scrape one claimed job with its options (Scraper.scrape, unless a test stands in for it).
Scrape = Callable[[ClaimedJob, JobOptions], Awaitable[ScrapeResult]]

# After the drain deadline, how long releasing the leftovers may still take.
_RELEASE_GRACE_SECONDS = 3.0
# Browser failures that are the worker's, not the job's: the job goes back to the queue
# untouched and the worker stops claiming until the cause is gone.
_CANNOT_WORK: dict[str, Problem] = {
    "browser_missing": "browser",
    "browser_launch_failed": "browser",
    "temp_dir_unwritable": "temp_dir",
}

# How long the crawl memory the claim read stays good for its row: a row that waited longer for
# a page slot reads again (another run of its crawl may have written the URL since).
MEMORY_READ_AHEAD_SECONDS = 2.0


@dataclass
class _Running:
    job: ClaimedJob
    task: asyncio.Task[None]
    # When this worker claimed it (monotonic): how old the crawl memory its claim read is.
    claimed_at: float = field(default_factory=time.monotonic)
    # Set when the job must not write its outcome any more (lease lost, or released).
    abandoned: bool = False
    # Set once the job holds a page slot (before that it only waits in this worker).
    page_started: bool = False
    # Set once the page is done and its outcome is being written. Such a task is never
    # cancelled: cutting a psycopg statement short can leave the shared connection unusable.
    reporting: bool = False


class Worker:
    """One worker process's loop. `await run()` returns the exit status."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        metrics: WorkerMetrics | None = None,
        install_signal_handlers: bool = True,
        recheck_seconds: float = RECHECK_SECONDS,
        backend: QueueBackend | None = None,
        scrape: Scrape | None = None,
        checks: LocalChecks | None = None,
        reconnect_delay: Callable[[int], float] = scrapeq_queue.reconnect_delay,
        parsers: ParserRegistry | None = None,
    ) -> None:
        """`recheck_seconds`: how often a worker that cannot work checks again. `backend`,
        `scrape`, `checks` and `reconnect_delay` replace the real queue, the engines, the
        machine checks and the backoff after a database failure (the unit tests' seams).
        `parsers`: the parsers to offer; by default those the image's installed packages
        register (loaded here, once per process)."""
        if not settings.database_url:
            raise ValueError("the worker needs a database (--database-url or DATABASE_URL)")
        if len(set(settings.queues)) != len(settings.queues) or not settings.queues:
            # Refused here, once: the claim would refuse it on every call.
            raise ValueError(
                f"the worker needs each queue named once, got {list(settings.queues)} "
                "(--queue, SCRAPEQ_QUEUES drop repeats; settings made in code must too)"
            )
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
            max_result_bytes=settings.max_result_bytes,
            user_agent=settings.user_agent,
            upstream_proxy=settings.upstream_proxy,
        )
        self.parsers = parsers if parsers is not None else ParserRegistry.from_entry_points()
        self.parser_runner = ParserRunner(
            self.parsers, threads=settings.concurrency, max_result_bytes=settings.max_result_bytes
        )
        store_config = settings.object_store_config()
        self.object_store = ObjectStore(store_config) if store_config is not None else None
        self.scraper = Scraper(
            self.browser,
            self.http,
            max_result_bytes=settings.max_result_bytes,
            object_store=self.object_store,
            metrics=self.metrics,
            parsers=self.parser_runner,
            # A parser reads at most what a page may download.
            html_limit=settings.max_response_bytes,
        )
        self._scrape = scrape or self._scrape_page
        self._install_signal_handlers = install_signal_handlers
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._pages = asyncio.Semaphore(settings.concurrency)
        self._running: dict[int, _Running] = {}
        self._last_tick = time.monotonic()
        self._exit_status = 0
        self.readiness = ReadinessSchedule(
            Readiness(
                self.metrics.ready,
                self.metrics.not_ready,
                initially="database",
                why="not connected yet",
            ),
            checks or MachineChecks(settings.chromium, self.browser),
            recheck_seconds=recheck_seconds,
        )
        self.gateway = QueueGateway(
            backend
            or PostgresBackend(
                settings.database_url,
                self.worker_id,
                listen_url=settings.database_listen_url,
                pooled=settings.database_pooled,
            ),
            worker_id=self.worker_id,
            metrics=self.metrics,
            readiness=self.readiness,
            stopping=self._stopping,
            reconnect_delay=reconnect_delay,
        )
        # Source rows (a sitemap, a robots.txt) stream through the plain-HTTP engine into rows.
        self.sources = SourceExpansion(self.http, self.gateway, object_store=self.object_store)
        self.sessions = SessionPool(
            self.gateway,
            self.metrics,
            rules=settings.session_rules,
            enabled=settings.sessions,
            pool_upstream=settings.upstream_proxy,
        )
        self.outcomes = OutcomeReporter(
            self.gateway,
            self.metrics,
            still_ours=self._still_ours,
            on_writer_end=self._background_ended,
        )
        # robots.txt goes through the plain-HTTP engine: the same guard, proxy and user agent;
        # the cluster's copy of each file is in the queue database.
        self.robots = RobotsRules(
            lambda url: self.http.fetch_text(
                url, timeout_seconds=ROBOTS_TIMEOUT_SECONDS, max_bytes=MAX_ROBOTS_BYTES
            ),
            shared=self.gateway,
        )
        # Its parsers, published before the first claim (parser_publication.py).
        self.publication = ParserPublication(
            self.gateway,
            queues=self.settings.queues,
            parsers=self.parsers.names,
            on_end=self._background_ended,
            on_published=self._wake.set,
        )
        self.metrics_server: MetricsServer | None = None
        self.jobs_finished = 0

    # --- public --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin the graceful drain (what SIGTERM does). Safe to call more than once."""
        if not self._stopping.is_set():
            logger.info("stop requested: draining %d in-flight jobs", len(self._running))
            self._stopping.set()
            self.readiness.stopping()
        self._wake.set()

    @property
    def live(self) -> bool:
        """The main loop made progress recently (for /healthz)."""
        limit = max(60.0, self.settings.poll_seconds * 10, self.readiness.recheck_seconds * 3)
        return time.monotonic() - self._last_tick < limit

    @property
    def ready(self) -> bool:
        """Connected to the database, able to work and taking work (for /readyz)."""
        return self.readiness.ready

    @property
    def readiness_rounds(self) -> int:
        """How many rounds of readiness checks have run."""
        return self.readiness.rounds

    async def run(self) -> int:
        """Run until the queue is empty (burst) or a stop is requested. Returns 0, or 1 when
        the worker could not work in a burst run or one of its background tasks died."""
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        if self._install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request_stop)
                    handled.append(sig)
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
            async with (
                owned_task(
                    "worker-listen", self.gateway.listen(self._wake.set), self._background_ended
                ),
                Leases(
                    self.gateway,
                    lease_seconds=self.settings.lease_seconds,
                    held=self._held,
                    lost=self._lease_lost,
                    stopping=self._stopping,
                    on_end=self._background_ended,
                ),
                Rescuer(
                    self.gateway,
                    self.metrics,
                    lease_seconds=self.settings.lease_seconds,
                    on_end=self._background_ended,
                ),
                self.publication,
            ):
                await self._claim_loop()
                await self._drain()
        finally:
            await self._abandon_all()
            await self.browser.close()
            await self.http.close()
            self.parser_runner.close()
            await self.gateway.close()
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

    def _background_ended(self, name: str, error: BaseException | None) -> None:
        """The listener, the lease keeper and the rescuer run until the worker stops them, and
        a completion writer until it has nothing to write: one that ends any other way stops
        the worker with exit status 1 (its pod restarts) instead of leaving it half working,
        say without lease renewals, or with jobs waiting for a writer that is gone."""
        logger.critical(
            "background task %s ended (%r); stopping the worker", name, error, exc_info=error
        )
        self._exit_status = 1
        self.request_stop()

    # --- the claim loop ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._last_tick = time.monotonic()
            # Cleared before claiming: a NOTIFY or a finished job during the claim still wakes us.
            self._wake.clear()
            if self.readiness.due:
                await self.readiness.check(self.gateway.schema_is_current)
            if not self.readiness.can_claim:
                if self.settings.burst and self.readiness.cannot_work:
                    logger.error(
                        "burst mode: this worker cannot work (%s); exiting",
                        self.readiness.describe(),
                    )
                    self._exit_status = 1
                    return
                # Jobs it holds but has not started go back for healthy workers at once.
                await self._abandon_all(only_waiting=True)
                await wait_for_event(self._stopping, self.readiness.seconds_to_next_round())
                continue
            if not self.publication.published.is_set():
                # No row before the worker's parsers are published: the operator queues a job
                # that names a parser by what the queue's workers published.
                await wait_for_event(self._wake, self.settings.poll_seconds)
                continue
            free = self._free_slots()
            claimed: list[ClaimedJob] | None = []
            if free > 0:
                claimed = await self.gateway.claim(
                    queues=self.settings.queues,
                    limit=free,
                    lease_seconds=self.settings.lease_seconds,
                    politeness=self.settings.politeness,
                )
                for job in claimed or ():
                    self._start(job)
            if claimed is None:
                continue  # the claim failed; the gateway already waited out the backoff
            # An empty claim can also mean that every due row's site is at its politeness
            # limit, delayed or paused: a burst run ends only when nothing is due at all.
            if (
                self.settings.burst
                and not claimed
                and not self._running
                and await self.gateway.nothing_due(self.settings.queues)
            ):
                logger.info("burst mode: no job is due; exiting")
                return
            if free > 0 and len(claimed) == free and self._free_slots() > 0:
                continue  # all it asked for: there may be more due work for the free slots
            # A short claim took what was claimable (the rest is at its sites' limits, not due
            # or held by other claims): the next claim waits for a job to end or a NOTIFY.
            await wait_for_event(self._wake, self.settings.poll_seconds)

    def _free_slots(self) -> int:
        """How many more jobs to claim: the worker holds at most `concurrency` pages plus one
        batch waiting for a page slot, so a slot never waits for a claim round trip and a slow
        database cannot make claimed work pile up. It claims once at least a batch of places
        is free, and then all of them: a claim costs about the same for 4 rows as for 12, and
        rows that end fast (a 304, a skip) would otherwise be claimed a few at a time, a claim
        statement each."""
        held_limit = self.settings.concurrency + self.settings.batch_size
        free = held_limit - len(self._running)
        return free if free >= self.settings.batch_size else 0

    def _start(self, job: ClaimedJob) -> None:
        self.metrics.jobs_claimed.labels(job.queue).inc()
        latency = (job.claimed_at - job.run_at).total_seconds()
        self.metrics.claim_latency.labels(job.queue).observe(max(0.0, latency))
        task = asyncio.create_task(self._work(job), name=f"job-{job.id}")
        self._running[job.id] = _Running(job, task)

    async def _page_memory(self, job: ClaimedJob, crawl_key: str) -> PageMemory | None:
        """The row's crawl memory: what its claim read (ClaimedJob.memory) when that is for the
        same crawl and recent enough, else a read now."""
        running = self._running.get(job.id)
        if (
            running is not None
            and job.payload.get("crawlKey") == crawl_key
            and time.monotonic() - running.claimed_at <= MEMORY_READ_AHEAD_SECONDS
        ):
            return job.memory
        return await self.gateway.page_memory(crawl_key, job.url)

    # --- leases --------------------------------------------------------------------------------

    def _held(self) -> list[Token]:
        return [entry.job.token for entry in self._running.values() if not entry.abandoned]

    def _lease_lost(self, job_id: int) -> None:
        entry = self._running.get(job_id)
        if entry is None or entry.abandoned:
            return
        logger.warning(
            "lease of job %s lost (cancelled or rescued); stopping it",
            job_id,
            extra=job_log(entry.job),
        )
        entry.abandoned = True
        if not entry.reporting:
            entry.task.cancel()

    def _still_ours(self, job: ClaimedJob) -> bool:
        running = self._running.get(job.id)
        return running is not None and not running.abandoned

    # --- one job -------------------------------------------------------------------------------

    async def _work(self, job: ClaimedJob) -> None:
        started = time.monotonic()  # reset once a page slot is free: waiting is not work
        try:
            scraped: ScrapeResult | None = None
            failure: WorkerError | None = None
            async with self._pages:
                self._mark(job, page_started=True)
                started = time.monotonic()
                try:
                    options = options_from_payload(
                        job.payload,
                        default_timeout_seconds=self.settings.page_timeout_seconds,
                        sealing_keys=self.sealing_keys,
                        default_block_resources=self.settings.block_resources,
                        default_block_markers=self.settings.block_markers,
                        loaded=True,
                        checked=job.options_checked,
                    )
                    rule = await self._site_rule(job)
                    await self._obey_robots_txt(job, options, rule)
                    options = with_policy_user_agent(options, rule)
                    options, session = await self.sessions.take(job, options)
                    try:
                        if is_source_row(job.payload):
                            scraped = await self.sources.expand(job, options)
                        else:
                            scraped = await self._scrape(job, options)
                    except WorkerError as error:
                        failure = error
                    if session is not None:
                        failure = await self.sessions.record(
                            job, session, failure, scraped.cookies if scraped else None
                        )
                except WorkerError as error:
                    failure = error
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    logger.exception("unexpected error in job %s", job.id, extra=job_log(job))
                    failure = RetryLater(
                        f"internal error: {type(error).__name__}: {error}",
                        reason="internal_error",
                    )
            # Out of the page slot: the next job renders while this outcome is written.
            self._mark(job, reporting=True)
            duration = time.monotonic() - started
            if isinstance(failure, BrowserUnavailable) and failure.reason in _CANNOT_WORK:
                # The worker's fault, not the job's: back to the queue, no retry spent.
                self.readiness.problem(_CANNOT_WORK[failure.reason], failure.message)
                await self.outcomes.handed_back(job, self.readiness.describe())
            elif isinstance(failure, RetryLater):
                await self.outcomes.retry(job, failure, duration)
            elif isinstance(failure, PermanentFailure):
                await self.outcomes.failed(job, failure, duration)
            elif failure is not None:
                await self.outcomes.retry(
                    job, RetryLater(failure.message, reason=failure.reason), duration
                )
            else:
                assert scraped is not None
                await self.outcomes.succeeded(job, scraped, duration)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Reporting itself failed for good; the lease will expire and the job be rescued.
            logger.exception("could not record the outcome of job %s", job.id, extra=job_log(job))
        finally:
            self._running.pop(job.id, None)
            self.jobs_finished += 1
            self._wake.set()

    def _mark(
        self, job: ClaimedJob, *, page_started: bool = False, reporting: bool = False
    ) -> None:
        running = self._running.get(job.id)
        if running is not None:
            running.page_started |= page_started
            running.reporting |= reporting

    async def _scrape_page(self, job: ClaimedJob, options: JobOptions) -> ScrapeResult:
        parser = self.parsers.choose(
            payload_parser=options.parser,
            parser_type=job.parser_type,
            require_registered=self.settings.require_registered_parsers,
            unregistered=lambda name: self._unregistered_parser_type(job, name),
        )
        memory: PageMemory | None = None
        if options.crawl_key is not None:
            # Read by the row's claim, or again when it waited long (decision record 14). A
            # failed read counts as no memory: the page is fetched in full and says changed.
            memory = await self._page_memory(job, options.crawl_key)
            after = options.recrawl_after_seconds
            if memory is not None and after is not None and memory.age_seconds < after:
                return ScrapeResult(
                    result=skipped_document(job.url, memory, after),
                    follow_urls=(),
                    recrawl="skipped",
                )
        return await self.scraper.scrape(
            job.url,
            options,
            row=(job.queue, job.id),
            depth=job.depth,
            owner=job.owner_uid,
            parser=parser,
            parser_type=job.parser_type,
            payload=job.payload,
            crawl=options.crawl_key is not None,
            memory=memory,
        )

    def _unregistered_parser_type(self, job: ClaimedJob, name: str) -> None:
        if self.metrics.count_unregistered_parser_type(job.queue, name):
            logger.info(
                "parser_type %r names no parser of this worker (registered: %s); %s",
                name[:100],
                ", ".join(self.parsers.names) or "none",
                "such rows fail unknown_parser"
                if self.settings.require_registered_parsers
                else "such rows run their declarative payload",
                extra=job_log(job),
            )

    async def _site_rule(self, job: ClaimedJob) -> SiteRule | None:
        """What the site policies say about the job's site; raise PermanentFailure
        (site_not_allowed) when one refuses the job's namespace the site (docs/queue.md, "Site
        policies"). None when no reading is at hand (the database failed): the claim already
        applied the site's limits, and the operator refused the job's start URLs."""
        if job.host_key is None:
            return None
        rule = await self.gateway.site_rule(job.host_key)
        policy = rule.refusing_policy(job.owner_namespace) if rule is not None else None
        if policy is not None:
            raise PermanentFailure(
                f"site policy {policy} does not let namespace {job.owner_namespace} crawl "
                f"{job.host_key}",
                reason=SITE_NOT_ALLOWED_REASON,
            )
        return rule

    async def _obey_robots_txt(
        self, job: ClaimedJob, options: JobOptions, rule: SiteRule | None
    ) -> None:
        """Raise when the site's robots.txt forbids the job's URL (or cannot be read); the job
        that fetched the file records its Crawl-delay for every claimer (scrapeq_hosts). The
        file is fetched the way the job's page is: through the job's own upstream proxies.
        The stricter rule wins: a site policy that obeys robots.txt overrides a job that does
        not. A site policy's User-Agent fetches the file, and its product token is the one the
        file's groups are matched against."""
        policy_obeys = rule is not None and rule.respect_robots_txt is True
        if not policy_obeys and not respects_robots(job.payload, self.settings.respect_robots_txt):
            return
        if is_object_source(job.payload):
            return  # read from the pool's own object store, not from a site
        fetch = None
        agent = policy_user_agent(rule)
        if options.upstream_proxies or agent is not None:
            proxies = options.upstream_proxies

            async def fetch(url: str) -> tuple[int, str]:
                return await self.http.fetch_text(
                    url,
                    timeout_seconds=ROBOTS_TIMEOUT_SECONDS,
                    max_bytes=MAX_ROBOTS_BYTES,
                    upstream_proxies=proxies,
                    user_agent=agent,
                )

        verdict = await self.robots.check(job.url, fetch, agent=product_token(agent))
        if verdict.fresh and job.host_key is not None:
            await self.gateway.set_crawl_delay(job.host_key, verdict.crawl_delay_seconds or 0.0)

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
        released = await self.gateway.release_within(
            [entry.job.token for entry in leftovers], _RELEASE_GRACE_SECONDS
        )
        if released is None:
            return
        for entry in leftovers:
            self.metrics.jobs_released.labels(entry.job.queue).inc()
        logger.info("released %d unfinished jobs back to the queue", released)


def policy_user_agent(rule: SiteRule | None) -> str | None:
    """The User-Agent the site's policy sets: its userAgent, else scrapeq's own with the
    policy's contact; None when it sets neither."""
    if rule is None or (rule.user_agent is None and rule.contact is None):
        return None
    return rule.user_agent or user_agent(rule.contact)


def with_policy_user_agent(options: JobOptions, rule: SiteRule | None) -> JobOptions:
    """`options` with the User-Agent the site's policy sets (policy_user_agent), which replaces
    one the job's headers name: the cluster admin decides how the cluster introduces itself to
    a site. Unchanged when the policy sets neither."""
    agent = policy_user_agent(rule)
    if agent is None:
        return options
    headers = {
        name: value
        for name, value in (options.headers or {}).items()
        if name.lower() != "user-agent"
    }
    return replace(options, headers={**headers, "User-Agent": agent})
