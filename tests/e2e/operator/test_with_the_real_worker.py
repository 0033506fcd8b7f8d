"""The whole path with the real worker: kubectl apply -> operator -> rows -> `scrapeq worker
--burst` scrapes a loopback site -> `kubectl get scrapejobs` shows Succeeded N/N (and Failed
with the worker's error for a page that answers 404).

Real kube-apiserver, PostgreSQL, operator process and worker process. The pages are static
(`render: false`), so no browser is involved; the worker is told to allow loopback addresses,
which its SSRF guard blocks otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import psycopg
import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    loopback_site,
    owner_progress,
    run_worker_until_idle,
    scrapejob,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

PAGES = {f"/product/{number}": f"Product {number}" for number in range(1, 4)}


def _page(path: str) -> bytes | None:
    title = PAGES.get(path)
    return None if title is None else f"<html><body><h1>{title}</h1></body></html>".encode()


@pytest.fixture
def site() -> Iterator[str]:
    """A static site on 127.0.0.1: three product pages; anything else is a 404."""
    with loopback_site(_page) as url:
        yield url


def _has_rows(database_url: str, uid: str, count: int) -> bool:
    return owner_progress(database_url, uid).total == count


def test_the_real_worker_completes_the_rows_and_kubectl_shows_the_outcome(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
) -> None:
    operator_factory(empty_database_url)
    products = scrapejob(
        "products",
        urls=[site + path for path in PAGES],
        render=False,
        extract={"title": {"selector": "h1"}},
    )
    missing = scrapejob("missing", url=site + "/gone", render=False, retries={"limit": 0})
    for manifest in (products, missing):
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
    uids = [
        kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
        for name in ("products", "missing")
    ]
    for uid, count in zip(uids, (len(PAGES), 1), strict=True):
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, count), within=30, what="rows"
        )

    worker = run_worker_until_idle(empty_database_url)
    assert worker.returncode == 0, worker.stderr[-3000:]

    def phases() -> dict[str, str]:
        listed = kubectl.run(
            "get",
            "scrapejobs",
            "-n",
            namespace,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{'\\n'}{end}",
        ).stdout
        return dict(line.split("=", 1) for line in listed.splitlines() if "=" in line)

    eventually_blocking(
        lambda: phases() == {"products": "Succeeded", "missing": "Failed"},
        within=30,
        what="products Succeeded and missing Failed",
    )
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows["products"][1:4] == ["Succeeded", f"{len(PAGES)}/{len(PAGES)}", "0"]
    assert rows["missing"][1:4] == ["Failed", "1/1", "1"]
    status = kubectl.get("scrapejob", "products", namespace)["status"]
    assert any("Product" in item["result"] for item in status["preview"])
    failed = kubectl.get("scrapejob", "missing", namespace)["status"]
    assert "404" in failed["lastError"]


LIST_PAGE = b"""<!doctype html><html><head><title>Laptops</title><base href="/shop/">
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "ItemList",
 "numberOfItems": 2}</script></head><body><ul>
