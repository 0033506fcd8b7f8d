"""One contract, two queues: the in-memory queue the worker's unit tests run against
(tests/unit/worker/fake_queue.py) and the worker's real backend on real PostgreSQL must answer
every queue operation the worker uses the same way, so the fake cannot drift from the queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import (
    DEFAULT_POLITENESS,
    Completion,
    FollowUrl,
    PageMemory,
    PageVisit,
    PageWrite,
)
from scrapeq_queue.sessions import SessionRules, proxy_id
from scrapeq_queue.source_rows import ExpandedBatch, ExpandedEntry, SourceProgress, keyed_entries
from scrapeq_worker.queue_gateway import PostgresBackend, QueueBackend

from scrapeq.local.pgbouncer import LocalPgBouncer
from tests.unit.worker.fake_queue import FakeQueue
from tests.waiting import eventually

WORKER = "contract-worker"
LEASE_SECONDS = 30.0
SOURCE_OWNER = queue.Owner(uid="uid-contract", namespace="shop", name="catalogue")
SOURCE_PAYLOAD: dict[str, Any] = {"render": False, "source": {"kind": "sitemap"}}


class Harness(Protocol):
    """A backend under test and what the contract needs around it."""

    backend: QueueBackend

    async def enqueue(
        self, url: str, *, queue: str = "default", priority: int = 0, max_retries: int = 3
    ) -> int: ...

    async def status(self, job_id: int) -> str: ...

    async def expire_leases(self) -> None: ...

    async def enqueue_source(self, url: str, payload: dict[str, Any]) -> int: ...


class FakeHarness:
    def __init__(self) -> None:
        self.fake = FakeQueue()
        self.backend: QueueBackend = self.fake

    async def enqueue(
        self, url: str, *, queue: str = "default", priority: int = 0, max_retries: int = 3
    ) -> int:
        return self.fake.enqueue(url, queue=queue, priority=priority, max_retries=max_retries)

    async def status(self, job_id: int) -> str:
        return self.fake.status(job_id)

    async def expire_leases(self) -> None:
        self.fake.expire_leases()

    async def enqueue_source(self, url: str, payload: dict[str, Any]) -> int:
        return self.fake.enqueue(
            url, payload=payload, owner_uid=SOURCE_OWNER.uid, dedup_key=f"sitemap:{url}"
        )


class PostgresHarness:
    """The real backend; with `pooled_url`, its queue connections go through PgBouncer in
    transaction mode (pooled mode) and its LISTEN session straight to `database_url`."""

    def __init__(
        self,
        database_url: str,
        connection: psycopg.AsyncConnection[Any],
        pooled_url: str | None = None,
    ) -> None:
        self.backend: QueueBackend = (
            PostgresBackend(pooled_url, WORKER, listen_url=database_url, pooled=True)
            if pooled_url
            else PostgresBackend(database_url, WORKER)
        )
        self.connection = connection

    async def enqueue(
        self, url: str, *, queue: str = "default", priority: int = 0, max_retries: int = 3
    ) -> int:
        job_id = await queue_enqueue(self.connection, url, queue, priority, max_retries)
        return job_id

    async def status(self, job_id: int) -> str:
        cursor = await self.connection.execute(
            "SELECT status FROM scraping_jobs WHERE id = %s", (job_id,)
        )
        row = await cursor.fetchone()
        assert row is not None
        return str(row[0])

    async def expire_leases(self) -> None:
        await self.connection.execute(
            "UPDATE scraping_jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE status = 'processing'"
        )

    async def enqueue_source(self, url: str, payload: dict[str, Any]) -> int:
        (job_id,) = await queue.enqueue_many(
            self.connection,
            [queue.NewJob(url=url, dedup_key=f"sitemap:{url}")],
            owner=SOURCE_OWNER,
            payload=payload,
        )
        return job_id


async def queue_enqueue(
    connection: psycopg.AsyncConnection[Any], url: str, name: str, priority: int, retries: int
) -> int:
    job_id = await queue.enqueue(
        connection,
        url,
        payload={"render": False},
        queue=name,
        priority=priority,
        max_retries=retries,
    )
    assert job_id is not None
    return job_id


@pytest.fixture(
    params=[
        "fake",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=pytest.mark.postgres),
    ]
)
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "fake":
        yield FakeHarness()
        return
    database_url: str = request.getfixturevalue("database_url")
    pooled_url = None
    if request.param == "pgbouncer":
        pooler: LocalPgBouncer = request.getfixturevalue("pgbouncer")
        pooled_url = pooler.pooled(database_url)
    connection = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    real = PostgresHarness(database_url, connection, pooled_url)
    try:
        yield real
    finally:
        await real.backend.close()
        await connection.close()


async def claim(harness: Harness, limit: int, queues: tuple[str, ...] = ("default",)) -> list[Any]:
    return await harness.backend.claim_jobs(
        worker_id=WORKER,
        queues=queues,
        limit=limit,
        lease_seconds=LEASE_SECONDS,
        politeness=DEFAULT_POLITENESS,
    )


def site(n: int) -> str:
    return f"http://site{n}.test/page"


async def test_a_claim_takes_the_highest_priority_then_the_oldest_rows_each_only_once(
    harness: Harness,
) -> None:
    first = await harness.enqueue(site(1))
    second = await harness.enqueue(site(2))
    urgent = await harness.enqueue(site(3), priority=5)
    elsewhere = await harness.enqueue(site(4), queue="other")

    taken = await claim(harness, 2)
    rest = await claim(harness, 10)

    assert [job.id for job in taken] == [urgent, first]
    assert [job.id for job in rest] == [second]
    assert all(job.attempt == 1 and job.retry_count == 0 for job in taken + rest)
    assert await claim(harness, 10) == []
    assert await harness.status(elsewhere) == "pending"
    assert [job.id for job in await claim(harness, 10, ("other",))] == [elsewhere]


async def test_a_claim_gives_a_site_no_more_rows_than_its_limit(harness: Harness) -> None:
    for n in range(DEFAULT_POLITENESS.max_concurrent_per_site + 2):
        await harness.enqueue(f"http://busy.test/{n}")

    taken = await claim(harness, 10)

    assert len(taken) == DEFAULT_POLITENESS.max_concurrent_per_site
    assert all(job.host_key == "busy.test" for job in taken)


async def test_completions_record_current_attempts_and_fence_out_stale_ones(
    harness: Harness,
) -> None:
    kept = await harness.enqueue(site(1))
    moved = await harness.enqueue(site(2))
    jobs = {job.id: job for job in await claim(harness, 2)}
    assert await harness.backend.release_jobs(worker_id=WORKER, jobs=[jobs[moved].token]) == 1
    again = await claim(harness, 1)
    assert [(job.id, job.attempt) for job in again] == [(moved, 2)]

    done = await harness.backend.complete_many(
        [Completion(kept, 1, {"n": 1}, 0.1), Completion(moved, 1, {"n": 2}, 0.1)]
    )

    assert done == {kept}
    assert await harness.status(kept) == "completed"
    assert await harness.status(moved) == "processing"
    assert await harness.backend.complete_many([Completion(kept, 1, {}, 0.1)]) == set()


async def test_renewal_answers_only_the_leases_still_held(harness: Harness) -> None:
    held = await harness.enqueue(site(1))
    released = await harness.enqueue(site(2))
    finished = await harness.enqueue(site(3))
    jobs = {job.id: job for job in await claim(harness, 3)}
    await harness.backend.release_jobs(worker_id=WORKER, jobs=[jobs[released].token])
    await harness.backend.fail_job(
        finished, 1, error="gone", reason="http_4xx", duration_seconds=0.1
    )

    renewed = await harness.backend.renew_leases(
        worker_id=WORKER, jobs=[job.token for job in jobs.values()], lease_seconds=LEASE_SECONDS
    )

    assert renewed == {held}
    assert (
        await harness.backend.renew_leases(
            worker_id="someone-else", jobs=[jobs[held].token], lease_seconds=LEASE_SECONDS
        )
        == set()
    )


async def test_a_retry_reschedules_until_no_retries_are_left_and_a_stale_one_is_fenced(
    harness: Harness,
) -> None:
    again = await harness.enqueue(site(1), max_retries=2)
    last = await harness.enqueue(site(2), max_retries=0)
    await claim(harness, 2)

    def retry(job_id: int, attempt: int) -> Any:
        return harness.backend.retry_job(
            job_id,
            attempt,
            error="boom",
            reason="timeout",
            duration_seconds=0.1,
            retry_after_seconds=None,
            pause_site_seconds=None,
            server_error=False,
            host_key=None,
        )

    assert await retry(again, 1) == "retrying"
    assert await retry(last, 1) == "failed"
    assert await retry(again, 1) == "fenced"
    assert await harness.status(again) == "pending"
    assert await harness.status(last) == "failed"
    backlog = (await harness.backend.queue_backlog(["default"]))["default"]
    assert (backlog.due_pending, backlog.delayed_pending, backlog.processing) == (0, 1, 0)


async def test_a_failure_is_recorded_once(harness: Harness) -> None:
    job_id = await harness.enqueue(site(1))
    await claim(harness, 1)

    first = await harness.backend.fail_job(
        job_id, 1, error="not found", reason="http_4xx", duration_seconds=0.1
    )
    second = await harness.backend.fail_job(
        job_id, 1, error="not found", reason="http_4xx", duration_seconds=0.1
    )

    assert (first, second) == (True, False)
    assert await harness.status(job_id) == "failed"


async def test_the_backlog_counts_due_and_processing_rows_per_queue(harness: Harness) -> None:
    for n in range(3):
        await harness.enqueue(site(n))
    await harness.enqueue(site(9), queue="other")
    await claim(harness, 1)

    backlog = await harness.backend.queue_backlog(["default", "other", "unused"])

    assert {name: (b.due_pending, b.processing) for name, b in backlog.items()} == {
        "default": (2, 1),
        "other": (1, 0),
        "unused": (0, 0),
    }


async def test_a_completion_with_links_queues_them_as_children_one_level_deeper(
    harness: Harness,
) -> None:
    parent = await harness.enqueue(site(1))
    await claim(harness, 1)

    recorded = await harness.backend.complete_job(
        parent,
        1,
        result={"ok": True},
        duration_seconds=0.1,
        follow_urls=[FollowUrl(site(2)), FollowUrl(site(3))],
        follow_limit=None,
    )

    assert recorded
    children = await claim(harness, 10)
    assert sorted(job.url for job in children) == [site(2), site(3)]
    assert {(job.depth, job.parent_id) for job in children} == {(1, parent)}


async def test_a_next_page_link_is_queued_at_its_parents_depth_and_past_the_follow_limit(
    harness: Harness,
) -> None:
    parent = await harness.enqueue(site(1))
    await claim(harness, 1)

    recorded = await harness.backend.complete_job(
        parent,
        1,
        result={"ok": True},
        duration_seconds=0.1,
        follow_urls=[
            FollowUrl(site(2)),
            FollowUrl(site(3)),
            FollowUrl(site(4), payload={"next": {"selector": "a", "page": 2}}, next_page=True),
        ],
        follow_limit=1,
    )

    assert recorded
    children = await claim(harness, 10)
    assert sorted((job.url, job.depth, job.parent_id) for job in children) == [
        (site(2), 1, parent),
        (site(4), 0, None),
    ]
    [chained] = [job for job in children if job.url == site(4)]
    assert chained.payload == {"next": {"selector": "a", "page": 2}}


async def test_expired_leases_are_rescued_as_a_spent_retry(harness: Harness) -> None:
    job_id = await harness.enqueue(site(1))
    await claim(harness, 1)
    assert await harness.backend.rescue_expired_leases() == 0

    await harness.expire_leases()

    assert await harness.backend.rescue_expired_leases() == 1
    [again] = await claim(harness, 1)
    assert (again.id, again.attempt, again.retry_count) == (job_id, 2, 1)


async def test_the_robots_copy_is_leased_to_one_fetcher_then_shared(harness: Harness) -> None:
    origin = "http://site1.test"

    first = await harness.backend.robots_copy(origin, lease_seconds=30)
    second = await harness.backend.robots_copy(origin, lease_seconds=30)
    await harness.backend.store_robots_copy(
        origin, status=200, body="User-agent: *\nDisallow: /x\n", problem=None, ttl_seconds=60
    )
    stored = await harness.backend.robots_copy(origin, lease_seconds=30)

    assert (first.held, first.leased) == (False, True)
    assert (second.held, second.leased) == (False, False)
    assert (stored.held, stored.status, stored.body) == (True, 200, "User-agent: *\nDisallow: /x\n")
    assert 0 < stored.seconds_left <= 60


async def memory_of(harness: Harness, crawl_key: str, url: str) -> PageMemory | None:
    """One URL's memory, read through the backend's list read."""
    (memory,) = await harness.backend.read_page_memories([(crawl_key, url)])
    return memory


async def test_the_crawl_memory_commits_with_a_current_completion_and_a_304_keeps_its_hashes(
    harness: Harness,
) -> None:
    key, url = "shop/catalogue", "http://site1.test/p/1"
    assert await memory_of(harness, key, url) is None
    # Three sites: the claim's politeness limit leaves all three rows claimable at once.
    first_id = await harness.enqueue(url)
    second_id = await harness.enqueue("http://site2.test/p/1")
    fenced_id = await harness.enqueue("http://site3.test/p/1")
    claimed = {job.id: job for job in await claim(harness, 3)}
    first_job, second_job, fenced_job = (claimed[i] for i in (first_id, second_id, fenced_id))

    fetched = PageWrite(key, url, PageVisit('"v1"', None, b"c" * 32, b"r" * 32))
    fenced = PageWrite(key, url + "?fenced", PageVisit('"f"', None, b"f" * 32, b"f" * 32))
    done = await harness.backend.complete_many(
        [
            Completion(first_job.id, first_job.attempt, {"n": 1}, 0.1, memory=fetched),
            Completion(fenced_job.id, fenced_job.attempt + 1, {"n": 3}, 0.1, memory=fenced),
        ]
    )
    assert done == {first_id}
    assert await memory_of(harness, key, url + "?fenced") is None
    first = await memory_of(harness, key, url)
    assert first is not None
    assert (first.etag, first.content_hash, first.result_hash) == ('"v1"', b"c" * 32, b"r" * 32)
    assert first.changed_at == first.fetched_at

    not_modified = PageVisit(None, "Mon, 01 Dec 2025 00:00:00 GMT", None, None, not_modified=True)
    assert await harness.backend.complete_job(
        second_job.id,
        second_job.attempt,
        result={"n": 2},
        duration_seconds=0.1,
        follow_urls=[],
        follow_limit=None,
        memory=PageWrite(key, url, not_modified),
    )
    second = await memory_of(harness, key, url)
    assert second is not None
    assert (second.etag, second.last_modified) == ('"v1"', "Mon, 01 Dec 2025 00:00:00 GMT")
    assert (second.content_hash, second.result_hash) == (b"c" * 32, b"r" * 32)
    assert second.changed_at == first.changed_at
    assert await memory_of(harness, "shop/other", url) is None
    # Several pairs in one read: each answered in its place, the unknown ones None.
    many = await harness.backend.read_page_memories(
        [("shop/other", url), (key, url), (key, url + "?fenced"), (key, url)]
    )
    assert [memory is not None for memory in many] == [False, True, False, True]
    assert many[1] == many[3]
    assert many[1] is not None
    assert many[1].etag == '"v1"'


async def test_a_blocked_session_gives_way_to_another_proxy_and_a_saved_jar_comes_back(
    harness: Harness,
) -> None:
    proxies = [proxy_id("http://proxy-a.test:3128"), proxy_id("http://proxy-b.test:3128")]
    job_id = await harness.enqueue("http://site1.test/a")
    [job] = await claim(harness, 1)
    rules = SessionRules(blocks_per_site=1)

    first = await harness.backend.choose_session(
        job_id, job.attempt, host_key="site1.test", proxy_ids=proxies
    )
    assert first is not None
    blocked = await harness.backend.record_session(
        job_id,
        job.attempt,
        session_id=first.session_id,
        host_key="site1.test",
        outcome="blocked",
        cookies=None,
        rules=rules,
    )
    second = await harness.backend.choose_session(
        job_id, job.attempt, host_key="site1.test", proxy_ids=proxies
    )
    assert second is not None
    jar = [{"name": "sid", "value": "1", "domain": "site1.test", "path": "/"}]
    await harness.backend.record_session(
        job_id,
        job.attempt,
        session_id=second.session_id,
        host_key="site1.test",
        outcome="ok",
        cookies=jar,
        rules=rules,
    )
    third = await harness.backend.choose_session(
        job_id, job.attempt, host_key="site1.test", proxy_ids=proxies
    )

    assert (first.tried, blocked.session_retired, blocked.proxy_retired) == (0, True, False)
    assert (second.proxy_id != first.proxy_id, second.tried) == (True, 1)
    assert third is not None
    assert (third.session_id, list(third.cookies)) == (second.session_id, jar)


async def test_the_schema_check_passes_on_a_current_schema(harness: Harness) -> None:
    await harness.backend.require_current_schema()
    await harness.backend.set_crawl_delay("site1.test", 2.0)


async def test_a_worker_may_publish_its_parsers_again_and_again(harness: Harness) -> None:
    await harness.backend.publish_parsers(["default", "shop"], ["shop.product", "detail"])
    await harness.backend.publish_parsers(["default"], [])


async def test_a_listener_is_woken_when_it_starts_and_when_a_row_is_queued(
    harness: Harness,
) -> None:
    wakes: list[float] = []
    listener = asyncio.create_task(harness.backend.listen(lambda: wakes.append(1.0)))
    try:
        await eventually(lambda: len(wakes), within=15, what="the wake of the first LISTEN")
        before = len(wakes)
        await harness.enqueue(site(1))
        await eventually(lambda: len(wakes) > before, within=15, what="a wake for the queued row")
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


async def test_a_site_no_policy_names_has_a_rule_that_sets_nothing(harness: Harness) -> None:
    rules = await harness.backend.site_rules(["nobody.test"])
    rule = rules["nobody.test"]
    assert (rule.pattern, rule.max_concurrent_per_site, rule.respect_robots_txt) == (
        None,
        None,
        None,
    )
    assert rule.refusing_policy("team") is None


async def test_a_source_rows_batches_queue_each_entry_once_and_record_its_progress(
    harness: Harness,
) -> None:
    source_id = await harness.enqueue_source("http://shop.test/sitemap.xml", SOURCE_PAYLOAD)
    (source,) = await claim(harness, 1)
    assert source.id == source_id
    assert await harness.backend.source_progress(source) == SourceProgress()

    first = await harness.backend.enqueue_expanded(
        source,
        [ExpandedEntry("http://a.test/a"), ExpandedEntry("http://more.test/more.xml", True)],
        entries_done=2,
        skipped=0,
    )
    again = await harness.backend.enqueue_expanded(
        source,
        keyed_entries([ExpandedEntry("http://a.test/a"), ExpandedEntry("http://b.test/b")]),
        entries_done=5,
        skipped=1,
    )

    assert first == ExpandedBatch(pages=1, sitemaps=1)
    assert again == ExpandedBatch(pages=1, sitemaps=0)
    assert await harness.backend.source_progress(source) == SourceProgress(
        entries=5, enqueued=2, sitemaps=1, skipped=1
    )
    queued = {job.url: job.payload for job in await claim(harness, 10)}
    assert queued == {
        "http://a.test/a": {"render": False},
        "http://more.test/more.xml": SOURCE_PAYLOAD,
        "http://b.test/b": {"render": False},
    }


async def test_a_source_rows_old_attempt_reads_no_progress_and_inserts_nothing(
    harness: Harness,
) -> None:
    await harness.enqueue_source("http://shop.test/sitemap.xml", SOURCE_PAYLOAD)
    (old,) = await claim(harness, 1)
    assert await harness.backend.release_jobs(worker_id=WORKER, jobs=[old.token]) == 1
    (new,) = await claim(harness, 1)

    assert await harness.backend.source_progress(old) is None
    stale = await harness.backend.enqueue_expanded(
        old, [ExpandedEntry("http://a.test/a")], entries_done=1, skipped=0
    )

    assert stale is None
    assert await harness.backend.source_progress(new) == SourceProgress()
    assert await claim(harness, 10) == []
