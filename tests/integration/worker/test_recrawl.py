"""Recurring crawls on a real PostgreSQL and a real site (and real Chromium for rendered rows):
a second run asks conditionally, completes 304s as unchanged without extraction, renders only
pages that changed, tells unchanged pages without validators by their result's hash, and skips
pages fetched within recrawlAfterSeconds without a request."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_queue import NewJob
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from .conftest import Connection, run_burst
from .recrawl_site import RecrawlSite, running_recrawl_site

pytestmark = pytest.mark.timeout(240)

EXTRACT = {"name": "h1.name", "price": ".price"}


@pytest.fixture
def catalogue() -> Iterator[RecrawlSite]:
    yield from running_recrawl_site()


async def run_crawl(
    connection: Connection,
    settings: WorkerSettings,
    urls: list[str],
    payload: dict[str, Any],
    *,
    run: int,
    within: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Enqueue one run of the crawl (a new row per URL, as a schedule's next run makes), run a
    burst worker over it (within `within` seconds, else run_burst's bound), and return each
    URL's result."""
    ids = await queue.enqueue_many(
        connection,
        [NewJob(url=url, dedup_key=f"{url}#run{run}") for url in urls],
        payload=payload,
        max_retries=0,
    )
    if within is None:
        await run_burst(settings)
    else:
        worker = Worker(settings, install_signal_handlers=False)
        assert await asyncio.wait_for(worker.run(), timeout=within) == 0
    cursor = await connection.execute(
        "SELECT url_to_scrape, status::text, result FROM scraping_jobs WHERE id = ANY(%s)",
        (ids,),
    )
    rows = await cursor.fetchall()
    assert {status for _, status, _ in rows} == {"completed"}, rows
    return {url: result for url, _, result in rows}


async def test_a_second_static_run_gets_304s_and_compares_pages_without_validators(
    connection: Connection, worker_settings: WorkerSettings, catalogue: RecrawlSite
) -> None:
    validated = [catalogue.url(f"/v/{n}") for n in range(6)]
    plain = [catalogue.url(f"/plain/{n}") for n in (10, 11)]
    payload = {"render": False, "extract": EXTRACT, "crawlKey": "catalogue/static"}

    first = await run_crawl(connection, worker_settings, validated + plain, payload, run=1)
    assert all(result["changed"] is True for result in first.values())
    assert [first[url]["validators"] for url in validated + plain] == [True] * 6 + [False] * 2
    assert catalogue.full_pages("/v/") == 6

    catalogue.change(2)
    catalogue.change(11)  # /plain/11's price changes; /plain/10 is served anew but equal
    second = await run_crawl(connection, worker_settings, validated + plain, payload, run=2)

    assert catalogue.answered_304("/v/") == 5
    assert catalogue.full_pages("/v/") == 7  # only /v/2 was sent again
    for number, url in enumerate(validated):
        result = second[url]
        if number == 2:
            assert result["changed"] is True
            assert result["fields"]["price"] == f"{number}.02"
        else:
            assert result["changed"] is False
            assert result["not_modified"] is True
            assert result["status"] == 304
            assert "fields" not in result  # the previous result is not copied
            assert result["unchanged_since"]
    assert second[plain[0]]["changed"] is False
    assert second[plain[0]]["fields"] == first[plain[0]]["fields"]
    assert "not_modified" not in second[plain[0]]
    assert second[plain[0]]["unchanged_since"]
    assert second[plain[1]]["changed"] is True


async def test_a_second_rendered_run_renders_only_the_pages_that_changed(
    connection: Connection, worker_settings: WorkerSettings, catalogue: RecrawlSite
) -> None:
    urls = [catalogue.url(f"/v/{n}") for n in range(4)]
    payload = {"render": True, "extract": EXTRACT, "crawlKey": "catalogue/rendered"}

    first = await run_crawl(connection, worker_settings, urls, payload, run=1)
    assert all(result["rendered"] and result["changed"] for result in first.values())

    catalogue.change(3)
    second = await run_crawl(connection, worker_settings, urls, payload, run=2)

    rendered = [url for url, result in second.items() if result["rendered"]]
    assert rendered == [urls[3]]
    assert second[urls[3]]["changed"] is True
    assert second[urls[3]]["engine"] == "browser"
    assert second[urls[3]]["fields"]["price"] == "3.02"
    for url in urls[:3]:
        assert second[url]["not_modified"] is True
        assert second[url]["changed"] is False
        assert second[url]["engine"] == "browser"


