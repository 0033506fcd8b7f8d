"""Sitemaps as a ScrapeJob's source, on a real PostgreSQL and a local site: a worker claims a
source row, streams its document through the guard and enqueues its entries once each."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue.rows import NewJob, Owner
from scrapeq_queue.source_rows import (
    ExpandedBatch,
    ExpandedEntry,
    KeyedEntries,
    SourceProgress,
    enqueue_expanded,
    source_progress,
)
from scrapeq_worker.errors import RetryLater
from scrapeq_worker.http_engine import HttpEngine
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard, parse_networks
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.url_sources import SourceExpansion

from .conftest import Connection, run_burst
from .site import ALLOW_SITE
from .sitemap_site import SitemapSite, page_url, running_sitemap_site

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

OWNER = Owner(uid="uid-catalogue", namespace="shop", name="catalogue")
PAGE_OPTIONS: dict[str, Any] = {"render": False, "timeoutSeconds": 20}


@pytest.fixture
def sitemap_site() -> Iterator[SitemapSite]:
    yield from running_sitemap_site()


@pytest.fixture
def fast_settings(worker_settings: WorkerSettings) -> WorkerSettings:
    """One in-process worker that may take many rows of the one test site at once."""
    return dataclasses.replace(
        worker_settings,
        max_concurrent_per_site=20,
        site_delay_seconds=0.0,
        respect_robots_txt=False,
        concurrency=8,
    )


async def enqueue_source(
    connection: Connection, url: str, kind: str = "sitemap", **source: Any
) -> int:
    (source_id,) = await queue.enqueue_many(
        connection,
        [NewJob(url=url, dedup_key=f"sitemap:{url}")],
        owner=OWNER,
        payload={**PAGE_OPTIONS, "source": {"kind": kind, **source}},
    )
    return source_id


async def owner_rows(connection: Connection) -> list[tuple[int, str, str, Any, Any]]:
    cursor = await connection.execute(
        "SELECT id, url_to_scrape, status::text, payload, result FROM scraping_jobs"
        " WHERE owner_uid = %s ORDER BY id",
        (OWNER.uid,),
    )
    return list(await cursor.fetchall())


def page_rows(rows: Sequence[tuple[int, str, str, Any, Any]]) -> list[str]:
    return [url for _, url, _, payload, _ in rows if "source" not in (payload or {})]


async def test_a_sitemap_index_of_three_sitemaps_some_gzipped_enqueues_each_page_exactly_once(
    sitemap_site: SitemapSite, connection: Connection, fast_settings: WorkerSettings
) -> None:
    index = await enqueue_source(connection, f"{sitemap_site.base}/index.xml?n=3&m=20")
    # A page the job also names itself: queued once, not twice.
    await queue.enqueue_for_owner(
        connection, OWNER, [page_url(sitemap_site.base, 0, 0)], payload=PAGE_OPTIONS
    )

    await run_burst(fast_settings)

    rows = await owner_rows(connection)
    pages = page_rows(rows)
    expected = {page_url(sitemap_site.base, s, p) for s in range(3) for p in range(20)}
    assert sorted(pages) == sorted(expected)
    assert {status for _, _, status, _, _ in rows} == {"completed"}
    (index_result,) = [result for id_, _, _, _, result in rows if id_ == index]
    assert index_result["source"] == {
        "kind": "sitemapindex",
        "entries": 3,
        "enqueued": 0,
        "sitemaps": 3,
        "skipped": 0,
        "truncated": False,
        "resumedAfter": 0,
    }
    sitemap_results = [
        result["source"]
        for _, url, _, payload, result in rows
        if "source" in payload and url != rows[0][1]
    ]
    assert sorted(result["enqueued"] for result in sitemap_results) == [19, 20, 20]
    assert all(result["kind"] == "urlset" for result in sitemap_results)
    # Each sitemap read once (the odd ones gzip-compressed under an .xml name).
    assert [sitemap_site.requests[f"/sitemaps/{n}.xml"] for n in range(3)] == [1, 1, 1]


async def test_robots_txt_sitemap_lines_and_a_lastmod_filter_keep_only_the_changed_pages(
    sitemap_site: SitemapSite, connection: Connection, fast_settings: WorkerSettings
) -> None:
    # robots.txt names /index.xml?n=2&m=3; pages have lastmod 2026-01-01..03.
    await enqueue_source(
        connection,
        f"{sitemap_site.base}/robots.txt",
        kind="robots",
        lastmodAfter="2026-01-02T00:00:00Z",
    )

    await run_burst(fast_settings)

    rows = await owner_rows(connection)
    assert sorted(page_rows(rows)) == [page_url(sitemap_site.base, s, 2) for s in range(2)]
    assert {status for _, _, status, _, _ in rows} == {"completed"}


@pytest.mark.parametrize(
    ("path", "reason", "message"),
    [
        ("/hostile/entities.xml", "invalid_sitemap", "declares DOCTYPE"),
        ("/hostile/not-xml.xml", "invalid_sitemap", "neither XML nor a list of URLs"),
        ("/hostile/html.xml", "invalid_sitemap", "root element is 'html'"),
        ("/hostile/broken.xml.gz", "invalid_sitemap", "not a valid gzip archive"),
        ("/redirect-private", "blocked_address", "169.254.169.254"),
        ("/missing.xml", "http_4xx", "HTTP 404"),
    ],
)
async def test_a_hostile_sitemap_fails_with_its_reason_and_the_jobs_other_rows_complete(
    sitemap_site: SitemapSite,
    connection: Connection,
    fast_settings: WorkerSettings,
    path: str,
    reason: str,
    message: str,
) -> None:
    hostile = await enqueue_source(connection, sitemap_site.base + path)
    good = await enqueue_source(connection, f"{sitemap_site.base}/sitemaps/0.xml?m=5")

    await run_burst(fast_settings)

    cursor = await connection.execute(
        "SELECT status::text, last_error, last_error_reason FROM scraping_jobs WHERE id = %s",
        (hostile,),
    )
    row = await cursor.fetchone()
    assert row is not None
    status, error, error_reason = row
    assert (status, error_reason) == ("failed", reason)
    assert message in error
    rows = await owner_rows(connection)
    assert len(page_rows(rows)) == 5
    assert {status for id_, _, status, _, _ in rows if id_ not in (hostile,)} == {"completed"}
    assert good in [id_ for id_, *_ in rows]


class InterruptedRows:
    """The real queue for an expansion, with a hook after each batch (a kill, a deletion)."""

    def __init__(self, connection: Connection, after_batch: Any = None) -> None:
        self.connection = connection
        self.batches = 0
        self.after_batch = after_batch

    async def source_progress(self, job: queue.ClaimedJob) -> SourceProgress | None:
        return await source_progress(self.connection, job)

    async def enqueue_expanded(
        self,
        job: queue.ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        batch = await enqueue_expanded(
            self.connection, job, entries, entries_done=entries_done, skipped=skipped
        )
        self.batches += 1
        if self.after_batch is not None:
            await self.after_batch(self.batches)
        return batch


class WorkerKilled(Exception):
    pass


async def claim(connection: Connection) -> queue.ClaimedJob:
    (job,) = await queue.claim_jobs(
        connection,
        worker_id="expander",
        queues=["default"],
        limit=1,
        lease_seconds=60,
        politeness=queue.NO_SITE_LIMIT,
    )
    return job


@pytest.fixture
async def engine() -> Any:
    async with HttpEngine(NetworkGuard(allow_networks=parse_networks(ALLOW_SITE))) as http:
        yield http


def options() -> Any:
    return options_from_payload(PAGE_OPTIONS, default_timeout_seconds=20)


async def test_an_expansion_killed_halfway_resumes_after_its_last_batch_without_duplicates(
    sitemap_site: SitemapSite, connection: Connection, engine: HttpEngine
) -> None:
    source_id = await enqueue_source(connection, f"{sitemap_site.base}/sitemaps/1.xml?m=2500")
    first = await claim(connection)

    async def kill(batches: int) -> None:
        if batches == 3:
            raise WorkerKilled

    with pytest.raises(WorkerKilled):
        await SourceExpansion(engine, InterruptedRows(connection, kill), batch_entries=500).expand(
            first, options()
        )
    assert len(page_rows(await owner_rows(connection))) == 1500
    await connection.execute(
        "UPDATE scraping_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (source_id,),
    )
    await queue.rescue_expired_leases(connection)
    await connection.execute(
        "UPDATE scraping_jobs SET run_at = now() - interval '1 hour' WHERE id = %s", (source_id,)
    )
    second = await claim(connection)
    assert second.id == source_id

    resumed = InterruptedRows(connection)
    scraped = await SourceExpansion(engine, resumed, batch_entries=500).expand(second, options())

    pages = page_rows(await owner_rows(connection))
    assert sorted(pages) == sorted(page_url(sitemap_site.base, 1, p) for p in range(2500))
    assert resumed.batches == 2  # only the 1,000 entries after the last recorded batch
    assert scraped.result["source"]["enqueued"] == 2500
    assert scraped.result["source"]["resumedAfter"] == 1500


async def test_deleting_the_job_mid_expansion_stops_it_and_leaves_no_live_rows(
    sitemap_site: SitemapSite, connection: Connection, engine: HttpEngine, database_url: str
) -> None:
    await enqueue_source(connection, f"{sitemap_site.base}/sitemaps/0.xml?m=5000")
    source = await claim(connection)

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as operator:

        async def delete_job(batches: int) -> None:
            if batches == 2:
                await queue.cancel_owner(operator, OWNER.uid)

        rows = InterruptedRows(connection, delete_job)
        with pytest.raises(RetryLater, match="cancelled or rescued"):
            await SourceExpansion(engine, rows, batch_entries=500).expand(source, options())

    assert rows.batches == 3  # the batch after the cancel inserted nothing, and it stopped
    statuses = [status for _, _, status, _, _ in await owner_rows(connection)]
    assert len(statuses) == 1001
    assert set(statuses) == {"cancelled"}


class CountingRows:
    """A queue that counts what it is given and keeps nothing: the expansion's own memory."""

    def __init__(self) -> None:
        self.rows = 0
        self.peak_rss_kib = 0

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
        self.rows += len(entries)
        self.peak_rss_kib = max(self.peak_rss_kib, current_rss_kib())
        return ExpandedBatch(pages=len(entries), sitemaps=0)


