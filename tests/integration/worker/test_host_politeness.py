"""Per-site politeness and robots.txt, proved with real `scrapeq worker` processes.

Three worker processes with 8 page slots each share one PostgreSQL queue and a site that is four
hosts (127.0.0.2-5) and writes down every request's arrival and how many it had in flight at once.
Pages are `render: false`: politeness lives in the claim, the same for both engines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import scrapeq_queue as queue
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings

from tests.waiting import eventually

from .conftest import Connection, job_row, run_burst
from .polite_site import ALLOW_HOSTS, PoliteSite, Robots, running_polite_site
from .test_priorities_and_pools import scrapeq_worker

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

WORKER_PROCESSES: Final = 3
A, B, C, D = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"


@pytest.fixture
def polite_site() -> Iterator[PoliteSite]:
    yield from running_polite_site()


@contextlib.asynccontextmanager
async def three_workers(
    database_url: str, tmp_path: Path, *arguments: str
) -> AsyncIterator[list[Any]]:
    """Three real worker processes (concurrency 8 each) allowed to reach the four hosts."""
    async with contextlib.AsyncExitStack() as stack:
        processes = [
            await stack.enter_async_context(
                scrapeq_worker(
                    database_url,
                    tmp_path / f"worker-{n}.log",
                    "--worker-id", f"polite-{n}", "--lease-seconds", "3", *arguments,
                    allow_networks=ALLOW_HOSTS,
                    max_concurrent_per_site=None,
                )
            )
            for n in range(WORKER_PROCESSES)
        ]  # fmt: skip
        yield processes


async def enqueue(connection: Connection, urls: list[str], **politeness: Any) -> list[int]:
    payload: dict[str, Any] = {"render": False}
    if politeness:
        payload["politeness"] = politeness
    return await queue.enqueue_many(connection, urls, payload=payload, max_retries=5)


async def statuses(connection: Connection, ids: list[int]) -> list[str]:
    cursor = await connection.execute(
        "SELECT status::text FROM scraping_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    )
    return [row[0] for row in await cursor.fetchall()]


async def all_completed(connection: Connection, ids: list[int], within: float, what: str) -> None:
    async def done() -> bool:
        return set(await statuses(connection, ids)) == {"completed"}

    await eventually(done, within=within, what=what, every=0.1)


async def test_a_site_never_sees_more_than_its_limit_while_other_sites_keep_completing(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    limited = await enqueue(
        connection,
        [polite_site.url(A, f"/page/{n}?ms=150") for n in range(40)],
        maxConcurrentPerSite=2,
    )
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="wide", patterns=(B, C), max_concurrent_per_site=8)
    )
    others = await enqueue(
        connection,
        [polite_site.url(host, f"/page/{n}?ms=20") for host in (B, C) for n in range(40)],
    )
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, others, 60, "the other hosts' rows")
        # 40 pages of 150 ms two at a time take 3 s: the others finished long before.
        assert "pending" in await statuses(connection, limited)
        await all_completed(connection, limited, 90, "the limited host's rows")
    assert polite_site.records[A].max_in_flight == 2
    assert polite_site.records[B].max_in_flight > 2


async def test_with_a_delay_consecutive_requests_to_a_site_are_that_far_apart(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    slow = await enqueue(
        connection, [polite_site.url(A, f"/page/{n}") for n in range(6)], delaySeconds=0.5
    )
    others = await enqueue(connection, [polite_site.url(B, f"/page/{n}") for n in range(30)])
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, others, 60, "the undelayed host's rows")
        assert "pending" in await statuses(connection, slow)
        await all_completed(connection, slow, 60, "the delayed host's rows")
    arrivals = sorted(polite_site.arrivals(A, "/page/"))
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(arrivals) == 6
    assert min(gaps) >= 0.5, gaps


async def test_a_429_with_retry_after_pauses_the_whole_site_for_every_worker(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    paused = await enqueue(connection, [polite_site.url(C, f"/limited/{n}") for n in range(4)])
    others = await enqueue(connection, [polite_site.url(D, f"/page/{n}") for n in range(20)])
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, paused + others, 90, "every row")
    record = polite_site.records[C]
    first_429 = min(record.limited_at.values())
    # Requests already under way when the 429 came back may arrive up to a few ms later; no
    # request was started after it until Retry-After had passed.
    later = [when for when in polite_site.arrivals(C) if when > first_429 + 0.2]
    assert later, "the paused host was never crawled again"
    assert min(later) - first_429 >= 3.0
    assert (await queue.site_states(connection, [C]))[C].pause_reason == "blocked"


async def test_a_killed_workers_slots_come_back_with_its_leases(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    ids = await enqueue(
        connection,
        [polite_site.url(D, f"/once-slow/{n}") for n in range(2)],
        maxConcurrentPerSite=2,
    )

    async def host_full() -> bool:
        # Both pages must have reached the site, not only been claimed: a request the worker had
        # not sent yet when it died would be the path's first on its retry and hang there too.
        state = (await queue.site_states(connection, [D])).get(D)
        claimed = state is not None and state.in_flight == 2
        return claimed and len(polite_site.arrivals(D, "/once-slow/")) == 2

    async with scrapeq_worker(
        database_url,
        tmp_path / "doomed.log",
        "--worker-id", "doomed", "--lease-seconds", "2",
        allow_networks=ALLOW_HOSTS,
        max_concurrent_per_site=None,
    ) as doomed:  # fmt: skip
        await eventually(host_full, within=30, what="the doomed worker holding both slots mid-page")
        os.killpg(doomed.pid, signal.SIGKILL)
        await doomed.wait()

    async with three_workers(database_url, tmp_path):
        await all_completed(connection, ids, 60, "the rows of the killed worker")
    states = await queue.site_states(connection, [D])
    assert states[D].in_flight == 0
    attempts = [
        attempt for job_id in ids for attempt in (await job_row(connection, job_id)).attempts
    ]
    assert any(attempt.reason == "lease_expired" for attempt in attempts)


# --- robots.txt ----------------------------------------------------------------------------------


async def test_three_worker_processes_read_a_sites_robots_txt_once(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    polite_site.robots[D] = Robots(200, "User-agent: *\nDisallow: /page/private\n")
    # Two slots per worker and slow pages: no one worker takes all the site's rows.
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="wide", patterns=(D,), max_concurrent_per_site=8)
    )
    allowed = await enqueue(
        connection, [polite_site.url(D, f"/page/{n}?ms=400") for n in range(24)]
    )
    [forbidden] = await enqueue(connection, [polite_site.url(D, "/page/private/1")])
    async with three_workers(database_url, tmp_path, "--concurrency", "2"):
        await all_completed(connection, allowed, 60, "the allowed rows")
        row = await job_row(connection, forbidden)
        assert (row.status, row.last_reason) == ("failed", "robots_disallowed")
    cursor = await connection.execute(
        "SELECT count(DISTINCT processed_by) FROM scraping_jobs WHERE id = ANY(%s)", (allowed,)
    )
    workers = await cursor.fetchone()
    assert workers is not None
    assert workers[0] >= 2
    assert polite_site.records[D].robots_fetches == 1


# The tests below run one in-process worker.


@pytest.fixture
def polite_settings(worker_settings: WorkerSettings) -> WorkerSettings:
    return dataclasses.replace(worker_settings, allow_networks=parse_networks(ALLOW_HOSTS))


async def test_robots_txt_is_read_once_and_disallowed_urls_fail(
    polite_site: PoliteSite, connection: Connection, polite_settings: WorkerSettings
) -> None:
    polite_site.robots[A] = Robots(200, "User-agent: *\nDisallow: /page/private\n")
    allowed = await enqueue(connection, [polite_site.url(A, f"/page/{n}") for n in range(10)])
    [forbidden] = await enqueue(connection, [polite_site.url(A, "/page/private/1")])

    await run_burst(polite_settings)

    assert set(await statuses(connection, allowed)) == {"completed"}
    row = await job_row(connection, forbidden)
    assert (row.status, row.last_reason) == ("failed", "robots_disallowed")
    assert polite_site.records[A].robots_fetches == 1
    assert polite_site.arrivals(A, "/page/private") == []


async def test_a_row_or_a_pool_can_turn_robots_txt_off(
    polite_site: PoliteSite, connection: Connection, polite_settings: WorkerSettings
) -> None:
    polite_site.robots[A] = Robots(200, "User-agent: *\nDisallow: /\n")
    [per_row] = await enqueue(connection, [polite_site.url(A, "/page/1")], respectRobotsTxt=False)
    await run_burst(polite_settings)
    [per_pool] = await enqueue(connection, [polite_site.url(A, "/page/2")])
    await run_burst(polite_settings, respect_robots_txt=False)

    assert await statuses(connection, [per_row, per_pool]) == ["completed", "completed"]


async def test_crawl_delay_becomes_the_sites_delay(
    polite_site: PoliteSite, connection: Connection, polite_settings: WorkerSettings
) -> None:
    polite_site.robots[B] = Robots(200, "User-agent: *\nCrawl-delay: 0.3\n")
    await enqueue(connection, [polite_site.url(B, "/page/first")])

    await run_burst(polite_settings)

    state = (await queue.site_states(connection, [B]))[B]
    assert state.crawl_delay_seconds == pytest.approx(0.3)
    # From now on the site takes one request at a time, whichever worker claims.
    await enqueue(connection, [polite_site.url(B, f"/page/{n}") for n in range(3)])
    claimed: list[queue.ClaimedJob] = []

    async def claimed_some() -> bool:
        claimed.extend(
            await queue.claim_jobs(
                connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
            )
        )
        return bool(claimed)

    await eventually(claimed_some, within=5, what="the delay after the first page to pass")
    assert len(claimed) == 1


@pytest.mark.parametrize(
    "robots", [Robots(503), Robots(200, "", stall_seconds=15)], ids=["5xx", "timeout"]
)
async def test_an_unreadable_robots_txt_holds_the_site_back_and_its_rows_retry(
    polite_site: PoliteSite, connection: Connection, polite_settings: WorkerSettings, robots: Robots
) -> None:
    polite_site.robots[C] = robots
    [job_id] = await enqueue(connection, [polite_site.url(C, "/page/1")])

    await run_burst(polite_settings)

    row = await job_row(connection, job_id)
    assert (row.status, row.last_reason) == ("pending", "robots_unavailable")
    assert polite_site.arrivals(C, "/page/") == []
