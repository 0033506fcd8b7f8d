"""Pagination on the test site's listing (listing_site.py), in real Chromium and the static
engine against real PostgreSQL: a payload's `next` chain (docs/scrapejob.md, "Pagination")."""

from __future__ import annotations

from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, run_burst
from .listing_site import detail_name, expected_items, listing_name, register_listing
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

ITEMS = {"selector": "li.product", "fields": {"name": ".name", "price": ".price"}}
OWNER = queue.Owner(uid="uid-listing", namespace="shop", name="listing")


async def rows(connection: Connection) -> list[tuple[str, int, str, Any]]:
    cursor = await connection.execute(
        "SELECT url_to_scrape, depth, status::text, result FROM scraping_jobs ORDER BY id"
    )
    return [
        (str(url), int(depth), str(status), result)
        for url, depth, status, result in await cursor.fetchall()
    ]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("render", [True, False], ids=["chromium", "static"])
async def test_a_thirty_page_next_chain_is_scraped_once_per_page_with_every_item(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    register_listing(site, 30)
    payload = {"render": render, "items": ITEMS, "next": {"selector": "a.next"}}
    await queue.enqueue(connection, site.url("/page/list-1"), payload=payload, owner=OWNER)

    await run_burst(worker_settings, concurrency=4)

    found = await rows(connection)
    assert [url for url, *_ in found] == [
        site.url(f"/page/{listing_name(page)}") for page in range(1, 31)
    ]
    for page, (_, depth, status, result) in enumerate(found, start=1):
        assert (depth, status) == (0, "completed"), result
        assert result["items"] == expected_items(page)
        assert result["engine"] == ("browser" if render else "http")
        if page < 30:
            next_url = site.url(f"/page/{listing_name(page + 1)}")
            assert result["pagination"] == {"page": page, "next": next_url}
        else:
            assert result["pagination"] == {"page": 30, "next": None, "end": "last_page"}
    for page in range(1, 31):
        assert site.hits[f"/page/{listing_name(page)}"] == 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("render", [True, False], ids=["chromium", "static"])
async def test_a_chain_longer_than_its_max_pages_ends_at_the_cap_and_says_so(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    register_listing(site, 30)
    # A classic row (no owner): the chain's position travels in the payload all the same.
    payload = {"render": render, "items": ITEMS, "next": {"selector": "a.next", "maxPages": 7}}
    await queue.enqueue(connection, site.url("/page/list-1"), payload=payload)

    await run_burst(worker_settings, concurrency=4)

    found = await rows(connection)
    assert len(found) == 7
    assert [result["items"] for *_, result in found] == [
        expected_items(page) for page in range(1, 8)
    ]
    assert found[-1][3]["pagination"] == {
        "page": 7,
        "next": None,
        "end": "max_pages",
        "max_pages": 7,
        "dropped": site.url(f"/page/{listing_name(8)}"),
    }
    assert site.hits[f"/page/{listing_name(8)}"] == 0


@pytest.mark.timeout(240)
async def test_chain_pages_are_not_followed_pages_their_products_are(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    register_listing(site, 10)
    payload = {
        "render": False,
        "items": ITEMS,
        "next": {"selector": "a.next"},
        # maxDepth 1 and 10 pages: the chain goes past both, the products stop at 10.
        "follow": {
            "selector": "a.product",
            "maxDepth": 1,
            "maxPages": 10,
            "extract": {"name": "h1.name"},
        },
    }
    await queue.enqueue(connection, site.url("/page/list-1"), payload=payload, owner=OWNER)

    await run_burst(worker_settings, concurrency=4)

    found = await rows(connection)
    listings = [(url, depth) for url, depth, _, result in found if "pagination" in result]
    assert listings == [(site.url(f"/page/{listing_name(page)}"), 0) for page in range(1, 11)]
    details = [(url, depth, result) for url, depth, _, result in found if depth == 1]
    assert len(details) == 10
    assert all(status == "completed" for _, _, status, _ in found)
    for url, _, result in details:
        name = url.rsplit("/", 1)[1]
        _, page, item = name.split("-")
        assert name == detail_name(int(page), int(item))
        assert result["fields"] == {"name": f"Product {page}.{item}"}
        # A product page starts no chain: its row carries no `next`.
        assert "pagination" not in result
    cursor = await connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE depth = 1 AND payload ? 'next'"
    )
    assert await cursor.fetchone() == (0,)
