"""What the worker exposes (/metrics, /healthz, /readyz) after a known run, and that 500
rendered pages leave no growing pile of Chromium processes or memory behind."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest
import scrapeq_queue as queue
from prometheus_client.parser import text_string_to_metric_families
from scrapeq_worker.browser import memory_mb
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.processes import free_port, pid_alive
from tests.waiting import eventually

from .conftest import Connection, job_row
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition text, keyed by name and sorted labels."""
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


async def test_metrics_count_exactly_what_a_known_run_did(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    for n in range(3):
        await queue.enqueue(
            connection, site.url(f"/js/{n}"), dedup_key=f"js{n}", payload={"waitFor": "h1.name"}
        )
    await queue.enqueue(connection, site.url("/static/1"), payload={"render": False})
    await queue.enqueue(connection, site.url("/missing"))
    await queue.enqueue(connection, site.url("/too-many"))
    port = free_port()
    settings = dataclasses.replace(
        worker_settings, burst=False, metrics_port=port, metrics_host="127.0.0.1"
    )
    worker = Worker(settings, install_signal_handlers=False)
    run = asyncio.create_task(worker.run())
    base = f"http://127.0.0.1:{port}"
    try:
        await eventually(
            lambda: queue.queue_backlog(connection, ["default"]),
            until=lambda backlog: (
                backlog["default"].due_pending == 0
                and backlog["default"].processing == 0
                and backlog["default"].delayed_pending == 1
            ),
            within=60,
            what="the job to be back in the queue, delayed",
            every=0.1,
        )
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as response:
                assert response.status == 200
                text = await response.text()
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with http.get(f"{base}/readyz") as response:
                assert response.status == 200
            worker.request_stop()
            assert await asyncio.wait_for(run, 30) == 0
    finally:
        worker.request_stop()
        if not run.done():
            await asyncio.wait_for(run, 30)

    values = samples(text)
    default = (("queue", "default"),)
    assert values[("scrapeq_worker_jobs_claimed_total", default)] == 6
    assert values[("scrapeq_worker_jobs_completed_total", default)] == 4
    assert (
        values[("scrapeq_worker_jobs_failed_total", (("queue", "default"), ("reason", "http_4xx")))]
        == 1
    )
    assert (
        values[("scrapeq_worker_jobs_retried_total", (("queue", "default"), ("reason", "blocked")))]
        == 1
    )
    assert (
        values[("scrapeq_worker_pages_blocked_total", (("queue", "default"), ("rule", "status")))]
        == 1
    )
    assert (
        values[
            (
                "scrapeq_worker_job_duration_seconds_count",
                (("outcome", "completed"), ("queue", "default")),
            )
        ]
        == 4
    )
    assert values[("scrapeq_worker_claim_latency_seconds_count", default)] == 6
    assert values[("scrapeq_worker_pages_in_flight", (("engine", "browser"),))] == 0
    assert values[("scrapeq_worker_pages_in_flight", (("engine", "http"),))] == 0
    restarts = [key for key in values if key[0] == "scrapeq_worker_browser_restarts_total"]
    assert restarts == []


@pytest.mark.timeout(300)
async def test_five_hundred_pages_leave_no_growing_pile_of_processes_or_memory(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    # waitUntil `load`, what every ScrapeJob's rows say (the CRD's default): a row that says
    # nothing waits for 500 ms without a request (networkidle0), two thirds of this test's time
    # spent idle, with no more pages rendered or browsers recycled for it.
    await queue.enqueue_many(
        connection, [site.url(f"/js/{n}") for n in range(500)], payload={"waitUntil": "load"}
    )
    # Recycling every 100 pages (and a new tab every 50) exercises five browser lifetimes.
    # Every page is of the one test site: let it take all the worker's slots (the default two
    # per site would make this a test of two tabs at a time, at a quarter of the speed).
    settings = dataclasses.replace(
        worker_settings,
        browser_recycle_pages=100,
        tab_reuse_pages=50,
        max_concurrent_per_site=worker_settings.concurrency,
    )
    worker = Worker(settings, install_signal_handlers=False)
    observed: list[tuple[int, int, float]] = []  # (pages done, processes, MiB)
    every_pid: set[int] = set()

    async def watch() -> None:
        while True:
            pids = worker.browser.process_ids()
            every_pid.update(pids)
            observed.append((worker.jobs_finished, len(pids), memory_mb(pids)))
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        assert await asyncio.wait_for(worker.run(), 280) == 0
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher

    stats = (await queue.queue_stats(connection))[0]
    assert stats.completed_total == 500
    # One browser per 100 pages (the recycle limit): launches are bounded, not per page.
    assert worker.browser.launches == 5
    restarts = worker.metrics.browser_restarts.labels("page_limit")._value.get()
    assert restarts == 5
    busy = [sample for sample in observed if sample[1] > 0]
    assert busy, "the watcher never saw the browser"
    # A browser is ~6 helper processes plus one renderer per open tab (one per slot);
    # while one retires and the next starts, two coexist. Anything above means a leak.
    assert max(sample[1] for sample in busy) <= 2 * (6 + worker_settings.concurrency + 2)
    first = [mib for done, _, mib in busy if done < 250]
    last = [mib for done, _, mib in busy if done >= 250]
    assert first
    assert last
    assert max(last) <= max(first) * 1.5 + 50, (max(first), max(last))
    # Nothing survives the worker: no process of any browser it started.
    assert [pid for pid in every_pid if pid_alive(pid)] == []
    row = await job_row(connection, 1)
    assert row.status == "completed"