def current_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def source_job(url: str, job_id: int) -> queue.ClaimedJob:
    now = datetime.now(UTC)
    return queue.ClaimedJob(
        id=job_id,
        attempt=1,
        url=url,
        parser_type="default",
        payload={**PAGE_OPTIONS, "source": {"kind": "sitemap"}},
        queue="default",
        priority=0,
        retry_count=0,
        max_retries=3,
        depth=0,
        parent_id=None,
        owner_uid=OWNER.uid,
        owner_namespace=OWNER.namespace,
        owner_name=OWNER.name,
        run_at=now,
        claimed_at=now,
        lease_expires_at=now,
    )


@pytest.mark.timeout(600)
async def test_sitemaps_of_the_protocols_largest_size_stream_with_bounded_memory(
    sitemap_site: SitemapSite, engine: HttpEngine
) -> None:
    # Ten sitemaps of 50,000 URLs (4.6 MB each as XML; every other one gzip-compressed), read
    # one after the other as a worker reads an index's: memory stays near one batch.
    sitemaps, urls = 10, 50_000
    rows = CountingRows()
    baseline = current_rss_kib()
    for number in range(sitemaps):
        job = source_job(f"{sitemap_site.base}/sitemaps/{number}.xml?m={urls}", number + 1)
        scraped = await SourceExpansion(engine, rows).expand(job, options())
        assert scraped.result["source"]["entries"] == urls
    assert rows.rows == sitemaps * urls
    grown_mib = (rows.peak_rss_kib - baseline) / 1024
    print(f"RSS: baseline {baseline / 1024:.0f} MiB, peak growth {grown_mib:.1f} MiB")
    assert grown_mib < 40


