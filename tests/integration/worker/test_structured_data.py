"""Structured data (JSON-LD, microdata, Open Graph) of real pages in both engines: the static
engine reads the fetched HTML, the browser engine the rendered document, each parsed in an
extraction process (docs/worker.md, "Jobs: options and results")."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Connection, job_row, run_burst
from .site import HostileSite
from .test_page_semantics import insert_classic_row

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(90)]

PRODUCT = """<!doctype html><html><head><title>Laptop One</title>
<meta property="og:title" content="Laptop One"><meta property="og:type" content="product">
<meta property="og:image" content="https://cdn.example/laptop.png">
<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Product", "name": "Laptop One", "sku": "a1",
 "offers": {"@type": "Offer", "price": "1299.00", "priceCurrency": "USD"}}
</script></head><body>
<div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Laptop One</span>
<span itemprop="brand">Acme</span><a itemprop="url" href="/p/1">details</a></div>
</body></html>"""

# The product data exists only once the page's script has run.
SCRIPTED = """<!doctype html><html><head><title>Scripted</title></head><body><script>
const data = document.createElement('script');
data.type = 'application/ld+json';
data.textContent = JSON.stringify({"@context": "https://schema.org", "@type": "Product",
                                   "name": "Made by script"});
document.head.appendChild(data);
</script></body></html>"""

BROKEN = PRODUCT.replace('"sku": "a1",', '"sku": "a1",,}{')


def both_engines(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {**payload, "render": True, "waitUntil": "load"}, {**payload, "render": False}


async def test_a_product_page_gives_the_same_structured_data_in_both_engines(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["product"] = PRODUCT
    site.pages["broken"] = BROKEN
    rows: list[tuple[int, int]] = []
    for name, option in (("product", True), ("broken", ["json-ld", "opengraph"])):
        rendered, static = both_engines({"structuredData": option, "extract": {"h": "h1"}})
        url = site.url(f"/page/{name}")
        rows.append(
            (
                await insert_classic_row(connection, url, rendered),
                await insert_classic_row(connection, url + "?static", static),
            )
        )
    not_asked = await insert_classic_row(connection, site.url("/page/product?plain"), {})

    await run_burst(worker_settings)

    results = []
    for browser_id, http_id in rows:
        browser = await job_row(connection, browser_id)
        http = await job_row(connection, http_id)
        assert browser.status == "completed", browser.last_error
        assert http.status == "completed", http.last_error
        assert http.result["structured_data"] == browser.result["structured_data"]
        assert http.result.get("structured_data_errors") == browser.result.get(
            "structured_data_errors"
        )
        results.append(browser.result)
    data = results[0]["structured_data"]
    assert set(data) == {"json-ld", "microdata", "opengraph"}
    (product,) = data["json-ld"]
    assert product["@type"] == "Product"
    assert product["offers"]["price"] == "1299.00"
    (micro,) = data["microdata"]
    assert (micro["name"], micro["brand"]) == ("Laptop One", "Acme")
    assert micro["url"] == site.url("/p/1")
    (graph,) = data["opengraph"]
    assert graph["og:image"] == "https://cdn.example/laptop.png"
    assert "structured_data_errors" not in results[0]
    broken = results[1]
    assert broken["structured_data"]["json-ld"] == []
    assert broken["structured_data"]["opengraph"][0]["og:title"] == "Laptop One"
    assert set(broken["structured_data_errors"]) == {"json-ld"}
    plain = await job_row(connection, not_asked)
    assert plain.status == "completed", plain.last_error
    assert "structured_data" not in plain.result


async def test_a_rendered_page_gives_the_structured_data_its_scripts_made(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["scripted"] = SCRIPTED
    rendered, static = both_engines({"structuredData": ["json-ld"]})
    browser_id = await insert_classic_row(connection, site.url("/page/scripted"), rendered)
    http_id = await insert_classic_row(connection, site.url("/page/scripted?static"), static)

    await run_burst(worker_settings)

    browser = await job_row(connection, browser_id)
    http = await job_row(connection, http_id)
    assert browser.status == "completed", browser.last_error
    assert http.status == "completed", http.last_error
    assert browser.result["structured_data"] == {
        "json-ld": [
            {"@context": "https://schema.org", "@type": "Product", "name": "Made by script"}
        ]
    }
    assert http.result["structured_data"] == {"json-ld": []}


async def test_a_rendered_document_larger_than_a_page_may_be_is_not_parsed_and_is_named(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    # A few hundred bytes of script make 60,000 characters of document: the page's download
    # stays far under the limit, its rendered HTML does not.
    site.pages["grown"] = (
        "<!doctype html><html><head><title>Grown</title></head><body><script>"
        "document.body.appendChild(document.createElement('p')).textContent ="
        " 'x'.repeat(60000);</script></body></html>"
    )
    site.pages["small"] = PRODUCT
    rendered, _ = both_engines({"structuredData": ["json-ld"]})
    grown_id = await insert_classic_row(connection, site.url("/page/grown"), rendered)
    small_id = await insert_classic_row(connection, site.url("/page/small"), rendered)

    await run_burst(worker_settings, max_response_bytes=20_000)

    grown = await job_row(connection, grown_id)
    assert grown.status == "completed", grown.last_error
    assert "structured_data" not in grown.result
    assert grown.result["truncated"] == ["structured_data"]
    small = await job_row(connection, small_id)
    assert small.status == "completed", small.last_error
    assert small.result["structured_data"]["json-ld"][0]["name"] == "Laptop One"
