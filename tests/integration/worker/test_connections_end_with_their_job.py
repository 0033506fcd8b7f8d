"""No connection to a site outlives the job that opened it (docs/worker.md, "Timeouts").

A site that stops sending — silent after the request, a Content-Length it never fills, one
byte every 100 ms forever — is fetched by a rendered page (its stylesheet, script and image) and
as documents by the plain-HTTP engine, with a healthy row beside them. The worker keeps running
(its browser and the owner's warm browser context stay alive); once each stalled row has ended
with `timeout`, the worker's process must hold no socket to the site within a second (counted
in /proc: the worker runs in the test's process). The site never closes first, so only the
worker's own closing counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from tests.waiting import eventually

from .conftest import Connection, job_row
from .site import SITE_HOST, HostileSite
from .stalled_site import STALLS, StalledSite, running_stalled_site, sockets_to

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(120)]

# After a row has ended, its connections are gone within this (the route is released when the
# tab is given back, before the outcome is written: the margin is for a loaded machine).
CONNECTIONS_END_WITHIN_SECONDS = 1.0


@pytest.fixture
def stalled() -> Iterator[StalledSite]:
    yield from running_stalled_site()


async def ended(connection: Connection, job_id: int) -> bool:
    return (await job_row(connection, job_id)).status in ("completed", "failed")


async def test_a_stalled_site_holds_no_connection_a_second_after_its_rows_ended(
    stalled: StalledSite,
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    rows: dict[str, int] = {}
    rendered = await queue.enqueue(
        connection, stalled.url("/page/1"), payload={"timeoutSeconds": 3}, max_retries=0
    )
    assert rendered is not None
    rows["rendered page"] = rendered
    for kind in STALLS:
        job_id = await queue.enqueue(
            connection,
            stalled.url(f"/{kind}/document"),
            payload={"render": False, "timeoutSeconds": 3},
            max_retries=0,
        )
        assert job_id is not None
        rows[f"{kind} document"] = job_id
    healthy = await queue.enqueue(
        connection, site.url("/js/1"), payload={"waitFor": "h1.name"}, max_retries=0
    )
    assert healthy is not None
    settings = dataclasses.replace(worker_settings, burst=False)
    worker = Worker(settings, install_signal_handlers=False)
    run = asyncio.create_task(worker.run())
    loop = asyncio.get_running_loop()
    try:
        pending = dict(rows)
        ends: dict[str, float] = {}
        most_held = 0
        async with asyncio.timeout(60):
            while pending:
                most_held = max(most_held, sockets_to(SITE_HOST, stalled.port))
                for name, job_id in list(pending.items()):
                    if await ended(connection, job_id):
                        ends[name] = loop.time()
                        del pending[name]
                await asyncio.sleep(0.05)
        last_end = max(ends.values())
        await eventually(
            lambda: sockets_to(SITE_HOST, stalled.port) == 0,
            within=CONNECTIONS_END_WITHIN_SECONDS,
            what="the worker to hold no socket to the stalled site "
            f"(held: {sockets_to(SITE_HOST, stalled.port)})",
        )
        closed_after = loop.time() - last_end
        # A trickling site notices too: its writes fail.
        await eventually(
            lambda: stalled.open["trickle"] == 0,
            within=CONNECTIONS_END_WITHIN_SECONDS,
            what="the trickling site's writes to fail",
        )
        assert not run.done(), "the worker (and its browser) must still be running"
    finally:
        worker.request_stop()
        await asyncio.wait_for(run, 30)

    for name, job_id in rows.items():
        row = await job_row(connection, job_id)
        assert (row.status, row.last_reason) == ("failed", "timeout"), (name, row.last_error)
    assert (await job_row(connection, healthy)).status == "completed"
    # Each kind of stall was reached, by the page's sub-resources and by the documents.
    assert all(stalled.accepted[kind] >= 2 for kind in STALLS), dict(stalled.accepted)
    assert most_held >= 3  # stalled connections were really held while the rows ran
    assert closed_after <= CONNECTIONS_END_WITHIN_SECONDS + 0.5


async def test_a_page_that_keeps_requesting_after_its_job_completed_holds_and_opens_nothing(
    stalled: StalledSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    """The page completes its job while a silent and a trickling request are open, and keeps
    starting new ones. Once the row is completed, its connections are cut within a second and
    its browser context lets nothing more out until the owner's next job."""
    job_id = await queue.enqueue(
        connection,
        stalled.url("/after-load/1"),
        payload={"waitFor": "#started", "extract": {"started": "#started"}},
        max_retries=0,
    )
    assert job_id is not None
    settings = dataclasses.replace(worker_settings, burst=False)
    worker = Worker(settings, install_signal_handlers=False)
    run = asyncio.create_task(worker.run())
    loop = asyncio.get_running_loop()
    try:
        most_held = 0
        async with asyncio.timeout(60):
            while not await ended(connection, job_id):
                most_held = max(most_held, sockets_to(SITE_HOST, stalled.port))
                await asyncio.sleep(0.05)
        completed_at = loop.time()
        await eventually(
            lambda: sockets_to(SITE_HOST, stalled.port) == 0,
            within=CONNECTIONS_END_WITHIN_SECONDS,
            what="the worker to hold no socket to the site "
            f"(held: {sockets_to(SITE_HOST, stalled.port)})",
        )
        closed_after = loop.time() - completed_at
        # Watch for a while: the page keeps trying every 200 ms, and nothing may get through.
        accepted = sum(stalled.accepted.values())
        watch_until = loop.time() + 1.5
        while loop.time() < watch_until:
            assert sockets_to(SITE_HOST, stalled.port) == 0
            assert sum(stalled.accepted.values()) == accepted, dict(stalled.accepted)
            await asyncio.sleep(0.05)
        assert not run.done()
    finally:
        worker.request_stop()
        await asyncio.wait_for(run, 30)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"started": "started"}
    assert stalled.accepted["silent"] >= 1
    assert stalled.accepted["trickle"] == 1
    assert most_held >= 1
    assert closed_after <= CONNECTIONS_END_WITHIN_SECONDS + 0.5