class IndexedCountingRows(CountingRows):
    """CountingRows that keeps the sitemaps an index lists (a few hundred URLs), to read them."""

    def __init__(self) -> None:
        super().__init__()
        self.sitemaps: list[str] = []

    async def enqueue_expanded(
        self,
        job: queue.ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        assert isinstance(entries, KeyedEntries)
        listed = [
            url
            for url, is_sitemap in zip(entries.urls, entries.is_sitemap, strict=True)
            if is_sitemap
        ]
        self.sitemaps.extend(listed)
        counted = await super().enqueue_expanded(
            job, entries, entries_done=entries_done, skipped=skipped
        )
        assert counted is not None
        return ExpandedBatch(pages=counted.pages - len(listed), sitemaps=len(listed))


@pytest.mark.scale
@pytest.mark.timeout(2400)
async def test_an_index_of_200_sitemaps_of_50000_urls_streams_through_one_slot_in_bounded_memory(
    sitemap_site: SitemapSite, engine: HttpEngine
) -> None:
    # The Done-when size of issue 27: 10,000,000 URLs, an index and 200 sitemaps of the
    # protocol's largest size (every other one gzip-compressed), read one after the other as
    # one worker slot reads them, each batch keyed as for its insert. What is measured is the
    # expansion's own memory (the reader, the batches, the keys): the queue here keeps
    # nothing, so no 10,000,000 rows are written (the insert path is measured in
    # docs/benchmarks.md).
    sitemaps, urls = 200, 50_000
    rows = IndexedCountingRows()
    baseline = current_rss_kib()
    index = source_job(f"{sitemap_site.base}/index.xml?n={sitemaps}&m={urls}", 1)
    scraped = await SourceExpansion(engine, rows).expand(index, options())
    assert scraped.result["source"]["sitemaps"] == sitemaps
    assert len(rows.sitemaps) == sitemaps

    for number, url in enumerate(rows.sitemaps, start=2):
        scraped = await SourceExpansion(engine, rows).expand(source_job(url, number), options())
        assert scraped.result["source"]["entries"] == urls

    assert rows.rows == sitemaps + sitemaps * urls
    grown_mib = (rows.peak_rss_kib - baseline) / 1024
    print(f"RSS: baseline {baseline / 1024:.0f} MiB, peak growth {grown_mib:.1f} MiB")
    assert grown_mib < 40