async def test_pages_fetched_within_recrawl_after_are_skipped_without_a_request(
    connection: Connection, worker_settings: WorkerSettings, catalogue: RecrawlSite
) -> None:
    urls = [catalogue.url(f"/v/{n}") for n in range(3)] + [catalogue.url("/plain/7")]
    payload = {
        "render": False,
        "extract": EXTRACT,
        "crawlKey": "catalogue/hourly",
        "recrawlAfterSeconds": 3600,
    }
    await run_crawl(connection, worker_settings, urls, payload, run=1)
    requests = catalogue.full_pages("/") + catalogue.answered_304("/")

    second = await run_crawl(connection, worker_settings, urls, payload, run=2)

    assert catalogue.full_pages("/") + catalogue.answered_304("/") == requests
    for url in urls:
        assert second[url]["skipped"] == "recrawl_after"
        assert second[url]["changed"] is False
        assert second[url]["fetched_at"]

    # Another crawl of the same URLs has a memory of its own.
    other = await run_crawl(
        connection, worker_settings, urls, {**payload, "crawlKey": "catalogue/other"}, run=3
    )
    assert all(result["changed"] is True for result in other.values())


async def test_rows_without_a_crawl_key_neither_read_nor_write_the_memory(
    connection: Connection, worker_settings: WorkerSettings, catalogue: RecrawlSite
) -> None:
    urls = [catalogue.url("/v/1")]
    for run in (1, 2):
        results = await run_crawl(
            connection, worker_settings, urls, {"render": False, "extract": EXTRACT}, run=run
        )
        assert "changed" not in results[urls[0]]
    assert catalogue.answered_304("/") == 0
    cursor = await connection.execute("SELECT count(*) FROM scrapeq_crawl_memory")
    assert await cursor.fetchone() == (0,)


@pytest.mark.timeout(720)
async def test_a_second_run_of_a_thousand_rendered_pages_renders_only_the_ten_that_changed(
    connection: Connection, worker_settings: WorkerSettings, catalogue: RecrawlSite
) -> None:
    """The issue's scenario with inline URLs: 1,000 pages, 20 of them without validators; 10
    pages with validators change between the runs."""
    validated = [catalogue.url(f"/v/{n}") for n in range(980)]
    plain = [catalogue.url(f"/plain/{n}") for n in range(1000, 1020)]
    # `waitUntil: load`, what a ScrapeJob's CRD defaults to (a row that says nothing waits for
    # the network to be idle for 500 ms, the classic worker's wait, which this test is not about).
    payload = {
        "render": True,
        "waitUntil": "load",
        "extract": EXTRACT,
        "crawlKey": "catalogue/thousand",
    }
    # One site: the worker's pages are what is tested, not the site's politeness limit.
    settings = dataclasses.replace(
        worker_settings, max_concurrent_per_site=worker_settings.concurrency
    )

    # 1,000 rendered pages take about 30 s on a 2-core machine, more under load.
    first = await run_crawl(connection, settings, validated + plain, payload, run=1, within=400)
    assert sum(result["rendered"] for result in first.values()) == 1000

    changed_urls = {validated[n] for n in range(0, 980, 98)}
    for url in changed_urls:
        catalogue.change(int(url.rsplit("/", 1)[1]))
    second = await run_crawl(connection, settings, validated + plain, payload, run=2, within=120)

    rendered = {url for url, result in second.items() if result["rendered"]}
    without_validators = [url for url, result in second.items() if not result["validators"]]
    assert len(without_validators) == len(plain)
    assert len(rendered) <= len(changed_urls) + len(without_validators)
    assert rendered == changed_urls | set(plain)
    # What changesOnly output would hold: exactly the pages that changed.
    assert {url for url, result in second.items() if result["changed"]} == changed_urls
    assert sum(bool(result.get("not_modified")) for result in second.values()) == 970


async def test_a_worker_on_a_crawl_holds_two_queue_connections_and_its_listen(
    database_url: str,
    connection: Connection,
    worker_settings: WorkerSettings,
    catalogue: RecrawlSite,
) -> None:
    urls = [catalogue.url(f"/v/{n}") for n in range(20)]
    payload = {"render": False, "extract": EXTRACT, "crawlKey": "catalogue/budget"}
    seen: set[str] = set()
    most = 0
    done = asyncio.Event()

    async def sample() -> None:
        # Every 10 ms while the runs last: the worker's sessions by their application names.
        nonlocal most
        async with await queue.connect(database_url) as watcher:
            while not done.is_set():
                cursor = await watcher.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
                    (f"%{worker_settings.worker_id}",),
                )
                names = [name for (name,) in await cursor.fetchall()]
                seen.update(names)
                most = max(most, len(names))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.01)

    sampler = asyncio.create_task(sample())
    try:
        await run_crawl(connection, worker_settings, urls, payload, run=1)
        second = await run_crawl(connection, worker_settings, urls, payload, run=2)
    finally:
        done.set()
        await sampler

    assert all(result["not_modified"] is True for result in second.values())
    worker_id = worker_settings.worker_id
    assert seen == {
        f"scrapeq-worker {worker_id}",
        f"scrapeq-worker-writes {worker_id}",
        f"scrapeq-worker-listen {worker_id}",
    }
    assert most <= 3
