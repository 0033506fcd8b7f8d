"""An in-memory queue backend for the worker's unit tests.

It keeps the rows of the queue the way the worker sees them (pending, processing with an
attempt and a lease, finished) and answers the worker's queue operations with the same
contract as the real backend: tests/integration/worker/test_fake_queue_conformance.py runs one
suite against both. On top, a test can take the database down, make one operation raise, or
make the schema fall behind.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scrapeq_queue import (
    ClaimedJob,
    Completion,
    DatabaseUnavailable,
    FollowUrl,
    PageMemory,
    PageWrite,
    QueueBacklog,
    RetryOutcome,
    RobotsCopy,
    SchemaOutOfDate,
    SitePoliteness,
    host_key_of,
)
from scrapeq_queue.sessions import Outcome as SessionOutcome
from scrapeq_queue.sessions import Session, SessionRecord, SessionRules
from scrapeq_queue.site_policies import SiteRule
from scrapeq_queue.source_rows import (
    ExpandedBatch,
    ExpandedEntry,
    KeyedEntries,
    SourceProgress,
    keyed_entries,
)

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# The fake's retry delay: long enough that a retried row is not due again within a test.
RETRY_DELAY_SECONDS = 60.0


@dataclass
class FakeRow:
    id: int
    url: str
    payload: dict[str, Any]
    queue: str = "default"
    priority: int = 0
    max_retries: int = 3
    depth: int = 0
    parent_id: int | None = None
    status: str = "pending"
    attempt: int = 0
    retry_count: int = 0
    run_at: float = 0.0
    worker_id: str | None = None
    lease_expires_at: float = 0.0
    result: dict[str, Any] | None = None
    last_reason: str | None = None
    last_error: str | None = None
    # One entry per ended attempt: completed, retried, failed, released, expired.
    outcomes: list[str] = field(default_factory=list)
    # The ScrapeJob it belongs to and its key there (rows of one owner are unique by key).
    owner_uid: str | None = None
    dedup_key: str | None = None
    # A source row's expansion so far (the queue's `source_progress` column).
    source_progress: dict[str, int] | None = None


@dataclass
class _RobotsEntry:
    status: int | None = None
    body: str | None = None
    problem: str | None = None
    expires_at: float = -1.0
    fetching_until: float | None = None


class FakeQueue:
    """The worker's QueueBackend, in memory. `now` is the fake's own clock (seconds)."""

    def __init__(self) -> None:
        self.rows: dict[int, FakeRow] = {}
        self.now = 0.0
        self._ids = itertools.count(1)
        self._robots: dict[str, _RobotsEntry] = {}
        # (crawl key, URL) -> what the crawl remembers (the fake's clock as its time).
        self.memory: dict[tuple[str, str], PageMemory] = {}
        # What site policies say about a site, set by a test (none: no policy applies).
        self.policies: dict[str, SiteRule] = {}
        self._sessions: dict[str, Session] = {}
        self._tried_sessions: dict[int, list[int]] = {}
        # queue -> the parsers a worker last published for it (publish_parsers).
        self.published_parsers: dict[str, tuple[str, ...]] = {}
        self._wakes: list[Callable[[], None]] = []
        # While set, every operation fails as a lost connection does.
        self.down = False
        # The next this many operations fail as a lost connection does.
        self.outage_calls = 0
        # While set, every operation fails as a schema behind this code does.
        self.schema_behind = False
        # Raised by the next call of the named operation (then forgotten).
        self.faults: dict[str, BaseException] = {}
        # Every operation called, by name, in order.
        self.calls: list[str] = []
        self.closed = False

    # --- for tests -----------------------------------------------------------------------------

    def enqueue(
        self,
        url: str,
        *,
        payload: dict[str, Any] | None = None,
        queue: str = "default",
        priority: int = 0,
        max_retries: int = 3,
        owner_uid: str | None = None,
        dedup_key: str | None = None,
    ) -> int:
        row = FakeRow(
            next(self._ids),
            url,
            {"render": False} if payload is None else payload,
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            run_at=self.now,
            owner_uid=owner_uid,
            dedup_key=dedup_key,
        )
        self.rows[row.id] = row
        self._notify()
        return row.id

    def _notify(self) -> None:
        """What the queue's NOTIFY does: wake every listener."""
        for wake in self._wakes:
            wake()

    def expire_leases(self) -> None:
        """Every lease held now ends (as if `lease_seconds` passed without a renewal)."""
        for row in self.rows.values():
            if row.status == "processing":
                row.lease_expires_at = self.now - 1

    def cancel(self, job_id: int) -> None:
        """The row's owner cancelled it (its lease is gone with it)."""
        row = self.rows[job_id]
        row.status = "cancelled"
        row.worker_id = None

    def status(self, job_id: int) -> str:
        return self.rows[job_id].status

    def _enter(self, operation: str) -> None:
        self.calls.append(operation)
        fault = self.faults.pop(operation, None)
        if fault is not None:
            raise fault
        if self.outage_calls > 0:
            self.outage_calls -= 1
            raise DatabaseUnavailable("database unavailable: the fake queue is restarting")
        if self.down:
            raise DatabaseUnavailable("database unavailable: the fake queue is down")
        if self.schema_behind:
            raise SchemaOutOfDate("the database schema is behind (fake); run `scrapeq migrate`")

    def _current(self, job_id: int, attempt: int) -> FakeRow | None:
        row = self.rows.get(job_id)
        if row is None or row.status != "processing" or row.attempt != attempt:
            return None
        return row

    # --- QueueBackend --------------------------------------------------------------------------

    async def claim_jobs(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        politeness: SitePoliteness,
    ) -> list[ClaimedJob]:
        self._enter("claim_jobs")
        in_flight: dict[str | None, int] = {}
        for row in self.rows.values():
            if row.status == "processing":
                key = host_key_of(row.url)
                in_flight[key] = in_flight.get(key, 0) + 1
        due = sorted(
            (
                row
                for row in self.rows.values()
                if row.status == "pending" and row.queue in queues and row.run_at <= self.now
            ),
            key=lambda row: (-row.priority, row.run_at, row.id),
        )
        claimed: list[ClaimedJob] = []
        for row in due:
            if len(claimed) >= limit:
                break
            key = host_key_of(row.url)
            if in_flight.get(key, 0) >= politeness.max_concurrent_per_site:
                continue
            in_flight[key] = in_flight.get(key, 0) + 1
            row.status = "processing"
            row.attempt += 1
            row.worker_id = worker_id
            row.lease_expires_at = self.now + lease_seconds
            claimed.append(self._claimed(row, key))
        return claimed

    def _claimed(self, row: FakeRow, host_key: str | None) -> ClaimedJob:
        return ClaimedJob(
            id=row.id,
            attempt=row.attempt,
            url=row.url,
            parser_type="default",
            payload=dict(row.payload),
            queue=row.queue,
            priority=row.priority,
            retry_count=row.retry_count,
            max_retries=row.max_retries,
            depth=row.depth,
            parent_id=row.parent_id,
            owner_uid=None,
            owner_namespace=None,
            owner_name=None,
            run_at=_EPOCH + timedelta(seconds=row.run_at),
            claimed_at=_EPOCH + timedelta(seconds=self.now),
            lease_expires_at=_EPOCH + timedelta(seconds=row.lease_expires_at),
            host_key=host_key,
            memory=(
                self._page_memory(crawl_key, row.url)
                if isinstance(crawl_key := row.payload.get("crawlKey"), str)
                else None
            ),
        )

    async def queue_backlog(self, queues: Sequence[str]) -> dict[str, QueueBacklog]:
        self._enter("queue_backlog")
        backlog: dict[str, QueueBacklog] = {}
        for queue in queues:
            rows = [row for row in self.rows.values() if row.queue == queue]
            due = [row for row in rows if row.status == "pending" and row.run_at <= self.now]
            backlog[queue] = QueueBacklog(
                due_pending=len(due),
                delayed_pending=sum(
                    1 for row in rows if row.status == "pending" and row.run_at > self.now
                ),
                processing=sum(1 for row in rows if row.status == "processing"),
                oldest_due_age_seconds=(max(self.now - row.run_at for row in due) if due else None),
            )
        return backlog

    async def require_current_schema(self) -> None:
        self._enter("require_current_schema")

    async def complete_many(self, completions: Sequence[Completion]) -> set[int]:
        self._enter("complete_many")
        done: set[int] = set()
        for completion in completions:
            row = self._current(completion.job_id, completion.attempt)
            if row is not None:
                self._complete(row, completion.result)
                done.add(row.id)
                if completion.memory is not None:
                    self._remember(completion.memory)
        return done

    def _complete(self, row: FakeRow, result: dict[str, Any]) -> None:
        row.status = "completed"
        row.result = result
        row.worker_id = None
        row.outcomes.append("completed")

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
        self._enter("complete_job")
        row = self._current(job_id, attempt)
        if row is None:
            return False
        self._complete(row, result)
        if memory is not None:
            self._remember(memory)
        known = {other.url for other in self.rows.values()}
        followed = [follow for follow in follow_urls if not follow.next_page]
        chained = [follow for follow in follow_urls if follow.next_page]
        for follow in [*followed[:follow_limit], *chained]:
            if follow.url in known:
                continue
            child = FakeRow(
                next(self._ids),
                follow.url,
                row.payload if follow.payload is None else follow.payload,
                queue=row.queue,
                priority=row.priority,
                max_retries=row.max_retries,
                depth=row.depth if follow.next_page else row.depth + 1,
                parent_id=None if follow.next_page and row.depth == 0 else row.id,
                run_at=self.now,
            )
            self.rows[child.id] = child
            self._notify()
        return True

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
        self._enter("retry_job")
        row = self._current(job_id, attempt)
        if row is None:
            return "fenced"
        row.last_reason, row.last_error, row.worker_id = reason, error, None
        if row.retry_count >= row.max_retries:
            row.status = "failed"
            row.outcomes.append("failed")
            return "failed"
        row.status = "pending"
        row.retry_count += 1
        row.run_at = self.now + (retry_after_seconds or RETRY_DELAY_SECONDS)
        row.outcomes.append("retried")
        return "retrying"

    async def fail_job(
        self, job_id: int, attempt: int, *, error: str, reason: str, duration_seconds: float
    ) -> bool:
        self._enter("fail_job")
        row = self._current(job_id, attempt)
        if row is None:
            return False
        row.status, row.last_reason, row.last_error, row.worker_id = "failed", reason, error, None
        row.outcomes.append("failed")
        return True

    async def release_jobs(self, *, worker_id: str, jobs: Sequence[tuple[int, int]]) -> int:
        self._enter("release_jobs")
        released = 0
        for job_id, attempt in jobs:
            row = self._current(job_id, attempt)
            if row is None or row.worker_id != worker_id:
                continue
            row.status, row.worker_id, row.run_at = "pending", None, self.now
            row.outcomes.append("released")
            released += 1
        if released:
            self._notify()
        return released

    async def renew_leases(
        self, *, worker_id: str, jobs: Sequence[tuple[int, int]], lease_seconds: float
    ) -> set[int]:
        self._enter("renew_leases")
        renewed: set[int] = set()
        for job_id, attempt in jobs:
            row = self._current(job_id, attempt)
            if row is None or row.worker_id != worker_id:
                continue
            row.lease_expires_at = self.now + lease_seconds
            renewed.add(job_id)
        return renewed

    async def rescue_expired_leases(self) -> int:
        self._enter("rescue_expired_leases")
        rescued = 0
        for row in self.rows.values():
            if row.status == "processing" and row.lease_expires_at < self.now:
                row.status, row.worker_id, row.run_at = "pending", None, self.now
                row.retry_count += 1
                row.outcomes.append("expired")
                rescued += 1
        if rescued:
            self._notify()
        return rescued

    async def set_crawl_delay(self, host_key: str, crawl_delay_seconds: float) -> None:
        self._enter("set_crawl_delay")

    def _clock(self) -> datetime:
        return _EPOCH + timedelta(seconds=self.now)

    async def read_page_memories(self, pages: Sequence[tuple[str, str]]) -> list[PageMemory | None]:
        self._enter("read_page_memories")
        return [self._page_memory(crawl_key, url) for crawl_key, url in pages]

    def _page_memory(self, crawl_key: str, url: str) -> PageMemory | None:
        memory = self.memory.get((crawl_key, url))
        if memory is None:
            return None
        age = (self._clock() - memory.fetched_at).total_seconds()
        return PageMemory(
            memory.etag,
            memory.last_modified,
            memory.content_hash,
            memory.result_hash,
            memory.fetched_at,
            memory.changed_at,
            max(0.0, age),
        )

    def _remember(self, write: PageWrite) -> None:
        crawl_key, url, visit = write.crawl_key, write.url, write.visit
        now = self._clock()
        before = self.memory.get((crawl_key, url))
        if before is not None and before.fetched_at > now:
            return
        if visit.not_modified and before is not None:
            remembered = PageMemory(
                visit.etag or before.etag,
                visit.last_modified or before.last_modified,
                before.content_hash,
                before.result_hash,
                now,
                before.changed_at,
                0.0,
            )
        else:
            changed = before is None or before.result_hash != visit.result_hash
            remembered = PageMemory(
                visit.etag,
                visit.last_modified,
                visit.content_hash,
                visit.result_hash,
                now,
                now if changed or before is None else before.changed_at,
                0.0,
            )
        self.memory[(crawl_key, url)] = remembered

    async def site_rules(self, host_keys: Sequence[str]) -> dict[str, SiteRule]:
        self._enter("site_rules")
        return {
            host_key: self.policies.get(
                host_key, SiteRule(host_key, None, (), None, None, None, None, None)
            )
            for host_key in host_keys
        }

    async def source_progress(self, job: ClaimedJob) -> SourceProgress | None:
        self._enter("source_progress")
        row = self._current(job.id, job.attempt)
        return None if row is None else SourceProgress.from_column(row.source_progress)

    async def enqueue_expanded(
        self,
        job: ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        self._enter("enqueue_expanded")
        source = self._current(job.id, job.attempt)
        if source is None:
            return None
        keyed = entries if isinstance(entries, KeyedEntries) else keyed_entries(entries)
        taken = {
            (row.owner_uid, row.dedup_key)
            for row in self.rows.values()
            if row.owner_uid is not None and row.dedup_key is not None
        }
        pages = sitemaps = 0
        for url, is_sitemap, dedup_key in zip(
            keyed.urls, keyed.is_sitemap, keyed.dedup_keys, strict=True
        ):
            if source.owner_uid is not None:
                if (source.owner_uid, dedup_key) in taken:
                    continue
                taken.add((source.owner_uid, dedup_key))
            payload = {key: value for key, value in source.payload.items() if key != "source"}
            if is_sitemap:
                payload["source"] = {**source.payload["source"], "kind": "sitemap"}
            row = FakeRow(
                next(self._ids),
                url,
                payload,
                queue=source.queue,
                priority=source.priority,
                max_retries=source.max_retries,
                run_at=self.now,
                owner_uid=source.owner_uid,
                dedup_key=dedup_key if source.owner_uid is not None else None,
            )
            self.rows[row.id] = row
            sitemaps += is_sitemap
            pages += not is_sitemap
        progress = SourceProgress.from_column(source.source_progress)
        source.source_progress = {
            "entries": max(entries_done, progress.entries),
            "enqueued": progress.enqueued + pages,
            "sitemaps": progress.sitemaps + sitemaps,
            "skipped": progress.skipped + skipped,
        }
        if pages or sitemaps:
            self._notify()
        return ExpandedBatch(pages=pages, sitemaps=sitemaps)

    async def robots_copy(self, origin: str, *, lease_seconds: float) -> RobotsCopy:
        self._enter("robots_copy")
        entry = self._robots.setdefault(origin, _RobotsEntry())
        if entry.expires_at > self.now:
            return RobotsCopy(
                True, False, entry.status, entry.body, entry.problem, entry.expires_at - self.now
            )
        if entry.fetching_until is not None and entry.fetching_until > self.now:
            return RobotsCopy(held=False, leased=False)
        entry.fetching_until = self.now + lease_seconds
        return RobotsCopy(held=False, leased=True)

    async def choose_session(
        self, job_id: int, attempt: int, *, host_key: str, proxy_ids: list[str]
    ) -> Session | None:
        """One session per proxy, the first the row was not blocked on (the real pool's health
        ordering and retirements are PostgreSQL's: tests/integration/queue/test_sessions.py)."""
        self._enter("choose_session")
        tried = self._tried_sessions.setdefault(job_id, [])
        for proxy in dict.fromkeys(proxy_ids):
            session = self._sessions.setdefault(
                proxy, Session(len(self._sessions) + 1, proxy, None, ())
            )
            if session.session_id not in tried:
                return replace(session, tried=len(tried))
        return None

    async def record_session(
        self,
        job_id: int,
        attempt: int,
        *,
        session_id: int,
        host_key: str,
        outcome: SessionOutcome,
        cookies: list[dict[str, Any]] | None,
        rules: SessionRules,
    ) -> SessionRecord:
        self._enter("record_session")
        for proxy, session in self._sessions.items():
            if session.session_id == session_id and cookies is not None:
                self._sessions[proxy] = replace(session, cookies=tuple(cookies))
        if outcome == "blocked":
            self._tried_sessions.setdefault(job_id, []).append(session_id)
        return SessionRecord(session_retired=outcome == "blocked", proxy_retired=False)

    async def store_robots_copy(
        self,
        origin: str,
        *,
        status: int | None,
        body: str | None,
        problem: str | None,
        ttl_seconds: float,
    ) -> None:
        self._enter("store_robots_copy")
        self._robots[origin] = _RobotsEntry(status, body, problem, self.now + ttl_seconds, None)

    async def publish_parsers(self, queues: Sequence[str], parsers: Sequence[str]) -> None:
        self._enter("publish_parsers")
        for queue in queues:
            self.published_parsers[queue] = tuple(sorted(set(parsers)))

    async def listen(self, wake: Callable[[], None]) -> None:
        self._wakes.append(wake)
        try:
            wake()
            await asyncio.Event().wait()
        finally:
            self._wakes.remove(wake)

    async def close(self) -> None:
        self.closed = True
