"""The worker's control logic against an in-memory queue (fake_queue.py, held to the real
queue's contract by tests/integration/worker/test_fake_queue_conformance.py) and scripted
pages: claiming, draining, leases, outages and failures, each in milliseconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from scrapeq_queue import ClaimedJob, PageMemory
from scrapeq_worker import outcomes as outcomes_module
from scrapeq_worker import parser_publication as publication_module
from scrapeq_worker import worker as worker_module
from scrapeq_worker.errors import BrowserUnavailable, PermanentFailure, RetryLater
from scrapeq_worker.job_options import JobOptions
from scrapeq_worker.scraper import ScrapeResult
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from tests.waiting import eventually

from .fake_queue import FakeQueue

pytestmark = pytest.mark.timeout(10)

# Every wait of these tests ends on an event well within this; it only bounds a failure.
WITHIN_SECONDS = 5.0


class Pages:
    """Scripted pages: each URL completes at once unless a test holds it or makes it raise."""

    def __init__(self, queue: FakeQueue) -> None:
        self._queue = queue
        self.held: dict[str, asyncio.Event] = {}
        self.raises: dict[str, BaseException] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled: set[str] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.most_held_rows = 0
        self.on_start: Callable[[str], None] | None = None

    def hold(self, url: str) -> asyncio.Event:
        """Keep `url` loading until the returned event is set."""
        self.held[url] = asyncio.Event()
        return self.held[url]

    def start_of(self, url: str) -> asyncio.Event:
        return self.started.setdefault(url, asyncio.Event())

    async def scrape(self, job: ClaimedJob, options: JobOptions) -> ScrapeResult:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        processing = sum(1 for row in self._queue.rows.values() if row.status == "processing")
        self.most_held_rows = max(self.most_held_rows, processing)
        self.start_of(job.url).set()
        if self.on_start is not None:
            self.on_start(job.url)
        try:
            if job.url in self.held:
                await self.held[job.url].wait()
            if job.url in self.raises:
                raise self.raises[job.url]
            return ScrapeResult({"url": job.url}, ())
        except asyncio.CancelledError:
            self.cancelled.add(job.url)
            raise
        finally:
            self.in_flight -= 1


class Checks:
    """The machine checks, with whatever problem a test sets."""

    def __init__(self) -> None:
        self.browser_problem: str | None = None

    async def temp_dir(self) -> str | None:
        return None

    async def browser(self, *, relaunch: bool) -> str | None:
        return self.browser_problem


class Harness:
    def __init__(self, **settings: Any) -> None:
        self.queue = FakeQueue()
        self.pages = Pages(self.queue)
        self.checks = Checks()
        defaults: dict[str, Any] = {
            "database_url": "postgresql://fake-queue/unused",
            "worker_id": "unit-worker",
            "burst": True,
            "poll_seconds": 30.0,  # every wake-up here comes from an event, not a poll
            "lease_seconds": 300.0,
            "drain_seconds": 30.0,
            "metrics_port": 0,
            "respect_robots_txt": False,
        }
        self.worker = Worker(
            WorkerSettings(**(defaults | settings)),
            install_signal_handlers=False,
            recheck_seconds=0.0,
            backend=self.queue,
            scrape=self.pages.scrape,
            checks=self.checks,
            reconnect_delay=lambda failures: 0.0,
        )

    def enqueue(self, *paths: str, **options: Any) -> list[int]:
        return [self.queue.enqueue(self.url(path), **options) for path in paths]

    @staticmethod
    def url(path: str) -> str:
        # One site per path: the per-site limit of the claim stays out of the way.
        return f"http://{path}.test/"

    def counter(self, name: str, *labels: str) -> float:
        metric = getattr(self.worker.metrics, name)
        if labels:
            metric = metric.labels(*labels)
        return float(metric._value.get())

    @asynccontextmanager
    async def running(self) -> AsyncIterator[asyncio.Task[int]]:
        run = asyncio.create_task(self.worker.run())
        try:
            yield run
        finally:
            if not run.done():
                self.worker.request_stop()
                for event in self.pages.held.values():
                    event.set()
            async with asyncio.timeout(WITHIN_SECONDS):
                await asyncio.gather(run, return_exceptions=True)


async def settle(awaitable: Awaitable[Any]) -> Any:
    async with asyncio.timeout(WITHIN_SECONDS):
        return await awaitable


async def test_the_claim_loop_claims_every_free_place_once_a_batch_is_free_and_no_more() -> None:
    harness = Harness(concurrency=2, batch_size=3)
    ids = harness.enqueue(*(f"site{n}" for n in range(10)))
    gates = {n: asyncio.Event() for n in range(10)}
    for n, gate in gates.items():
        harness.pages.held[harness.url(f"site{n}")] = gate

    def held() -> int:
        return sum(row.status == "processing" for row in harness.queue.rows.values())

    async with harness.running() as run:
        await settle(harness.pages.start_of(harness.url("site1")).wait())
        # One claim of every place: both page slots busy, one batch of rows waiting.
        assert held() == 2 + 3
        assert harness.queue.calls.count("claim_jobs") == 1
        # Two pages end: two places are free, fewer than a batch, so no claim; the waiting
        # rows take the slots.
        gates[0].set()
        gates[1].set()
        await settle(harness.pages.start_of(harness.url("site3")).wait())
        await eventually(lambda: held() == 3, within=WITHIN_SECONDS, what="two completions")
        assert harness.queue.calls.count("claim_jobs") == 1
        # A third ends: a batch of places is free, and one claim takes all three.
        gates[2].set()
        await eventually(lambda: held() == 2 + 3, within=WITHIN_SECONDS, what="the next claim")
        assert harness.queue.calls.count("claim_jobs") == 2
        for gate in gates.values():
            gate.set()
        assert await settle(run) == 0

    assert [harness.queue.status(job_id) for job_id in ids] == ["completed"] * 10
    assert harness.pages.most_in_flight == 2
    assert harness.pages.most_held_rows == 5
    assert harness.counter("jobs_completed", "default") == 10


async def test_a_burst_run_exits_0_once_nothing_is_due_and_leaves_a_delayed_retry_behind() -> None:
    harness = Harness()
    [flaky] = harness.enqueue("flaky")
    harness.pages.raises[harness.url("flaky")] = RetryLater("try later", reason="timeout")

    assert await settle(harness.worker.run()) == 0

    row = harness.queue.rows[flaky]
    assert (row.status, row.retry_count, row.last_reason) == ("pending", 1, "timeout")
    assert harness.queue.calls[-1] == "queue_backlog"
    assert harness.counter("jobs_retried", "default", "timeout") == 1


async def test_an_empty_queue_ends_a_burst_run_after_one_claim_and_one_backlog_read() -> None:
    harness = Harness()

    assert await settle(harness.worker.run()) == 0

    assert harness.queue.calls == [
        "require_current_schema",
        "publish_parsers",
        "claim_jobs",
        "queue_backlog",
    ]
    assert harness.queue.closed


async def test_no_row_is_claimed_before_the_workers_parsers_are_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The database fails the first publication: the worker waits for the next one (a second
    # later, here 50 ms) before it claims.
    monkeypatch.setattr(publication_module, "FIRST_RETRY_SECONDS", 0.05)
    harness = Harness()
    [job] = harness.enqueue("site")
    harness.queue.faults["publish_parsers"] = asyncio_unavailable()

    assert await settle(harness.worker.run()) == 0

    calls = harness.queue.calls
    assert calls.count("publish_parsers") == 2
    second_publication = len(calls) - 1 - calls[::-1].index("publish_parsers")
    assert "claim_jobs" not in calls[:second_publication]
    assert harness.queue.status(job) == "completed"
    assert harness.worker.publication.publications == 1


async def test_a_drain_releases_waiting_jobs_at_once_and_lets_the_running_one_finish() -> None:
    # One claim of three: the running page and two rows waiting for its slot.
    harness = Harness(burst=False, concurrency=1, batch_size=3)
    running, *waiting = harness.enqueue("running", "waiting1", "waiting2")
    finish = harness.pages.hold(harness.url("running"))

    async with harness.running() as run:
        await settle(harness.pages.start_of(harness.url("running")).wait())
        harness.worker.request_stop()
        await eventually(
            lambda: all(harness.queue.status(i) == "pending" for i in waiting),
            within=WITHIN_SECONDS,
            what="the waiting jobs to be released",
        )
        assert harness.queue.status(running) == "processing"
        assert not harness.worker.ready
        finish.set()
        assert await settle(run) == 0

    assert harness.queue.status(running) == "completed"
    for job_id in waiting:
        row = harness.queue.rows[job_id]
        assert (row.outcomes, row.retry_count) == (["released"], 0)
    assert harness.counter("jobs_released", "default") == 2


async def test_a_page_still_running_at_the_drain_deadline_is_stopped_and_released() -> None:
    harness = Harness(burst=False, drain_seconds=0.0)
    [slow] = harness.enqueue("slow")
    harness.pages.hold(harness.url("slow"))

    async with harness.running() as run:
        await settle(harness.pages.start_of(harness.url("slow")).wait())
        harness.worker.request_stop()
        assert await settle(run) == 0

    assert harness.url("slow") in harness.pages.cancelled
    row = harness.queue.rows[slow]
    assert (row.status, row.outcomes, row.retry_count) == ("pending", ["released"], 0)


async def test_a_lost_lease_cancels_its_job_and_writes_no_outcome() -> None:
    harness = Harness(burst=False, lease_seconds=0.3)  # renewals every 0.1 s
    lost, kept = harness.enqueue("lost", "kept")
    harness.pages.hold(harness.url("lost"))
    finish_kept = harness.pages.hold(harness.url("kept"))

    async with harness.running() as run:
        await settle(harness.pages.start_of(harness.url("lost")).wait())
        harness.queue.cancel(lost)
        await eventually(
            lambda: harness.url("lost") in harness.pages.cancelled,
            within=WITHIN_SECONDS,
            what="the job whose lease was lost to be cancelled",
        )
        finish_kept.set()
        await eventually(
            lambda: harness.queue.status(kept) == "completed",
            within=WITHIN_SECONDS,
            what="the kept job to complete",
        )
        harness.worker.request_stop()
        assert await settle(run) == 0

    assert harness.queue.rows[lost].outcomes == []
    assert harness.queue.status(lost) == "cancelled"


def statement_sizes(harness: Harness) -> list[int]:
    """The number of completions in each completion statement the worker sends from now on."""
    sizes: list[int] = []
    original = harness.queue.complete_many

    async def complete_many(completions: Any) -> set[int]:
        sizes.append(len(completions))
        return await original(completions)

    harness.queue.complete_many = complete_many  # type: ignore[method-assign]
    return sizes


async def first_of_two_outcomes_waiting(
    harness: Harness,
) -> tuple[dict[str, asyncio.Event], list[int]]:
    """With the worker running on two held pages: the first page ended, its outcome waiting
    for its statement, the second still held. Returns the gates and the statement sizes."""
    gates = {name: harness.pages.hold(harness.url(name)) for name in ("first", "second")}
    sizes = statement_sizes(harness)
    await settle(harness.pages.start_of(harness.url("second")).wait())
    gates["first"].set()
    await eventually(
        lambda: len(harness.worker.outcomes._completions) == 1,
        within=WITHIN_SECONDS,
        what="the first outcome waiting for its statement",
    )
    return gates, sizes


async def test_an_outcome_that_ends_while_a_small_batch_waits_joins_its_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait long enough that the second page surely ends within it, however busy the machine.
    monkeypatch.setattr(outcomes_module, "COMPLETION_LINGER_SECONDS", 2.0)
    harness = Harness(concurrency=2, batch_size=2)
    harness.enqueue("first", "second")
    async with harness.running() as run:
        gates, sizes = await first_of_two_outcomes_waiting(harness)
        assert sizes == []
        gates["second"].set()
        assert await settle(run) == 0
    assert sizes == [2]
    assert all(row.status == "completed" for row in harness.queue.rows.values())


async def test_a_full_batch_of_outcomes_is_written_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait the test would time out in: a batch of COMPLETION_LINGER_BELOW must not wait.
    monkeypatch.setattr(outcomes_module, "COMPLETION_LINGER_SECONDS", 60.0)
    monkeypatch.setattr(outcomes_module, "COMPLETION_LINGER_BELOW", 2)
    harness = Harness(concurrency=2, batch_size=2)
    harness.enqueue("first", "second")
    async with harness.running() as run:
        gates, sizes = await first_of_two_outcomes_waiting(harness)
        # The second outcome fills the batch: the writer stops waiting at once.
        gates["second"].set()
        assert await settle(run) == 0
    assert sizes == [2]


async def test_an_outcome_is_written_through_a_database_outage_and_readiness_says_so() -> None:
    harness = Harness()
    [job_id] = harness.enqueue("page")
    ready_at_each_try: list[bool] = []

    def outage_begins(url: str) -> None:
        harness.queue.outage_calls = 5  # the completion's first five tries fail

    harness.pages.on_start = outage_begins
    original = harness.queue.complete_many

    async def complete_many(completions: Any) -> set[int]:
        ready_at_each_try.append(harness.worker.ready)
        return await original(completions)

    harness.queue.complete_many = complete_many  # type: ignore[method-assign]

    assert await settle(harness.worker.run()) == 0

    assert harness.queue.status(job_id) == "completed"
    assert harness.queue.rows[job_id].outcomes == ["completed"]
    assert harness.counter("database_errors") == 5
    assert len(ready_at_each_try) >= 2
    assert not any(ready_at_each_try[1:])
    assert harness.worker.ready


async def test_claims_failing_during_an_outage_resume_when_the_database_answers() -> None:
    harness = Harness()
    harness.queue.outage_calls = 1  # the schema check
    ids = harness.enqueue("a", "b")
    harness.queue.faults["claim_jobs"] = asyncio_unavailable()

    assert await settle(harness.worker.run()) == 0

    assert [harness.queue.status(job_id) for job_id in ids] == ["completed"] * 2
    assert harness.counter("database_errors") == 2


def asyncio_unavailable() -> BaseException:
    from scrapeq_queue import DatabaseUnavailable

    return DatabaseUnavailable("database unavailable: connection reset")


async def test_a_dead_lease_keeper_stops_the_worker_with_status_1_and_hands_back_its_job() -> None:
    harness = Harness(burst=False, lease_seconds=0.3, drain_seconds=0.0)
    [held] = harness.enqueue("held")
    harness.pages.hold(harness.url("held"))
    harness.queue.faults["renew_leases"] = RuntimeError("the database refused the renewal")

    assert await settle(harness.worker.run()) == 1

    row = harness.queue.rows[held]
    assert (row.status, row.outcomes, row.retry_count) == ("pending", ["released"], 0)


async def test_a_job_raising_an_unexpected_exception_is_retried_as_internal_error() -> None:
    harness = Harness()
    broken, fine = harness.enqueue("broken", "fine")
    harness.pages.raises[harness.url("broken")] = KeyError("no such thing")

    assert await settle(harness.worker.run()) == 0

    row = harness.queue.rows[broken]
    assert (row.status, row.retry_count, row.last_reason) == ("pending", 1, "internal_error")
    assert "KeyError" in (row.last_error or "")
    assert harness.queue.status(fine) == "completed"


async def test_a_permanent_failure_fails_the_row_for_good() -> None:
    harness = Harness()
    [gone] = harness.enqueue("gone")
    harness.pages.raises[harness.url("gone")] = PermanentFailure("404", reason="http_4xx")

    assert await settle(harness.worker.run()) == 0

    row = harness.queue.rows[gone]
    assert (row.status, row.last_reason) == ("failed", "http_4xx")
    assert harness.counter("jobs_failed", "default", "http_4xx") == 1


async def test_a_claim_raising_an_unexpected_exception_is_a_failed_claim_not_the_end() -> None:
    harness = Harness()
    ids = harness.enqueue("a", "b")
    # What a row the queue cannot load did before the queue refused such rows itself.
    harness.queue.faults["claim_jobs"] = ValueError("Exceeds the limit for integer conversion")

    assert await settle(harness.worker.run()) == 0

    assert [harness.queue.status(job_id) for job_id in ids] == ["completed"] * 2
    assert harness.counter("claim_errors") == 1
    assert harness.queue.calls.count("claim_jobs") >= 2


async def test_a_burst_worker_facing_a_schema_behind_exits_1_without_claiming() -> None:
    harness = Harness()
    [job_id] = harness.enqueue("page")
    harness.queue.schema_behind = True

    assert await settle(harness.worker.run()) == 1

    assert "claim_jobs" not in harness.queue.calls
    assert harness.queue.status(job_id) == "pending"


async def test_a_worker_whose_schema_falls_behind_claims_again_once_it_is_current() -> None:
    harness = Harness(burst=False)
    harness.queue.schema_behind = True

    async with harness.running() as run:
        await eventually(
            lambda: harness.worker.readiness_rounds >= 3,
            within=WITHIN_SECONDS,
            what="three readiness rounds",
        )
        assert "claim_jobs" not in harness.queue.calls
        assert not harness.worker.ready
        harness.queue.schema_behind = False
        [job_id] = harness.enqueue("page")
        await eventually(
            lambda: harness.queue.status(job_id) == "completed",
            within=WITHIN_SECONDS,
            what="the job to complete once the worker can work",
        )
        assert harness.worker.ready
        harness.worker.request_stop()
        assert await settle(run) == 0


async def test_a_missing_browser_hands_the_job_back_untouched_and_stops_claiming() -> None:
    harness = Harness()
    rendered, other = harness.enqueue("rendered", "other")
    harness.pages.hold(harness.url("rendered"))
    harness.pages.raises[harness.url("rendered")] = BrowserUnavailable(
        "no Chromium executable found", reason="browser_missing"
    )

    async with harness.running() as run:
        await settle(harness.pages.start_of(harness.url("rendered")).wait())
        harness.checks.browser_problem = "no Chromium executable found"
        # The other job is done before the browser problem shows.
        await eventually(
            lambda: harness.queue.status(other) == "completed",
            within=WITHIN_SECONDS,
            what="the other job to complete",
        )
        harness.pages.held[harness.url("rendered")].set()
        assert await settle(run) == 1  # a burst run that cannot work

    row = harness.queue.rows[rendered]
    assert (row.status, row.outcomes, row.retry_count) == ("pending", ["released"], 0)


async def test_the_rescuer_returns_expired_leases_of_dead_workers() -> None:
    harness = Harness(burst=False, lease_seconds=0.3)
    [orphan] = harness.enqueue("orphan")
    await harness.queue.claim_jobs(
        worker_id="dead-worker",
        queues=["default"],
        limit=1,
        lease_seconds=300,
        politeness=harness.worker.settings.politeness,
    )
    harness.queue.expire_leases()

    async with harness.running():
        await eventually(
            lambda: harness.queue.status(orphan) == "completed",
            within=WITHIN_SECONDS,
            what="the rescued job to complete",
        )

    assert harness.queue.rows[orphan].outcomes == ["expired", "completed"]
    assert harness.counter("leases_rescued") == 1


def test_a_worker_given_a_queue_twice_refuses_to_start_and_says_why() -> None:
    settings = WorkerSettings(database_url="postgresql://unused/", queues=("a", "b", "a"))
    with pytest.raises(ValueError, match=r"each queue named once, got \['a', 'b', 'a'\]"):
        Worker(settings, install_signal_handlers=False)


async def test_a_worker_publishes_its_parsers_for_every_queue_it_serves_once_it_runs() -> None:
    harness = Harness(burst=False, queues=("default", "shop"))

    async with harness.running():
        published = await eventually(
            lambda: dict(harness.queue.published_parsers),
            until=lambda published: len(published) == 2,
            within=WITHIN_SECONDS,
            what="the worker's first publication",
        )

    assert published == {
        "default": harness.worker.parsers.names,
        "shop": harness.worker.parsers.names,
    }


class MemoryPages(Pages):
    """Pages that read their row's crawl memory the way the worker's own scrape does."""

    def __init__(self, queue: FakeQueue) -> None:
        super().__init__(queue)
        self.worker: Worker | None = None
        self.memories: dict[str, str | None] = {}

    async def scrape(self, job: ClaimedJob, options: JobOptions) -> ScrapeResult:
        assert self.worker is not None
        assert options.crawl_key is not None
        memory = await self.worker._page_memory(job, options.crawl_key)
        self.memories[job.url] = None if memory is None else memory.etag
        return await super().scrape(job, options)


def memory_harness(**settings: Any) -> tuple[Harness, MemoryPages]:
    harness = Harness(**settings)
    pages = MemoryPages(harness.queue)
    pages.worker = harness.worker
    harness.pages = pages
    harness.worker._scrape = pages.scrape
    return harness, pages


def remembered(etag: str) -> PageMemory:
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    return PageMemory(etag, None, b"c" * 32, b"r" * 32, seen, seen, 0.0)


async def test_claimed_rows_take_the_crawl_memory_their_claim_read() -> None:
    harness, pages = memory_harness(concurrency=2, batch_size=4)
    paths = [f"site{n}" for n in range(4)]
    harness.enqueue(*paths, payload={"render": False, "crawlKey": "shop"})
    harness.queue.memory[("shop", harness.url("site2"))] = remembered('"two"')

    assert await settle(harness.worker.run()) == 0

    assert pages.memories == {
        harness.url("site0"): None,
        harness.url("site1"): None,
        harness.url("site2"): '"two"',
        harness.url("site3"): None,
    }
    assert harness.queue.calls.count("read_page_memories") == 0


@pytest.mark.parametrize(("good_for", "seen"), [(30.0, None), (0.0, '"new"')])
async def test_a_row_that_waited_past_the_read_ahead_bound_reads_its_memory_again(
    monkeypatch: pytest.MonkeyPatch, good_for: float, seen: str | None
) -> None:
    monkeypatch.setattr(worker_module, "MEMORY_READ_AHEAD_SECONDS", good_for)
    harness, pages = memory_harness(concurrency=1, batch_size=2)
    harness.enqueue("first", "waiting", payload={"render": False, "crawlKey": "shop"})
    finish = pages.hold(harness.url("first"))

    async with harness.running() as run:
        await settle(pages.start_of(harness.url("first")).wait())
        # Another run of the crawl remembers the waiting row's URL after the claim read it.
        harness.queue.memory[("shop", harness.url("waiting"))] = remembered('"new"')
        finish.set()
        assert await settle(run) == 0

    assert pages.memories[harness.url("waiting")] == seen
    # A bound of 0 s sends both rows back to the database; 30 s, neither.
    assert harness.queue.calls.count("read_page_memories") == (0 if seen is None else 2)
