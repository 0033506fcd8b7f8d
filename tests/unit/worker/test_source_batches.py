"""How an expansion hands its batches to the queue: the document is read on while a batch is
inserted, one insert at a time and in document order, a refused batch is the last one sent, and
a cancelled expansion leaves no insert running (the control logic of url_sources.py; the same
expansion runs against PostgreSQL in tests/integration/worker/test_sitemap_sources.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_queue.source_rows import ExpandedBatch, ExpandedEntry, KeyedEntries, SourceProgress
from scrapeq_worker.errors import RetryLater
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.url_sources import SourceExpansion

from tests.waiting import eventually

pytestmark = pytest.mark.timeout(30)

PAYLOAD: dict[str, Any] = {
    "render": False,
    "timeoutSeconds": 20,
    "source": {"kind": "object", "key": "lists/urls.txt"},
}
LINES_PER_CHUNK = 100


def url_list_job() -> queue.ClaimedJob:
    now = datetime.now(UTC)
    return queue.ClaimedJob(
        id=7,
        attempt=1,
        url="s3://lists/urls.txt",
        parser_type="default",
        payload=PAYLOAD,
        queue="default",
        priority=0,
        retry_count=0,
        max_retries=3,
        depth=0,
        parent_id=None,
        owner_uid="uid-list",
        owner_namespace="shop",
        owner_name="list",
        run_at=now,
        claimed_at=now,
        lease_expires_at=now,
    )


class ChunkedList:
    """An object store holding one URL list, sent in chunks of LINES_PER_CHUNK lines; it
    counts the chunks taken."""

    def __init__(self, urls: int) -> None:
        self.urls = urls
        self.chunks_taken = 0

    @contextlib.asynccontextmanager
    async def stream(self, key: str, *, chunk_bytes: int) -> AsyncIterator[AsyncIterator[bytes]]:
        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, self.urls, LINES_PER_CHUNK):
                self.chunks_taken += 1
                end = min(self.urls, start + LINES_PER_CHUNK)
                yield "".join(f"https://shop.test/p/{n}\n" for n in range(start, end)).encode()

        yield chunks()


class RecordingRows:
    """A queue that records each batch it is given; an insert can be held until released."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (entries_done, entries)
        self.in_flight = 0
        self.most_in_flight = 0
        self.held = asyncio.Event()
        self.held.set()
        self.refuse_from: int | None = None
        self.cancelled = 0

    async def source_progress(self, job: queue.ClaimedJob) -> SourceProgress | None:
        return SourceProgress()

    async def enqueue_expanded(
        self,
        job: queue.ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.batches.append((entries_done, len(entries)))
        try:
            await self.held.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        if self.refuse_from is not None and len(self.batches) >= self.refuse_from:
            return None
        return ExpandedBatch(pages=len(entries), sitemaps=0)


def expansion(rows: RecordingRows, store: ChunkedList) -> SourceExpansion:
    # The HTTP engine is not used by a URL list of the object store.
    return SourceExpansion(None, rows, object_store=store, batch_entries=100)  # type: ignore[arg-type]


def options() -> Any:
    return options_from_payload(PAYLOAD, default_timeout_seconds=20)


async def test_the_list_is_read_on_while_a_batch_is_inserted_one_insert_at_a_time_in_order() -> (
    None
):
    rows, store = RecordingRows(), ChunkedList(urls=450)
    rows.held.clear()
    expanding = asyncio.create_task(expansion(rows, store).expand(url_list_job(), options()))

    # The first batch (the first chunk) is held in its insert, and the next chunk is read
    # meanwhile.
    await eventually(
        lambda: (store.chunks_taken, len(rows.batches)),
        until=lambda seen: seen >= (2, 1),
        within=10,
        what="the second chunk read while the first batch is inserted",
    )
    assert rows.batches == [(100, 100)]
    rows.held.set()
    scraped = await expanding

    assert rows.batches == [(100, 100), (200, 100), (300, 100), (400, 100), (450, 50)]
    assert rows.most_in_flight == 1
    assert scraped.result["source"]["enqueued"] == 450


async def test_a_refused_batch_stops_the_expansion_and_nothing_after_it_is_sent() -> None:
    rows, store = RecordingRows(), ChunkedList(urls=1000)
    rows.refuse_from = 2

    with pytest.raises(RetryLater, match="cancelled or rescued"):
        await expansion(rows, store).expand(url_list_job(), options())

    assert rows.batches == [(100, 100), (200, 100)]


async def test_a_cancelled_expansion_cancels_its_batch_in_flight_and_leaves_no_task() -> None:
    rows, store = RecordingRows(), ChunkedList(urls=1000)
    rows.held.clear()
    expanding = asyncio.create_task(expansion(rows, store).expand(url_list_job(), options()))
    await eventually(lambda: rows.in_flight, within=10, what="an insert in flight")

    expanding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await expanding

    assert rows.cancelled == 1
    assert rows.in_flight == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}
