"""Adaptive concurrency with a real `scrapeq worker` process and PostgreSQL (docs/queue.md,
"Adaptive concurrency"): under a site policy that lets the limit adapt up to 8, a site whose
pages slow down with the requests in flight (the cube of them) is held well below 8 by its own
latency, while a site that answers as fast at any load grows to the policy's 8 within the
same number of pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import scrapeq_queue as queue

from tests.waiting import eventually

from .conftest import Connection
from .polite_site import ALLOW_HOSTS, PoliteSite, running_polite_site
from .test_priorities_and_pools import CONCURRENCY, scrapeq_worker

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

CEILING = 8
PAGES = 80
FAST_SITE = "127.0.0.2"
CROWDED_SITE = "127.0.0.3"


@pytest.fixture
def polite_site() -> Iterator[PoliteSite]:
    yield from running_polite_site()


async def crawl(
    connection: Connection, database_url: str, log: Path, site: str, urls: list[str]
) -> queue.SiteState:
    """Every url crawled by one worker under an adaptive policy for `site`; the site's state
    afterwards."""
    await queue.apply_site_policy(
        connection,
        queue.SitePolicy(
            name=f"adaptive-{site}",
            patterns=(site,),
            max_concurrent_per_site=CEILING,
            adaptive_concurrency=True,
        ),
    )
    ids = [
        job_id
        for url in urls
        for job_id in await queue.enqueue_many(connection, [url], payload={"render": False})
    ]

    async def statuses() -> dict[str, int]:
        cursor = await connection.execute(
            "SELECT status::text, count(*) FROM scraping_jobs WHERE id = ANY(%s) GROUP BY 1",
            (ids,),
        )
        return {status: count for status, count in await cursor.fetchall()}

    async with scrapeq_worker(
        database_url, log, "--worker-id", f"adaptive-{site}", allow_networks=ALLOW_HOSTS
    ):
        finished = await eventually(
            statuses,
            until=lambda counts: counts.get("completed", 0) + counts.get("failed", 0) == len(ids),
            within=120,
            what=f"{site}'s pages",
        )
    assert finished == {"completed": len(ids)}
    return (await queue.site_states(connection, [site]))[site]


async def test_a_site_slowing_under_load_is_held_below_the_limit_a_fast_site_grows_to(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    assert CONCURRENCY >= CEILING  # the worker's slots never bind before the site's limit
    fast = await crawl(
        connection,
        database_url,
        tmp_path / "fast.log",
        FAST_SITE,
        [polite_site.url(FAST_SITE, f"/page/{n}?ms=100") for n in range(PAGES)],
    )
    assert polite_site.records[FAST_SITE].max_in_flight == CEILING
    assert (fast.adaptive_limit, fast.max_in_flight) == (float(CEILING), CEILING)

    # 10 ms times the cube of the requests in flight: 80 ms at 2, 640 ms at 4, 5 s at 8.
    crowded = await crawl(
        connection,
        database_url,
        tmp_path / "crowded.log",
        CROWDED_SITE,
        [polite_site.url(CROWDED_SITE, f"/crowded/{n}?ms=10") for n in range(PAGES)],
    )
    assert polite_site.records[CROWDED_SITE].max_in_flight <= CEILING - 2, crowded
    assert crowded.adaptive_limit is not None, crowded
    assert crowded.adaptive_limit < CEILING - 2, crowded
