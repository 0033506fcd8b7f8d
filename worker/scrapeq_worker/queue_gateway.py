"""The worker's one door to the queue: every queue operation it runs, with what a database
failure means for each.

Two layers:

* a `QueueBackend` runs one queue operation per call and raises the queue package's errors.
  `PostgresBackend` is the real one: claims (and the other reads that decide what to claim) on
  one connection, outcome writes and lease renewals on another, each behind a lock, because a
  psycopg connection interleaves statements of concurrent tasks into each other's
  transactions, and a claim must never wait behind a batch of completions (each commit waits
  for its WAL flush); reads of the crawl memory have a third, opened by the first row with a
  crawl key. The unit tests use an in-memory backend that a conformance test holds
  to the same contract as this one.
* the `QueueGateway` decides what a failure means. A lost database is retried on a fresh
  connection after `reconnect_delay` (at most about a second, so work resumes that soon after
  the server is back); outcome writes are retried until they succeed or the worker stops,
  other operations give up after one short wait so that their loop can re-evaluate. A schema
  behind this code makes the worker not ready (it stops claiming). A claim that raises
  anything else (a row the queue cannot load, say) counts as a failed claim: logged with its
  traceback, counted in `scrapeq_worker_claim_errors_total`, backed off, never the end of the
  worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol, TypeVar

import scrapeq_queue
from scrapeq_queue import (
    ClaimedJob,
    Completion,
    Connection,
    DatabaseUnavailable,
    FollowUrl,
    PageMemory,
    PageWrite,
    QueueBacklog,
    QueueError,
    RetryOutcome,
    RobotsCopy,
    SchemaOutOfDate,
    SitePoliteness,
    source_rows,
)
from scrapeq_queue import sessions as queue_sessions
from scrapeq_queue.sessions import Session, SessionRecord, SessionRules
from scrapeq_queue.site_policies import SiteRule
from scrapeq_queue.source_rows import ExpandedBatch, ExpandedEntry, KeyedEntries, SourceProgress

from .background import wait_for_event
from .metrics import WorkerMetrics
from .readiness import ReadinessSchedule
from .robots import RobotsRead

# A worker reads a site's policy again at most this often: a policy change reaches every worker
# within half a minute, and a busy site costs one small read per worker per half minute.
SITE_RULE_SECONDS: Final = 30.0
# Sites whose policy a worker keeps in memory at once (a few hundred bytes each).
MAX_SITE_RULES: Final = 10_000

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
# (id, attempt): the fencing token of a held row.
Token = tuple[int, int]


@dataclass(frozen=True)
class SessionChoice:
    """What the session pool chose for a page: a session, or None when every proxy of the row
    is retired."""

    session: Session | None


async def _chosen(choosing: Awaitable[Session | None]) -> SessionChoice:
    return SessionChoice(await choosing)


class QueueBackend(Protocol):
    """One queue operation per call; raises DatabaseUnavailable (retry on a new connection),
    SchemaOutOfDate (run `scrapeq migrate`) or another QueueError. Each method promises what
    the scrapeq_queue function of the same name promises."""

    async def claim_jobs(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        politeness: SitePoliteness,
    ) -> list[ClaimedJob]: ...

    async def queue_backlog(self, queues: Sequence[str]) -> dict[str, QueueBacklog]: ...

    async def require_current_schema(self) -> None: ...

    async def complete_many(self, completions: Sequence[Completion]) -> set[int]: ...

    async def complete_job(
        self,
        job_id: int,
        attempt: int,
        *,
        result: dict[str, Any],
        duration_seconds: float,
        follow_urls: Sequence[FollowUrl],
        follow_limit: int | None,
        memory: PageWrite | None = None,
    ) -> bool: ...

    async def retry_job(
        self,
        job_id: int,
        attempt: int,
        *,
        error: str,
        reason: str,
        duration_seconds: float,
        retry_after_seconds: float | None,
        pause_site_seconds: float | None,
        server_error: bool,
        host_key: str | None,
    ) -> RetryOutcome: ...

    async def fail_job(
        self, job_id: int, attempt: int, *, error: str, reason: str, duration_seconds: float
    ) -> bool: ...

    async def release_jobs(self, *, worker_id: str, jobs: Sequence[Token]) -> int: ...

    async def renew_leases(
        self, *, worker_id: str, jobs: Sequence[Token], lease_seconds: float
    ) -> set[int]: ...

    async def rescue_expired_leases(self) -> int: ...

    async def set_crawl_delay(self, host_key: str, crawl_delay_seconds: float) -> None: ...

    async def source_progress(self, job: ClaimedJob) -> SourceProgress | None: ...

    async def enqueue_expanded(
        self,
        job: ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None: ...

    async def robots_copy(self, origin: str, *, lease_seconds: float) -> RobotsCopy: ...

    async def site_rules(self, host_keys: Sequence[str]) -> dict[str, SiteRule]: ...

    async def read_page_memories(
        self, pages: Sequence[tuple[str, str]]
    ) -> list[PageMemory | None]: ...

    async def choose_session(
        self, job_id: int, attempt: int, *, host_key: str, proxy_ids: list[str]
    ) -> Session | None: ...

    async def record_session(
        self,
        job_id: int,
        attempt: int,
        *,
        session_id: int,
        host_key: str,
        outcome: queue_sessions.Outcome,
        cookies: list[dict[str, Any]] | None,
        rules: SessionRules,
    ) -> SessionRecord: ...

    async def store_robots_copy(
        self,
        origin: str,
        *,
        status: int | None,
        body: str | None,
        problem: str | None,
        ttl_seconds: float,
    ) -> None: ...

    async def publish_parsers(self, queues: Sequence[str], parsers: Sequence[str]) -> None:
        """Record that this worker serves `queues` with `parsers` (replacing what it said)."""
        ...

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call `wake()` on every NOTIFY of new work and on every (re)connection; runs until
        cancelled."""
        ...

    async def close(self) -> None: ...


