"""SIGTERM on a real `scrapeq worker` process in the middle of a batch loses no job, and
stopping pages in flight leaves no "exception was never retrieved" behind."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import scrapeq_queue as queue
from scrapeq_worker.browser import BrowserPool, BrowserSettings
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard, parse_networks

from tests.waiting import eventually

from .conftest import Connection, job_row
from .site import ALLOW_SITE, HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

REPOSITORY = Path(__file__).resolve().parents[3]


async def test_sigterm_during_a_batch_finishes_or_releases_every_job(
    site: HostileSite,
    database_url: str,
    chromium_executable: str,
    connection: Connection,
) -> None:
    # Claimed first (lower ids): two pages that never finish loading, so the drain has
    # something it must hand back; then pages that take 1.5 s, so it has something to finish.
    stuck = [
        await queue.enqueue(
            connection,
            site.url(f"/never-loads?{n}"),
            dedup_key=f"stuck{n}",
            payload={"timeoutSeconds": 60},
        )
        for n in range(2)
    ]
    slow = [
        await queue.enqueue(
            connection,
            site.url(f"/slow/{n}?ms=1500"),
            dedup_key=str(n),
            payload={"waitFor": "h1.name"},
        )
        for n in range(6)
    ]
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SCRAPEQ_ALLOW_NETWORKS": ALLOW_SITE,
        "SCRAPEQ_CHROMIUM": chromium_executable,
        # Every page is on the one test site; the drain needs all 4 slots busy at once.
        "SCRAPEQ_MAX_CONCURRENT_PER_SITE": "4",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scrapeq", "worker",
        "--concurrency", "4", "--batch-size", "2", "--drain-seconds", "4",
        "--metrics-port", "0", "--poll-seconds", "0.5", "--worker-id", "draining-worker",
        cwd=REPOSITORY, env=environment, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    output = b""
    try:
        await eventually(
            lambda: (
                site.hits["/stall"] >= 2 and any(path.startswith("/slow/") for path in site.hits)
            ),
            within=60,
            what="two stuck pages and a slow page in flight",
        )
        assert process.returncode is None
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    log = output.decode(errors="replace")
    assert process.returncode == 0, log

    rows = {job_id: await job_row(connection, job_id) for job_id in stuck + slow}
    assert {row.status for row in rows.values()} <= {"completed", "pending"}, log
    for job_id in stuck:
        row = rows[job_id]
        assert row.status == "pending"
        assert row.retry_count == 0
        assert row.attempts[-1].outcome == "released"
    finished = [job_id for job_id in slow if rows[job_id].status == "completed"]
    assert finished, "the slow pages in flight should have finished during the drain"
    backlog = (await queue.queue_backlog(connection, ["default"]))["default"]
    assert backlog.processing == 0
    assert backlog.due_pending == sum(1 for row in rows.values() if row.status == "pending")
    assert "released 2 unfinished jobs" in log
    assert "exception was never retrieved" not in log, log


async def stop_pages_in_flight(site: HostileSite, executable: str, order: str, tag: str) -> None:
    """What a drain does to the browser: pages that never finish loading and pages half-way
    through are cancelled and the browser closed under them (in either order)."""
    pool = BrowserPool(
        BrowserSettings(executable=executable, tab_reuse_pages=5),
        NetworkGuard(allow_networks=parse_networks(ALLOW_SITE)),
    )
    quick = options_from_payload({"waitFor": "h1.name"}, default_timeout_seconds=30)
    forever = options_from_payload({"timeoutSeconds": 30}, default_timeout_seconds=30)
    stalled = site.hits["/stall"]
    try:
        for n in range(4):  # warm tabs, reused by the pages below
            await pool.render(site.url(f"/js/{n}"), quick)
        pages = [
            asyncio.create_task(pool.render(site.url(f"/never-loads?{tag}{n}"), forever))
            for n in range(3)
        ] + [asyncio.create_task(pool.render(site.url(f"/js/{n}"), quick)) for n in range(10, 14)]
        await eventually(
            lambda: site.hits["/stall"] >= stalled + 3, within=30, what="three pages stuck"
        )
        if order == "close-then-cancel":
            await pool.close()
        for page in pages:
            page.cancel()
        await asyncio.gather(*pages, return_exceptions=True)
    finally:
        await pool.close()


@pytest.mark.parametrize("order", ["cancel-then-close", "close-then-cancel"])
async def test_stopping_pages_in_flight_leaves_no_exception_never_retrieved(
    site: HostileSite, chromium_executable: str, caplog: pytest.LogCaptureFixture, order: str
) -> None:
    # pyppeteer fails the reply futures nobody awaits when its connection closes, and a
    # cancelled navigation may still end with an error: none of it may surface as asyncio's
    # "never retrieved" when the futures are collected. The race shows about once in four
    # stops, hence three rounds.
    caplog.set_level(logging.ERROR, logger="asyncio")
    for round_number in range(3):
        await stop_pages_in_flight(site, chromium_executable, order, f"{order}{round_number}-")
        gc.collect()
        await asyncio.sleep(0)
    unretrieved = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not unretrieved, unretrieved