<li class="product" data-sku="SKU-1"><h2> Laptop One </h2><span class="price">$1,299.00</span>
<a href="p/1">more</a></li>
<li class="product" data-sku="SKU-2"><h2>Laptop Two</h2><a href="p/2">more</a></li>
</ul></body></html>"""


def test_a_scrapejob_with_items_transforms_and_structured_data_gets_them_in_its_rows(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """The spec's items, transforms and structuredData reach the row's payload through the
    operator as the CRD defaulted them, and the worker's result holds what they ask for."""
    operator_factory(empty_database_url)
    with loopback_site(lambda path: LIST_PAGE if path == "/list" else None) as url:
        manifest = scrapejob(
            "items",
            url=url + "/list",
            render=False,
            structuredData=["json-ld"],
            items={
                "selector": "li.product",
                "fields": {
                    "name": {"selector": "h2"},
                    "price": {"selector": ".price", "transforms": [{"type": "price"}]},
                    "link": {
                        "selector": "a",
                        "attribute": "href",
                        "transforms": [{"type": "absoluteUrl"}],
                    },
                    "sku": {
                        "attribute": "data-sku",
                        "transforms": [{"type": "number"}, {"type": "default", "value": 0}],
                    },
                },
            },
        )
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
        uid = kubectl.get("scrapejob", "items", namespace)["metadata"]["uid"]
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, 1), within=30, what="the row"
        )
        worker = run_worker_until_idle(empty_database_url)
        assert worker.returncode == 0, worker.stderr[-3000:]

    with psycopg.connect(empty_database_url) as conn:
        status, result = conn.execute(
            "SELECT status, result FROM scraping_jobs WHERE owner_uid = %s", (uid,)
        ).fetchone() or (None, None)
    assert status == "completed", result
    assert result["items"] == [
        {
            "name": "Laptop One",
            "price": {"amount": 1299.0, "currency": "USD"},
            "link": url + "/shop/p/1",
            "sku": 1,
        },
        {"name": "Laptop Two", "price": None, "link": url + "/shop/p/2", "sku": 2},
    ]
    assert result["structured_data"]["json-ld"][0]["numberOfItems"] == 2


def _listing_page(path: str) -> bytes | None:
    """A listing of four pages (/list/1 .. /list/4), each with one product (/item/N)."""
    kind, _, number = path.strip("/").partition("/")
    if not number.isdigit() or not 1 <= int(number) <= 4:
        return None
    if kind == "list":
        more = f'<a class="next" href="/list/{int(number) + 1}">next</a>' if number != "4" else ""
        return (
            f'<html><body><h1>Page {number}</h1><a class="product" href="/item/{number}">'
            f"item</a>{more}</body></html>"
        ).encode()
    if kind == "item":
        return f'<html><body><h1 class="name">Item {number}</h1></body></html>'.encode()
    return None


def test_a_scrapejob_with_next_and_routes_scrapes_its_chain_and_each_label_with_its_route(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """spec.next and spec.routes reach the rows' payload through the operator as the CRD
    defaulted them: the chain stops at its maxPages, the followed pages get their route."""
    operator_factory(empty_database_url)
    with loopback_site(_listing_page) as url:
        manifest = scrapejob(
            "routes",
            url=url + "/list/1",
            render=False,
            extract={"heading": {"selector": "h1"}},
            next={"selector": "a.next", "maxPages": 3},
            follow={"selector": "a.product", "label": "detail"},
            routes={"detail": {"extract": {"name": {"selector": "h1.name"}}}},
        )
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
        uid = kubectl.get("scrapejob", "routes", namespace)["metadata"]["uid"]
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, 1), within=30, what="the row"
        )
        worker = run_worker_until_idle(empty_database_url)
        assert worker.returncode == 0, worker.stderr[-3000:]

    with psycopg.connect(empty_database_url) as conn:
        rows = conn.execute(
            "SELECT url_to_scrape, depth, status::text, result FROM scraping_jobs"
            " WHERE owner_uid = %s ORDER BY url_to_scrape",
            (uid,),
        ).fetchall()
    found = {url_to_scrape.removeprefix(url): row for url_to_scrape, *row in rows}
    assert set(found) == {"/list/1", "/list/2", "/list/3", "/item/1", "/item/2", "/item/3"}
    for number in (1, 2, 3):
        depth, status, result = found[f"/list/{number}"]
        assert (depth, status) == (0, "completed")
        assert result["fields"] == {"heading": f"Page {number}"}
        assert result["pagination"]["page"] == number
        depth, status, result = found[f"/item/{number}"]
        assert (depth, status, result["route"]) == (1, "completed", "detail")
        assert result["fields"] == {"name": f"Item {number}"}
    assert found["/list/3"][2]["pagination"]["end"] == "max_pages"
