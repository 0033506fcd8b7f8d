"""What the queue gateway makes of each kind of failure, against the in-memory queue."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from scrapeq_queue import DEFAULT_POLITENESS, ClaimedJob, DatabaseUnavailable, PageMemory
from scrapeq_worker.metrics import WorkerMetrics
from scrapeq_worker.queue_gateway import QueueGateway
from scrapeq_worker.readiness import Readiness, ReadinessSchedule
from scrapeq_worker.robots import RobotsRead

from tests.waiting import eventually

from .fake_queue import FakeQueue

pytestmark = pytest.mark.timeout(10)


class Checks:
    async def temp_dir(self) -> str | None:
        return None

    async def browser(self, *, relaunch: bool) -> str | None:
        return None


class Gateway:
    def __init__(self) -> None:
        self.queue = FakeQueue()
        self.metrics = WorkerMetrics()
        self.readiness = ReadinessSchedule(
            Readiness(self.metrics.ready, self.metrics.not_ready, initially="database", why="-"),
            Checks(),
        )
        self.delays: list[int] = []
        self.stopping = asyncio.Event()

        def reconnect_delay(failures: int) -> float:
            self.delays.append(failures)
            return 0.0

        self.gateway = QueueGateway(
            self.queue,
            worker_id="unit-worker",
            metrics=self.metrics,
            readiness=self.readiness,
            stopping=self.stopping,
            reconnect_delay=reconnect_delay,
        )

    def counter(self, name: str) -> float:
        return float(getattr(self.metrics, name)._value.get())

    async def claim_one(self) -> ClaimedJob:
        claimed = await self.gateway.claim(
            queues=["default"], limit=1, lease_seconds=60, politeness=DEFAULT_POLITENESS
        )
        assert claimed is not None
        [job] = claimed
        return job

    async def claim(self) -> list[int] | None:
        claimed = await self.gateway.claim(
            queues=["default"], limit=10, lease_seconds=60, politeness=DEFAULT_POLITENESS
        )
        return None if claimed is None else [job.id for job in claimed]


async def test_claims_raising_unexpectedly_back_off_longer_each_time_and_then_claim() -> None:
    g = Gateway()
    job_id = g.queue.enqueue("http://site.test/")
    g.queue.faults["claim_jobs"] = ValueError("a row the queue cannot load")

    assert await g.claim() is None
    g.queue.faults["claim_jobs"] = RecursionError("maximum recursion depth exceeded")
    assert await g.claim() is None
    assert await g.claim() == [job_id]

    assert g.delays == [1, 2]
    assert g.counter("claim_errors") == 2
    assert g.counter("database_errors") == 0


async def test_a_lost_database_fails_a_claim_after_one_backoff_and_says_so_in_readiness() -> None:
    g = Gateway()
    g.queue.down = True

    assert await g.claim() is None
    assert g.readiness.readiness.holds("database")
    g.queue.down = False
    assert await g.claim() == []

    assert not g.readiness.readiness.holds("database")
    assert g.gateway.back.is_set()
    assert g.counter("database_errors") == 1


async def test_an_outcome_write_waits_out_a_schema_behind_and_is_then_recorded() -> None:
    g = Gateway()
    job_id = g.queue.enqueue("http://site.test/")
    job = await g.claim_one()
    g.queue.schema_behind = True

    write = asyncio.create_task(
        g.gateway.fail_job(job, error="gone", reason="http_4xx", duration_seconds=0.1)
    )
    await eventually(
        lambda: g.queue.calls.count("fail_job") >= 3, within=5.0, what="three tries of the write"
    )
    assert not write.done()
    assert not g.readiness.can_claim
    g.queue.schema_behind = False

    async with asyncio.timeout(5):
        assert await write is True
    assert g.queue.status(job_id) == "failed"


async def test_an_outcome_write_gives_up_once_the_worker_stops() -> None:
    g = Gateway()
    g.queue.enqueue("http://site.test/")
    job = await g.claim_one()
    g.queue.down = True

    write = asyncio.create_task(
        g.gateway.fail_job(job, error="gone", reason="http_4xx", duration_seconds=0.1)
    )
    await eventually(
        lambda: g.queue.calls.count("fail_job") >= 3, within=5.0, what="three tries of the write"
    )
    g.stopping.set()

    async with asyncio.timeout(5):
        assert await write is None


async def test_an_error_that_is_not_the_queues_reaches_the_writer() -> None:
    g = Gateway()
    g.queue.faults["complete_many"] = RuntimeError("the database refused the value")

    with pytest.raises(RuntimeError, match="refused"):
        await g.gateway.complete_many([])


async def test_the_robots_copy_store_answers_none_while_the_database_is_down() -> None:
    g = Gateway()
    g.queue.down = True

    assert await g.gateway.robots_copy("http://site.test", 15) is None
    await g.gateway.store_robots_copy("http://site.test", RobotsRead(200, "", None), 60)
    g.queue.down = False
    copy = await g.gateway.robots_copy("http://site.test", 15)

    assert copy is not None
    assert (copy.held, copy.leased) == (False, True)


async def test_renewals_answer_none_when_the_database_fails_and_the_answering_time_restarts() -> (
    None
):
    g = Gateway()
    g.queue.faults["renew_leases"] = DatabaseUnavailable("connection reset")

    assert g.gateway.seconds_answering() == math.inf
    assert await g.gateway.renew_leases([(1, 1)], 60) is None
    assert g.gateway.seconds_answering() == 0
    assert await g.gateway.renew_leases([(1, 1)], 60) == set()
    assert 0 <= g.gateway.seconds_answering() < 60


def _remembered(etag: str) -> PageMemory:
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    return PageMemory(etag, None, b"c" * 32, b"r" * 32, seen, seen, 0.0)


async def test_crawl_memory_reads_asked_together_go_in_one_statement_each_answered() -> None:
    g = Gateway()
    g.queue.memory[("shop", "http://site.test/1")] = _remembered('"one"')
    g.queue.memory[("shop", "http://site.test/3")] = _remembered('"three"')

    memories = await asyncio.gather(
        *(g.gateway.page_memory("shop", f"http://site.test/{n}") for n in range(1, 5))
    )

    assert [None if memory is None else memory.etag for memory in memories] == [
        '"one"',
        None,
        '"three"',
        None,
    ]
    assert g.queue.calls.count("read_page_memories") == 1


async def test_crawl_memory_reads_asked_during_a_read_go_together_in_the_next() -> None:
    g = Gateway()
    g.queue.memory[("shop", "http://site.test/2")] = _remembered('"two"')
    held = asyncio.Event()
    answer = g.queue.read_page_memories
    sizes: list[int] = []

    async def held_read(pages: Sequence[tuple[str, str]]) -> list[PageMemory | None]:
        sizes.append(len(pages))
        if len(sizes) == 1:
            await held.wait()
        return await answer(pages)

    g.queue.read_page_memories = held_read  # type: ignore[method-assign]
    first = asyncio.create_task(g.gateway.page_memory("shop", "http://site.test/1"))
    await eventually(lambda: sizes == [1], within=5.0, what="the first read under way")
    later = [
        asyncio.create_task(g.gateway.page_memory("shop", f"http://site.test/{n}"))
        for n in (2, 3, 4)
    ]
    cancelled = asyncio.create_task(g.gateway.page_memory("shop", "http://site.test/5"))
    await eventually(lambda: len(g.gateway._memory_asked) == 4, within=5.0, what="four asked")
    cancelled.cancel()
    held.set()

    async with asyncio.timeout(5):
        assert await first is None
        answers = await asyncio.gather(*later)
    assert [None if memory is None else memory.etag for memory in answers] == [
        '"two"',
        None,
        None,
    ]
    assert sizes == [1, 4]
    assert cancelled.cancelled()


async def test_crawl_memory_reads_answer_none_while_the_database_is_down_and_read_again_after() -> (
    None
):
    g = Gateway()
    g.queue.memory[("shop", "http://site.test/1")] = _remembered('"one"')
    g.queue.down = True

    down = await asyncio.gather(
        *(g.gateway.page_memory("shop", f"http://site.test/{n}") for n in (1, 2))
    )
    g.queue.down = False
    again = await g.gateway.page_memory("shop", "http://site.test/1")

    assert down == [None, None]
    assert g.counter("database_errors") == 1
    assert again is not None
    assert again.etag == '"one"'


async def test_an_error_that_is_not_the_queues_reaches_every_reader_of_its_statement() -> None:
    g = Gateway()
    g.queue.faults["read_page_memories"] = RuntimeError("the database refused the value")

    answers = await asyncio.gather(
        *(g.gateway.page_memory("shop", f"http://site.test/{n}") for n in (1, 2)),
        return_exceptions=True,
    )

    assert [str(answer) for answer in answers] == ["the database refused the value"] * 2
    assert await g.gateway.page_memory("shop", "http://site.test/1") is None
