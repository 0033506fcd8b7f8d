"""Structured data through extruct, one syntax at a time (the integration tests read it from
real pages in both engines)."""

from __future__ import annotations

import pytest
from scrapeq_worker.structured_data import STRUCTURED_DATA_SYNTAXES, read_structured_data

pytestmark = pytest.mark.timeout(30)

PRODUCT = """<!doctype html><html><head><title>Laptop</title>
<meta property="og:title" content="Laptop One"><meta property="og:type" content="product">
<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Product", "name": "Laptop One", "sku": "a1",
 "offers": {"@type": "Offer", "price": "1299.00", "priceCurrency": "USD"}}
</script></head><body>
<div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Laptop One</span>
<a itemprop="url" href="/p/1">details</a></div></body></html>"""


def test_every_syntax_is_read_from_a_product_page() -> None:
    found = read_structured_data(PRODUCT, "https://shop.example/list", STRUCTURED_DATA_SYNTAXES)
    assert found.errors == {}
    (product,) = found.items["json-ld"]
    assert product["name"] == "Laptop One"
    assert product["offers"] == {"@type": "Offer", "price": "1299.00", "priceCurrency": "USD"}
    (micro,) = found.items["microdata"]
    assert micro["@type"] == "Product"
    assert micro["name"] == "Laptop One"
    assert micro["url"] == "https://shop.example/p/1"
    (graph,) = found.items["opengraph"]
    assert graph["og:title"] == "Laptop One"
    assert graph["@type"] == "product"  # extruct's uniform shape names og:type @type


def test_only_the_syntaxes_asked_for_are_read() -> None:
    found = read_structured_data(PRODUCT, "https://shop.example/", ["opengraph"])
    assert list(found.items) == ["opengraph"]


def test_a_broken_syntax_is_empty_and_named_while_the_others_are_read() -> None:
    page = PRODUCT.replace('"sku": "a1",', '"sku": "a1",,,}{')
    found = read_structured_data(page, "https://shop.example/", STRUCTURED_DATA_SYNTAXES)
    assert found.items["json-ld"] == []
    assert set(found.errors) == {"json-ld"}
    assert len(found.errors["json-ld"]) <= 200
    assert found.items["opengraph"][0]["og:title"] == "Laptop One"


@pytest.mark.parametrize("html", ["", "   ", "<html></html>", "\x00\ud800 not html"])
def test_a_page_without_structured_data_gives_empty_lists(html: str) -> None:
    found = read_structured_data(html, "https://shop.example/", STRUCTURED_DATA_SYNTAXES)
    assert found.items == {"json-ld": [], "microdata": [], "opengraph": []}
