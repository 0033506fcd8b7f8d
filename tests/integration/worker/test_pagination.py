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
    # `waitUntil: load`, a ScrapeJob's default (without it each rendered page of the chain
    # would wait for 500 ms without a request, the classic rows' wait).
    payload = {
        "render": render,
        "waitUntil": "load",
        "items": ITEMS,
        "next": {"selector": "a.next"},
    }
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
    payload = {
        "render": render,
        "waitUntil": "load",
        "items": ITEMS,
        "next": {"selector": "a.next", "maxPages": 7},
    }
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


# A listing whose "next" is a button run by a script: clicking it shows the next page's items in
# place after a moment (as a page that fetches them would); on the last page the button is
# disabled, or, with __LAST__ = "remove", gone.
BUTTON_LISTING = """<!doctype html><html><head><title>Button listing</title></head><body>
<ul id="list"></ul><button class="next" type="button">Next</button>
<script>
  var pages = __PAGES__, page = 1, perPage = 5;
  function show() {
    var list = document.getElementById('list');
    list.innerHTML = '';
    for (var n = (page - 1) * perPage + 1; n <= page * perPage; n++) {
      var li = document.createElement('li');
      li.className = 'product';
      li.innerHTML = '<span class="name">Product ' + n + '</span>';
      list.appendChild(li);
    }
    var button = document.querySelector('button.next');
    if (page >= pages) {
      if ('__LAST__' === 'remove') button.remove(); else button.disabled = true;
    }
  }
  show();
  document.querySelector('button.next').addEventListener('click', function () {
    if ('__LAST__' === 'inert') return;
    setTimeout(function () { page += 1; show(); }, 100);
  });
</script></body></html>"""


def button_listing(pages: int, last: str = "disable") -> str:
    return BUTTON_LISTING.replace("__PAGES__", str(pages)).replace("__LAST__", last)


def products(first: int, last: int) -> list[dict[str, str]]:
    return [{"name": f"Product {n}"} for n in range(first, last + 1)]


@pytest.mark.timeout(120)
async def test_a_next_button_run_by_a_script_is_clicked_through_within_one_row(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["buttons-disabled"] = button_listing(6)
    site.pages["buttons-removed"] = button_listing(4, "remove")
    site.pages["buttons-capped"] = button_listing(6)
    site.pages["buttons-inert"] = button_listing(6, "inert")
    items = {"selector": "li.product", "fields": {"name": ".name"}}
    cases = {
        "buttons-disabled": {"selector": "button.next", "click": True},
        "buttons-removed": {"selector": "button.next", "click": True},
        "buttons-capped": {"selector": "button.next", "click": True, "maxPages": 3},
        "buttons-inert": {"selector": "button.next", "click": True, "settleSeconds": 0.5},
    }
    for name, next_spec in cases.items():
        payload = {"render": True, "items": items, "next": next_spec, "timeoutSeconds": 30}
        await queue.enqueue(connection, site.url(f"/page/{name}"), payload=payload, owner=OWNER)

    await run_burst(worker_settings)

    found = {url: (status, result) for url, _, status, result in await rows(connection)}
    # One row per listing: the pages a button shows are read within it, none is queued.
    assert len(found) == 4
    expected = {
        "buttons-disabled": (products(1, 30), {"click": True, "pages": 6, "end": "last_page"}),
        "buttons-removed": (products(1, 20), {"click": True, "pages": 4, "end": "last_page"}),
        "buttons-capped": (products(1, 15), {"click": True, "pages": 3, "end": "max_pages"}),
        "buttons-inert": (products(1, 5), {"click": True, "pages": 1, "end": "unchanged"}),
    }
    for name, (want_items, want_pagination) in expected.items():
        status, result = found[site.url(f"/page/{name}")]
        assert status == "completed", result
        assert result["items"] == want_items, name
        assert result["pagination"] == want_pagination, name
        assert site.hits[f"/page/{name}"] == 1


@pytest.mark.timeout(120)
async def test_a_next_button_that_loads_another_document_is_read_there(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    for page in (1, 2, 3):
        button = (
            f"<button class=next onclick=\"location.href='/page/nav-{page + 1}'\">Next</button>"
            if page < 3
            else ""
        )
        site.pages[f"nav-{page}"] = (
            f"<!doctype html><title>Page {page}</title><ul>"
            + "".join(f'<li class="product">Item {page}.{n}</li>' for n in (1, 2))
            + f"</ul>{button}"
        )
    payload = {
        "render": True,
        "items": {"selector": "li.product", "fields": {"name": ""}},
        "next": {"selector": "button.next", "click": True},
    }
    await queue.enqueue(connection, site.url("/page/nav-1"), payload=payload, owner=OWNER)

    await run_burst(worker_settings)

    ((_, _, status, result),) = await rows(connection)
    assert status == "completed", result
    assert [item["name"] for item in result["items"]] == [
        f"Item {page}.{n}" for page in (1, 2, 3) for n in (1, 2)
    ]
    assert result["pagination"] == {"click": True, "pages": 3, "end": "last_page"}
