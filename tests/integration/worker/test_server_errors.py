"""Server errors slow a site in proportion, proved with a real `scrapeq worker` process and
PostgreSQL: on one site where half of the rows answer 500 (half of those recover on their
third try), the healthy and the recovering rows complete within a minute and the dead ones fail
after all their attempts, with no stall of minutes between them (docs/queue.md, "Server
errors")."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import scrapeq_queue as queue

from tests.waiting import eventually

from .conftest import Connection
from .polite_site import ALLOW_HOSTS, PoliteSite, running_polite_site
from .test_priorities_and_pools import scrapeq_worker

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

SITE = "127.0.0.4"
# The bounds this test states (docs/queue.md, "Server errors"): from the worker's start, the
# healthy and the recovering rows complete within HEALTHY_WITHIN seconds and the dead ones have
# failed within DEAD_WITHIN. A dead row's own backoff (1 s, 2 s, 4 s) is about 7 s of it.
HEALTHY_WITHIN = 60.0
DEAD_WITHIN = 90.0


@pytest.fixture
def polite_site() -> Iterator[PoliteSite]:
    yield from running_polite_site()


async def test_half_the_rows_of_a_site_answering_500_stall_neither_the_healthy_rows_nor_the_dead(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    healthy: list[str] = []
    dead: list[str] = []
    recovering: list[str] = []
    # Interleaved, so that the site's responses fail at the rate of the whole job.
    for n in range(10):
        healthy.append(polite_site.url(SITE, f"/page/a{n}"))
        dead.append(polite_site.url(SITE, f"/dead/{n}"))
        healthy.append(polite_site.url(SITE, f"/page/b{n}"))
        recovering.append(polite_site.url(SITE, f"/recovering/{n}"))
    ids: dict[str, int] = {}
    for url in [url for quad in zip(healthy[0::2], dead, healthy[1::2], recovering, strict=True)
                for url in quad]:  # fmt: skip
        [ids[url]] = await queue.enqueue_many(
            connection, [url], payload={"render": False}, max_retries=3, backoff_seconds=1.0
        )
    log = tmp_path / "worker.log"
    async with scrapeq_worker(
        database_url, log, "--worker-id", "server-errors", allow_networks=ALLOW_HOSTS,
        max_concurrent_per_site=None,  # the pool's default: 2 per site
    ):  # fmt: skip
        started = time.monotonic()

        async def progress(urls: list[str]) -> Counter[str]:
            """How many of these rows are in each status, and how the site's breaker stands: what
            a timeout reports."""
            cursor = await connection.execute(
                "SELECT status::text, count(*) FROM scraping_jobs WHERE id = ANY(%s) GROUP BY 1",
                ([ids[url] for url in urls],),
            )
            counts = Counter({status: count for status, count in await cursor.fetchall()})
            site = (await queue.site_states(connection, [SITE]))[SITE]
            counts[f"breaker_trips={site.breaker_trips}"] = 1
            return counts

        def all_in(status: str, count: int) -> Callable[[Counter[str]], bool]:
            return lambda counts: counts[status] == count

        await eventually(
            lambda: progress(healthy + recovering),
            until=all_in("completed", len(healthy + recovering)),
            within=HEALTHY_WITHIN,
            what="the healthy and recovering rows to complete",
            every=0.2,
        )
        healthy_seconds = time.monotonic() - started
        await eventually(
            lambda: progress(dead),
            until=all_in("failed", len(dead)),
            within=DEAD_WITHIN - healthy_seconds,
            what="the dead rows to fail",
            every=0.2,
        )

    tries = Counter(path for _, path in polite_site.records[SITE].arrivals)
    assert {tries[f"/dead/{n}"] for n in range(10)} == {4}  # every attempt was made
    assert {tries[f"/recovering/{n}"] for n in range(10)} == {3}
    for url in dead:
        attempts = await queue.job_attempts(connection, ids[url])
        assert [attempt.reason for attempt in attempts] == ["http_5xx"] * 4
    assert polite_site.records[SITE].max_in_flight <= 2
