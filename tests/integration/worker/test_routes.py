"""Labelled routes on the test site's listing (listing_site.py), in real Chromium and the
static engine against real PostgreSQL: list -> detail -> reviews, each label with its own
options (docs/scrapejob.md, "Routes")."""

from __future__ import annotations

from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, run_burst
from .listing_site import (
    ITEMS_PER_PAGE,
    detail_name,
    expected_items,
    expected_reviews,
    listing_name,
    register_listing,
    reviews_name,
)
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

OWNER = queue.Owner(uid="uid-routes", namespace="shop", name="routes")


def crawl(render: bool, *, reviews_depth: int = 2, max_pages: int = 1000) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "extract": {"name": "h1.name", "description": ".description"},
        "follow": {"selector": "a.reviews", "label": "reviews", "maxDepth": reviews_depth},
    }
    if render:
        # The detail route's own steps: its pages show their specs on a click.
        detail["steps"] = [{"action": "click", "selector": "button.specs", "waitFor": "p.specs"}]
        detail["extract"] = {**detail["extract"], "specs": "p.specs"}
    return {
        "render": render,
        "items": {"selector": "li.product", "fields": {"name": ".name", "price": ".price"}},
        "next": {"selector": "a.next", "maxPages": 2},
        "follow": {"selector": "a.product", "label": "detail", "maxPages": max_pages},
        "routes": {
            "detail": detail,
            "reviews": {
                "items": {"selector": "li.review", "fields": {"author": ".author", "text": ".text"}}
            },
        },
    }


async def pages(connection: Connection) -> dict[str, tuple[int, str, Any]]:
    cursor = await connection.execute(
        "SELECT url_to_scrape, depth, status::text, result FROM scraping_jobs"
    )
    return {
        str(url).rsplit("/", 1)[1]: (int(depth), str(status), result)
        for url, depth, status, result in await cursor.fetchall()
    }


@pytest.mark.timeout(240)
@pytest.mark.parametrize("render", [True, False], ids=["chromium", "static"])
async def test_a_list_detail_reviews_crawl_scrapes_each_label_with_its_own_route(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    register_listing(site, 3)
    await queue.enqueue(connection, site.url("/page/list-1"), payload=crawl(render), owner=OWNER)

    await run_burst(worker_settings, concurrency=4)

    found = await pages(connection)
    products = [(page, item) for page in (1, 2) for item in range(1, ITEMS_PER_PAGE + 1)]
    assert set(found) == {
        listing_name(1),
        listing_name(2),
        *(detail_name(page, item) for page, item in products),
        *(reviews_name(page, item) for page, item in products),
    }
    assert all(status == "completed" for _, status, _ in found.values())
    for page in (1, 2):
        depth, _, result = found[listing_name(page)]
        assert (depth, result["items"]) == (0, expected_items(page))
        assert "route" not in result
    for page, item in products:
        depth, _, result = found[detail_name(page, item)]
        assert depth == 1
        assert result["route"] == "detail"
        assert result["fields"] == {
            "name": f"Product {page}.{item}",
            "description": f"About product {page}.{item}",
            **({"specs": f"Specs of {page}.{item}"} if render else {}),
        }
        assert "items" not in result
        assert "pagination" not in result
        assert len(result.get("steps", [])) == (1 if render else 0)
        depth, _, result = found[reviews_name(page, item)]
        assert depth == 2
        assert result["route"] == "reviews"
        assert result["items"] == expected_reviews(page, item)
        assert result["fields"] == {}
    assert site.hits[f"/page/{listing_name(3)}"] == 0
    for name in found:
        assert site.hits[f"/page/{name}"] == 1


@pytest.mark.timeout(240)
async def test_a_route_follows_no_deeper_than_its_max_depth(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    register_listing(site, 3)
    await queue.enqueue(
        connection,
        site.url("/page/list-1"),
        payload=crawl(False, reviews_depth=1),
        owner=OWNER,
    )

    await run_burst(worker_settings, concurrency=4)

    found = await pages(connection)
    assert sorted(depth for depth, _, _ in found.values()) == [0, 0] + [1] * 6
    assert not any(name.startswith("reviews-") for name in found)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("owned", [True, False], ids=["scrapejob", "classic"])
async def test_the_follow_max_pages_caps_the_routed_pages_of_the_whole_crawl(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, owned: bool
) -> None:
    register_listing(site, 3)
    await queue.enqueue(
        connection,
        site.url("/page/list-1"),
        payload=crawl(False, max_pages=8),
        owner=OWNER if owned else None,
    )

    await run_burst(worker_settings, concurrency=4)

    found = await pages(connection)
    listings = [name for name, (depth, _, _) in found.items() if depth == 0]
    assert sorted(listings) == [listing_name(1), listing_name(2)]
    followed = [name for name, (depth, _, _) in found.items() if depth > 0]
    # A ScrapeJob's crawl counts its followed pages as a whole; a classic row's budget
    # travels with each chain page (docs/queue.md, "next").
    assert len(followed) == (8 if owned else 12)