class _Channel:
    """One database connection and the lock that keeps its statements from interleaving."""

    def __init__(
        self, database_url: str, application_name: str, *, prepared_statements: bool = True
    ) -> None:
        self._database_url = database_url
        self._application_name = application_name
        self._prepared_statements = prepared_statements
        self._lock = asyncio.Lock()
        self._connection: Connection | None = None

    async def run(self, operation: Callable[[Connection], Awaitable[_T]]) -> _T:
        """Run `operation` on the connection (opened or reopened as needed); a connection that
        failed is dropped so the next operation starts on a fresh one."""
        async with self._lock:
            try:
                connection = self._connection
                if connection is None or connection.closed or connection.broken:
                    self._connection = connection = await scrapeq_queue.connect(
                        self._database_url,
                        application_name=self._application_name,
                        prepared_statements=self._prepared_statements,
                    )
                return await operation(connection)
            except SchemaOutOfDate:
                raise
            except QueueError:
                await self.drop()
                raise

    async def drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


class PostgresBackend:
    """The real queue: the scrapeq_queue functions on this worker's two connections, and a
    third for LISTEN.

    `pooled`: `database_url` goes through a pooler in transaction mode, so its connections
    prepare no statements; `listen_url` (default `database_url`) is where the LISTEN session
    goes, which must be PostgreSQL itself (or a pooler in session mode).
    """

    def __init__(
        self,
        database_url: str,
        worker_id: str,
        *,
        listen_url: str | None = None,
        pooled: bool = False,
    ) -> None:
        self._database_url = database_url
        self._listen_url = listen_url or database_url
        self._worker_id = worker_id
        self._claims = _Channel(
            database_url, f"scrapeq-worker {worker_id}", prepared_statements=not pooled
        )
        self._writes = _Channel(
            database_url, f"scrapeq-worker-writes {worker_id}", prepared_statements=not pooled
        )

    async def claim_jobs(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        politeness: SitePoliteness,
    ) -> list[ClaimedJob]:
        try:
            return await self._claims.run(
                lambda connection: scrapeq_queue.claim_jobs(
                    connection,
                    worker_id=worker_id,
                    queues=queues,
                    limit=limit,
                    lease_seconds=lease_seconds,
                    politeness=politeness,
                )
            )
        except QueueError:
            raise
        except Exception:
            # The statement's result was not read to its end: start the next on a clean slate.
            await self._claims.drop()
            raise

    async def queue_backlog(self, queues: Sequence[str]) -> dict[str, QueueBacklog]:
        return await self._claims.run(
            lambda connection: scrapeq_queue.queue_backlog(connection, queues)
        )

    async def require_current_schema(self) -> None:
        await self._claims.run(scrapeq_queue.require_current_schema)

    async def complete_many(self, completions: Sequence[Completion]) -> set[int]:
        return await self._writes.run(
            lambda connection: scrapeq_queue.complete_many(connection, completions)
        )

    async def complete_job(
        self,
        job_id: int,
        attempt: int,
        *,
        result: dict[str, Any],
        duration_seconds: float,
        follow_urls: Sequence[FollowUrl],
        follow_limit: int | None,
        memory: PageWrite | None = None,
    ) -> bool:
        return await self._writes.run(
            lambda connection: scrapeq_queue.complete_job(
                connection,
                job_id,
                attempt,
                result=result,
                duration_seconds=duration_seconds,
                follow_urls=follow_urls,
                follow_limit=follow_limit,
                memory=memory,
            )
        )

    async def retry_job(
        self,
        job_id: int,
        attempt: int,
        *,
        error: str,
        reason: str,
        duration_seconds: float,
        retry_after_seconds: float | None,
        pause_site_seconds: float | None,
        server_error: bool,
        host_key: str | None,
    ) -> RetryOutcome:
        return await self._writes.run(
            lambda connection: scrapeq_queue.retry_job(
                connection,
                job_id,
                attempt,
                error=error,
                reason=reason,
                duration_seconds=duration_seconds,
                retry_after_seconds=retry_after_seconds,
                pause_site_seconds=pause_site_seconds,
                server_error=server_error,
                host_key=host_key,
            )
        )

    async def fail_job(
        self, job_id: int, attempt: int, *, error: str, reason: str, duration_seconds: float
    ) -> bool:
        return await self._writes.run(
            lambda connection: scrapeq_queue.fail_job(
                connection,
                job_id,
                attempt,
                error=error,
                reason=reason,
                duration_seconds=duration_seconds,
            )
        )

    async def release_jobs(self, *, worker_id: str, jobs: Sequence[Token]) -> int:
        return await self._writes.run(
            lambda connection: scrapeq_queue.release_jobs(
                connection, worker_id=worker_id, jobs=jobs
            )
        )

    async def renew_leases(
        self, *, worker_id: str, jobs: Sequence[Token], lease_seconds: float
    ) -> set[int]:
        return await self._writes.run(
            lambda connection: scrapeq_queue.renew_leases(
                connection, worker_id=worker_id, jobs=jobs, lease_seconds=lease_seconds
            )
        )

    async def rescue_expired_leases(self) -> int:
        return await self._writes.run(scrapeq_queue.rescue_expired_leases)

    async def source_progress(self, job: ClaimedJob) -> SourceProgress | None:
        return await self._writes.run(
            lambda connection: source_rows.source_progress(connection, job)
        )

    async def enqueue_expanded(
        self,
        job: ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        return await self._writes.run(
            lambda connection: source_rows.enqueue_expanded(
                connection, job, entries, entries_done=entries_done, skipped=skipped
            )
        )

    async def set_crawl_delay(self, host_key: str, crawl_delay_seconds: float) -> None:
        await self._writes.run(
            lambda connection: scrapeq_queue.set_crawl_delay(
                connection, host_key, crawl_delay_seconds
            )
        )

    async def choose_session(
        self, job_id: int, attempt: int, *, host_key: str, proxy_ids: list[str]
    ) -> Session | None:
        return await self._writes.run(
            lambda connection: queue_sessions.choose_session(
                connection,
                job_id=job_id,
                attempt=attempt,
                host_key=host_key,
                proxy_ids=proxy_ids,
            )
        )

    async def record_session(
        self,
        job_id: int,
        attempt: int,
        *,
        session_id: int,
        host_key: str,
        outcome: queue_sessions.Outcome,
        cookies: list[dict[str, Any]] | None,
        rules: SessionRules,
    ) -> SessionRecord:
        return await self._writes.run(
            lambda connection: queue_sessions.record_session(
                connection,
                job_id=job_id,
                attempt=attempt,
                session_id=session_id,
                host_key=host_key,
                outcome=outcome,
                cookies=cookies,
                rules=rules,
            )
        )

    async def robots_copy(self, origin: str, *, lease_seconds: float) -> RobotsCopy:
        return await self._writes.run(
            lambda connection: scrapeq_queue.robots_copy(
                connection, origin, lease_seconds=lease_seconds
            )
        )

    async def site_rules(self, host_keys: Sequence[str]) -> dict[str, SiteRule]:
        return await self._writes.run(
            lambda connection: scrapeq_queue.site_rules(connection, host_keys)
        )

    async def read_page_memories(self, pages: Sequence[tuple[str, str]]) -> list[PageMemory | None]:
        # On the claims' connection: the rows of one claim read right after it, in one
        # statement (QueueGateway.page_memory), and the worker keeps its two connections.
        return await self._claims.run(
            lambda connection: scrapeq_queue.read_page_memories(connection, pages)
        )

    async def store_robots_copy(
        self,
        origin: str,
        *,
        status: int | None,
        body: str | None,
        problem: str | None,
        ttl_seconds: float,
    ) -> None:
        await self._writes.run(
            lambda connection: scrapeq_queue.store_robots_copy(
                connection,
                origin,
                status=status,
                body=body,
                problem=problem,
                ttl_seconds=ttl_seconds,
            )
        )

    async def publish_parsers(self, queues: Sequence[str], parsers: Sequence[str]) -> None:
        await self._writes.run(
            lambda connection: scrapeq_queue.publish_parsers(
                connection, self._worker_id, queues, parsers
            )
        )

    async def listen(self, wake: Callable[[], None]) -> None:
        # A LISTEN session cannot share a busy connection: it holds a third one.
        await scrapeq_queue.listen_and_wake(
            self._listen_url,
            wake,
            application_name=f"scrapeq-worker-listen {self._worker_id}",
        )

    async def close(self) -> None:
        await self._claims.drop()
        await self._writes.drop()


async def _read_page_memories(
    backend: QueueBackend, *, pages: Sequence[tuple[str, str]]
) -> list[PageMemory | None]:
    return await backend.read_page_memories(pages)


class QueueGateway:
    """The queue operations of one worker, each answering None when the database failed."""

    def __init__(
        self,
        backend: QueueBackend,
        *,
        worker_id: str,
        metrics: WorkerMetrics,
        readiness: ReadinessSchedule,
        stopping: asyncio.Event,
        reconnect_delay: Callable[[int], float] = scrapeq_queue.reconnect_delay,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`stopping`: set when the worker stops; retries end and waits are cut short then.
        `reconnect_delay(failures)`: the wait after `failures` consecutive failures."""
        self.backend = backend
        self.worker_id = worker_id
        self._metrics = metrics
        self._readiness = readiness
        self._stopping = stopping
        self._reconnect_delay = reconnect_delay
        self._clock = clock
        # Consecutive failed operations, and since when the database answers (-inf: since
        # the start; None: it does not answer now).
        self._failures = 0
        self._answering_since: float | None = -math.inf
        # Consecutive claims that raised something other than a database error.
        self._claim_errors = 0
        # Set when the database answers again after failures (the lease keeper renews then).
        self.back = asyncio.Event()
        # What the site policies say about each site lately: (read at, rule) by site.
        self._site_rules: dict[str, tuple[float, SiteRule]] = {}
        # Crawl memory reads waiting for the next statement, and the task that makes them.
        self._memory_asked: list[tuple[str, str, asyncio.Future[PageMemory | None]]] = []
        self._memory_reader: asyncio.Task[None] | None = None

    # --- claims --------------------------------------------------------------------------------

    async def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        politeness: SitePoliteness,
    ) -> list[ClaimedJob] | None:
        """Claim up to `limit` due rows; None when the claim failed (after its backoff)."""
        try:
            claimed = await self._run(
                lambda backend: backend.claim_jobs(
                    worker_id=self.worker_id,
                    queues=queues,
                    limit=limit,
                    lease_seconds=lease_seconds,
                    politeness=politeness,
                ),
                what="claim jobs",
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            # Whatever one row holds is that row's problem: the worker backs off and claims
            # again (the rows this claim took come back when their leases expire).
            self._claim_errors += 1
            self._metrics.claim_errors.inc()
            delay = self._reconnect_delay(self._claim_errors)
            logger.exception("claiming failed unexpectedly; claiming again in %.1fs", delay)
            await self._pause(delay)
            return None
        if claimed is not None:
            self._claim_errors = 0
        return claimed

    async def nothing_due(self, queues: Sequence[str]) -> bool:
        """True when the database answered that no row of `queues` is due."""
        backlog = await self._run(
            lambda backend: backend.queue_backlog(queues), what="read the backlog"
        )
        return backlog is not None and all(queue.due_pending == 0 for queue in backlog.values())

    async def schema_is_current(self) -> bool | None:
        """True when the schema is the one this code needs; None when the database did not
        answer or the schema is behind (reported to readiness)."""

        async def verify(backend: QueueBackend) -> bool:
            await backend.require_current_schema()
            return True

        return await self._run(verify, what="check the database schema")

    # --- outcomes (retried until recorded or the worker stops) ---------------------------------

    async def complete_many(self, completions: Sequence[Completion]) -> set[int] | None:
        return await self._run(
            lambda backend: backend.complete_many(completions),
            what=f"complete {len(completions)} jobs",
            persistent=True,
        )

    async def complete_job(
        self,
        job: ClaimedJob,
        *,
        result: dict[str, Any],
        duration_seconds: float,
        follow_urls: Sequence[FollowUrl],
        follow_limit: int | None,
        memory: PageWrite | None = None,
    ) -> bool | None:
        return await self._run(
            lambda backend: backend.complete_job(
                job.id,
                job.attempt,
                result=result,
                duration_seconds=duration_seconds,
                follow_urls=follow_urls,
                follow_limit=follow_limit,
                memory=memory,
            ),
            what=f"complete job {job.id}",
            persistent=True,
        )

    async def retry_job(
        self,
        job: ClaimedJob,
        *,
        error: str,
        reason: str,
        duration_seconds: float,
        retry_after_seconds: float | None,
        pause_site_seconds: float | None,
        server_error: bool,
    ) -> RetryOutcome | None:
        return await self._run(
            lambda backend: backend.retry_job(
                job.id,
                job.attempt,
                error=error,
                reason=reason,
                duration_seconds=duration_seconds,
                retry_after_seconds=retry_after_seconds,
                pause_site_seconds=pause_site_seconds,
                server_error=server_error,
                host_key=job.host_key,
            ),
            what=f"retry job {job.id}",
            persistent=True,
        )

    async def fail_job(
        self, job: ClaimedJob, *, error: str, reason: str, duration_seconds: float
    ) -> bool | None:
        return await self._run(
            lambda backend: backend.fail_job(
                job.id, job.attempt, error=error, reason=reason, duration_seconds=duration_seconds
            ),
            what=f"fail job {job.id}",
            persistent=True,
        )

    async def release(self, job: ClaimedJob) -> int | None:
        """Hand one job back: pending and due now, no retry counted."""
        return await self._run(
            lambda backend: backend.release_jobs(worker_id=self.worker_id, jobs=[job.token]),
            what=f"release job {job.id}",
            persistent=True,
        )

    async def release_within(self, tokens: Sequence[Token], seconds: float) -> int | None:
        """Hand jobs back in one try of at most `seconds` (the end of a drain); None when that
        failed, and then their leases expire and they are rescued."""
        try:
            async with asyncio.timeout(seconds):
                return await self.backend.release_jobs(worker_id=self.worker_id, jobs=tokens)
        except (TimeoutError, QueueError) as error:
            logger.error(
                "could not release %d jobs (%s); their leases will expire and they will be rescued",
                len(tokens),
                error,
            )
            return None

    # --- leases --------------------------------------------------------------------------------

    async def renew_leases(self, tokens: Sequence[Token], lease_seconds: float) -> set[int] | None:
        """The ids among `tokens` whose leases were renewed; None when the database failed."""
        return await self._run(
            lambda backend: backend.renew_leases(
                worker_id=self.worker_id, jobs=tokens, lease_seconds=lease_seconds
            ),
            what="renew leases",
        )

    async def rescue_expired_leases(self) -> int | None:
        return await self._run(
            lambda backend: backend.rescue_expired_leases(), what="rescue expired leases"
        )

    def seconds_answering(self) -> float:
        """How long the database has answered every operation since it last failed (0 while
        it fails, inf when it never failed)."""
        if self._answering_since is None:
            return 0.0
        return self._clock() - self._answering_since

    # --- source rows ---------------------------------------------------------------------------

    async def source_progress(self, job: ClaimedJob) -> SourceProgress | None:
        """How far the source row `job` got in earlier attempts; None when the row is no
        longer this attempt's or the database failed (the expansion should not start)."""
        return await self._run(
            lambda backend: backend.source_progress(job),
            what=f"read the progress of source row {job.id}",
        )

    async def enqueue_expanded(
        self,
        job: ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        """Insert one batch of the source row `job`'s entries; None when the row is no longer
        this attempt's (cancelled, rescued) or the database failed (the expansion stops)."""
        return await self._run(
            lambda backend: backend.enqueue_expanded(
                job, entries, entries_done=entries_done, skipped=skipped
            ),
            what=f"enqueue the entries of source row {job.id}",
        )

    # --- sites ---------------------------------------------------------------------------------

    async def set_crawl_delay(self, host_key: str, crawl_delay_seconds: float) -> None:
        await self._run(
            lambda backend: backend.set_crawl_delay(host_key, crawl_delay_seconds),
            what=f"record the Crawl-delay of {host_key}",
        )

    async def site_rule(self, host_key: str) -> SiteRule | None:
        """What the site policies say about `host_key` (docs/queue.md, "Site policies"), read
        at most every SITE_RULE_SECONDS per site; None when the database failed and no reading
        is at hand."""
        now = self._clock()
        known = self._site_rules.get(host_key)
        if known is not None and now - known[0] < SITE_RULE_SECONDS:
            return known[1]
        rules = await self._run(
            lambda backend: backend.site_rules([host_key]),
            what=f"read the site policy of {host_key}",
        )
        if rules is None or host_key not in rules:
            return None if known is None else known[1]
        if len(self._site_rules) >= MAX_SITE_RULES:
            self._site_rules.clear()  # a crawl of many sites: start again rather than grow
        self._site_rules[host_key] = (now, rules[host_key])
        return rules[host_key]

    async def robots_copy(self, origin: str, lease_seconds: float) -> RobotsCopy | None:
        """The cluster's copy of `origin`'s robots.txt, or the lease to fetch it (RobotsRules'
        shared store); None when the database failed."""
        return await self._run(
            lambda backend: backend.robots_copy(origin, lease_seconds=lease_seconds),
            what=f"read the cluster's robots.txt of {origin}",
        )

    async def choose_session(
        self, job: ClaimedJob, host_key: str, proxy_ids: list[str]
    ) -> SessionChoice | None:
        """The session for `job`'s page among `proxy_ids` (session_pool.py); None when the
        database failed (the page goes without a session)."""
        return await self._run(
            lambda backend: _chosen(
                backend.choose_session(job.id, job.attempt, host_key=host_key, proxy_ids=proxy_ids)
            ),
            what=f"choose a session for job {job.id}",
        )

    async def record_session(
        self,
        job: ClaimedJob,
        session: Session,
        host_key: str,
        outcome: queue_sessions.Outcome,
        cookies: list[dict[str, Any]] | None,
        rules: SessionRules,
    ) -> SessionRecord | None:
        """Record how `job`'s page went on `session`; None when the database failed."""
        return await self._run(
            lambda backend: backend.record_session(
                job.id,
                job.attempt,
                session_id=session.session_id,
                host_key=host_key,
                outcome=outcome,
                cookies=cookies,
                rules=rules,
            ),
            what=f"record the session of job {job.id}",
        )

    async def store_robots_copy(self, origin: str, read: RobotsRead, ttl_seconds: float) -> None:
        """Store this worker's read of `origin`'s robots.txt for the cluster."""
        await self._run(
            lambda backend: backend.store_robots_copy(
                origin,
                status=read.status,
                body=read.body,
                problem=read.problem,
                ttl_seconds=ttl_seconds,
            ),
            what=f"store the robots.txt of {origin}",
        )

    # --- crawl memory --------------------------------------------------------------------------

    async def page_memory(self, crawl_key: str, url: str) -> PageMemory | None:
        """What the crawl remembers of `url`; None when it never fetched it or when the
        database failed (the page is then fetched in full, and its result says changed).

        Reads asked for while one is under way wait for it to end and then go together, in
        one statement: rows that finish fast (304s, skips) would otherwise queue up one
        round trip each."""
        asked: asyncio.Future[PageMemory | None] = asyncio.get_running_loop().create_future()
        self._memory_asked.append((crawl_key, url, asked))
        if self._memory_reader is None or self._memory_reader.done():
            self._memory_reader = asyncio.create_task(
                self._read_memories(), name="crawl-memory-reads"
            )
        return await asked

    async def _read_memories(self) -> None:
        """Answer every asked memory read, those asked meanwhile in the next statement, until
        none is left. A reader that was cancelled since it asked is not answered; an error
        that is not the database's goes to the readers of its statement, and a cancelled
        task cancels every reader still waiting."""
        batch: list[tuple[str, str, asyncio.Future[PageMemory | None]]] = []
        try:
            while self._memory_asked:
                batch, self._memory_asked = self._memory_asked, []
                pages = [(crawl_key, url) for crawl_key, url, _ in batch]
                try:
                    memories = await self._run(
                        partial(_read_page_memories, pages=pages),
                        what=f"read the crawl memory of {len(pages)} URLs",
                    )
                except Exception as error:
                    for _, _, asked in batch:
                        if not asked.done():
                            asked.set_exception(error)
                    continue
                answers = memories if memories is not None else [None] * len(batch)
                for (_, _, asked), memory in zip(batch, answers, strict=True):
                    if not asked.done():
                        asked.set_result(memory)
        finally:
            for _, _, asked in (*batch, *self._memory_asked):
                asked.cancel()
            self._memory_asked = []

    # --- parsers -------------------------------------------------------------------------------

    async def publish_parsers(self, queues: Sequence[str], parsers: Sequence[str]) -> bool:
        """Publish this worker's parsers for `queues` (parser_publication.py); False when the
        database failed."""
        done = await self._run(
            lambda backend: _published(backend.publish_parsers(queues, parsers)),
            what="publish this worker's parsers",
        )
        return done is not None

    # --- lifecycle -----------------------------------------------------------------------------

    async def listen(self, wake: Callable[[], None]) -> None:
        await self.backend.listen(wake)

    async def close(self) -> None:
        await self.backend.close()

    # --- failures ------------------------------------------------------------------------------

    async def _run(
        self,
        operation: Callable[[QueueBackend], Awaitable[_T]],
        *,
        what: str,
        persistent: bool = False,
    ) -> _T | None:
        """Run one operation; None when the database failed.

        `persistent` operations are retried until they succeed or the worker stops; the others
        give up after one wait. Errors that are not the queue's (the database refusing a
        statement, say) are raised to the caller, who knows what they mean.
        """
        while True:
            try:
                result = await operation(self.backend)
            except SchemaOutOfDate as error:
                self._readiness.problem("schema", str(error))
                if not persistent or self._stopping.is_set():
                    return None
                await self._pause(self._readiness.recheck_seconds)
                continue
            except (DatabaseUnavailable, QueueError) as error:
                delay = self._failed(what, error)
                if not persistent or self._stopping.is_set():
                    await self._pause(delay)
                    return None
                await asyncio.sleep(delay)
                continue
            self._answered()
            return result

    def _failed(self, what: str, error: Exception) -> float:
        """Count a failed operation; return how long to wait before the next attempt."""
        self._metrics.database_errors.inc()
        self._failures += 1
        self._answering_since = None
        self._readiness.database_failed(str(error))
        delay = self._reconnect_delay(self._failures)
        # The first failure of an outage says what happened; the retries that follow every
        # second or so would only repeat it.
        log = logger.warning if self._failures == 1 else logger.debug
        log("could not %s: %s; retrying in %.1fs", what, error, delay)
        return delay

    def _answered(self) -> None:
        if self._answering_since is None:
            self._answering_since = self._clock()
        if self._failures:
            logger.info("the database answers again after %d failures", self._failures)
            self._failures = 0
            self.back.set()
        self._readiness.database_answered()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when a stop is requested."""
        await wait_for_event(self._stopping, seconds)


async def _published(publication: Awaitable[None]) -> bool:
    await publication
    return True
