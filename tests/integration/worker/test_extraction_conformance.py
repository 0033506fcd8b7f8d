"""One extract spec means the same in both engines: the same specs against the same pages,
rendered by real Chromium through the worker's renderer and fetched by the plain-HTTP engine
(lexbor), must give identical results (docs/worker.md, "Jobs: options and results")."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Connection, job_row, run_burst
from .site import HostileSite
from .test_page_semantics import insert_classic_row

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

# No script on these pages changes the document: whatever differs is the engines' doing.
CATALOGUE = """<!doctype html>
<html><head><title>
   Caf&eacute; &amp;\tshop\u00a0 </title><base href="/shop/"></head>
<body>
<div id="main" class="listing wide">
  <h1>Laptops <small>(3)</small></h1>
  <ul class="items">
    <li class="item" data-sku="a1" lang="en-GB">One<li class="item sale" data-sku="b2">Two
    <li class="item" data-sku="c3" title="Third &lt;best&gt;">Three
    <li class="item last" data-sku="D4">Four &amp; more
  </ul>
  <table class="specs"><tr><td>CPU</td><td>8 cores</td></tr><tr><td>RAM</td><td>16 GB</td></tr>
  </table>
  <p class="ws">  lots\u3000of\n\n\t whitespace&nbsp;&nbsp;here\ufeff </p>
  <p class="mixed">before<script>var ignored = 1;</script><!-- comment -->after<template>
    <b>template content</b></template></p>
  <label><input type="checkbox" name="agree" checked> Agree</label>
  <section><h2>Nested</h2><div><div><span class="deep">deep one</span></div></div>
    <span class="deep">deep two</span></section>
  <a class="product" href="p/1#reviews">first</a> <a class="product" href="../p/2?x=1&amp;y=2">2</a>
  <a class="product" href="p/1">again</a><a href="mailto:sales@example.com">mail</a>
  <a href="https://other.example/x">other</a><a href=" p/spaced ">spaced</a><a>no href</a>
  <svg><a href="/svg-link">svg</a></svg>
  <noscript><b>enable scripts</b></noscript>
</div>
</body></html>"""

CATALOGUE_FIELDS: dict[str, Any] = {
    "heading": "h1",
    "second": "ul.items > li:nth-child(2)",
    "odd": {"selector": "li.item:nth-child(odd)", "all": True},
    "last_of_type": "li:last-of-type",
    "next_to_first": {"selector": "li:first-child + li", "attribute": "data-sku"},
    "after_sale": {"selector": "li.sale ~ li", "all": True},
    "not_sale": {"selector": "li.item:not(.sale)", "all": True},
    "sku_exact": "li[data-sku=c3]",
    "sku_prefix": {"selector": '[data-sku^="b"]', "attribute": "data-sku"},
    "sku_suffix": "[data-sku$='3']",
    "sku_contains": {"selector": '[data-sku*="4"]', "attribute": "data-sku"},
    "sku_case": {"selector": "[data-sku=d4 i]", "attribute": "data-sku"},
    "class_word": {"selector": "[class~=last]", "attribute": "class"},
    "lang": {"selector": "[lang|=en]", "attribute": "lang"},
    "entity_attribute": {"selector": "li[title]", "attribute": "title"},
    "entity_text": "li.last",
    "implied_tbody": {"selector": "table.specs > tbody > tr > td:nth-child(2)", "all": True},
    "no_tbody_child": {"selector": "table.specs > tr", "all": True},
    "whitespace": "p.ws",
    "script_and_template": "p.mixed",
    "template_bold": "p.mixed b",
    "boolean_attribute": {"selector": "input[name=agree]", "attribute": "checked"},
    "missing_attribute": {"selector": "input[name=agree]", "attribute": "disabled"},
    "label": "label",
    "nested": {"selector": "section div span.deep", "all": True},
    "direct": {"selector": "section > span.deep", "all": True},
    "has": "section:has(> h2) h2",
    "is_group": {"selector": ":is(h1, h2) small, h2", "all": True},
    "group_once": {"selector": "li, li.sale, .item", "all": True},
    "noscript": "noscript",
    "noscript_bold": "noscript b",
    "missing": "article.none",
    "missing_all": {"selector": "article.none", "all": True},
    "links_href": {"selector": "a.product", "attribute": "href", "all": True},
}

# No doctype: quirks mode, where class and id selectors ignore case (in both engines).
QUIRKS = """<html><head><title>Quirky</title></head><body>
<div id="Box" class="Card"><p>One</p><p>Two</p></div>
<ul><li>a<li>b</ul></body></html>"""

QUIRKS_FIELDS: dict[str, Any] = {
    "by_class": ".card p:nth-child(2)",
    "by_id": "#box p",
    "items": {"selector": "ul li", "all": True},
}


# Text in every shape the text sample meets: whitespace-only nodes, entities, wide spaces,
# text in script/style/noscript/template (not part of it), characters outside the BMP (one
# character each, though JavaScript counts two), and more than the sample keeps.
TEXT_PAGE = (
    """<!doctype html><html><head><title>Plain text</title><style>h1 { color: red }</style>
</head><body>
  <h1>Hello\u3000<em>world</em></h1>  <script>var hidden = "script text";</script>
  <p>caf&eacute;&nbsp;&amp; <b>bar</b>\t\n</p><template><p>inside a template</p></template>
  <noscript>enable scripts</noscript><style>p { margin: 0 }</style><!-- a comment -->
  <ul><li>one<li>two</ul><svg><text>in svg</text></svg>
  <div>"""
    + "\U0001f600 word " * 400
    + """</div></body></html>"""
)


# A product list: items whose fields are missing, nested lists of items, attributes, a selector
# that reaches outside the item (as querySelectorAll does: the whole document decides whether an
# element matches, only the item's descendants are returned) and a relative link under <base>.
PRODUCTS = """<!doctype html><html><head><title>Products</title><base href="/shop/"></head>
<body><div class="shop">
<ul class="products">
  <li class="product" data-sku="a1"><h2>Laptop <b>One</b></h2>
    <span class="price">$1,299.00</span><a href="p/1">more</a>
    <ul class="tags"><li>new</li><li>sale</li></ul></li>
  <li class="product" data-sku="b2"><h2>Laptop Two</h2><a href="p/2?x=1">more</a>
    <ul class="tags"></ul></li>
  <li class="product featured" data-sku="c3"><h2>  Laptop\u00a0Three </h2>
    <span class="price">1.499,50 EUR</span><span class="price">old</span>
    <ul class="variants"><li class="product" data-sku="c3-s"><h2>Small</h2></li></ul></li>
</ul></div></body></html>"""

PRODUCT_ITEMS: dict[str, Any] = {
    "selector": "li.product",
    "fields": {
        "name": "h2",
        "bold": "h2 b",
        "price": ".price",
        "prices": {"selector": ".price", "all": True},
        "sku": {"attribute": "data-sku"},
        "class": {"selector": ":scope", "attribute": "class"},
        "missing_attribute": {"selector": "", "attribute": "data-none"},
        "link": {"selector": "a", "attribute": "href"},
        "tags": {"selector": "ul.tags li", "all": True},
        "outside": {"selector": "div.shop h2", "all": True},
        "nested_products": {"selector": "li.product", "attribute": "data-sku", "all": True},
        "itself_by_class": "li.product",
    },
}


def both_engines(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    rendered = {**payload, "render": True, "waitUntil": "load"}
    return rendered, {**payload, "render": False}


@pytest.mark.timeout(90)
async def test_the_same_specs_give_identical_results_in_chromium_and_the_http_engine(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["catalogue"] = CATALOGUE
    site.pages["quirks"] = QUIRKS
    cases = [
        ("catalogue", {"extract": CATALOGUE_FIELDS, "follow": {"selector": "a.product"}}),
        ("quirks", {"extract": QUIRKS_FIELDS}),
    ]
    rows: list[tuple[str, int, int]] = []
    for name, payload in cases:
        rendered, static = both_engines(payload)
        url = site.url(f"/page/{name}")
        rows.append(
            (
                name,
                await insert_classic_row(connection, url, rendered),
                await insert_classic_row(connection, url + "?static", static),
            )
        )

    await run_burst(worker_settings)

    for name, browser_id, http_id in rows:
        browser = await job_row(connection, browser_id)
        http = await job_row(connection, http_id)
        assert browser.status == "completed", browser.last_error
        assert http.status == "completed", http.last_error
        assert browser.result["engine"] == "browser"
        assert http.result["engine"] == "http"
        assert http.result["fields"] == browser.result["fields"], name
        assert http.result["title"] == browser.result["title"], name
        assert http.result["links"] == browser.result["links"], name
    catalogue = (await job_row(connection, rows[0][1])).result
    # The values themselves, so that "identical" cannot mean "identically empty".
    fields = catalogue["fields"]
    assert catalogue["title"] == "Café & shop"
    assert fields["second"] == "Two"
    assert fields["odd"] == ["One", "Three"]
    assert fields["next_to_first"] == "b2"
    assert fields["after_sale"] == ["Three", "Four & more"]
    assert fields["sku_case"] == "D4"
    assert fields["entity_attribute"] == "Third <best>"
    assert fields["implied_tbody"] == ["8 cores", "16 GB"]
    assert fields["no_tbody_child"] == []
    assert fields["whitespace"] == "lots of whitespace here"
    assert fields["script_and_template"] == "beforevar ignored = 1;after"
    assert fields["template_bold"] is None
    assert fields["boolean_attribute"] == ""
    assert fields["missing_attribute"] is None
    assert fields["group_once"] == ["One", "Two", "Three", "Four & more"]
    assert fields["noscript"] == "<b>enable scripts</b>"
    assert fields["noscript_bold"] is None
    assert fields["missing"] is None
    assert fields["missing_all"] == []
    page = site.url("/shop/")
    assert catalogue["links"] == [
        f"{page}p/1",
        site.url("/p/2?x=1&y=2"),
        "https://other.example/x",
        f"{page}p/spaced",
        site.url("/svg-link"),
    ]
    quirks = (await job_row(connection, rows[1][1])).result["fields"]
    assert quirks == {"by_class": "Two", "by_id": "One", "items": ["a", "b"]}


@pytest.mark.timeout(90)
async def test_the_same_items_spec_gives_identical_items_in_chromium_and_the_http_engine(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["products"] = PRODUCTS
    cases = [
        {"items": PRODUCT_ITEMS, "extract": {"heading": "h2"}},
        {"items": {**PRODUCT_ITEMS, "limit": 2}},
    ]
    rows: list[tuple[int, int]] = []
    for number, payload in enumerate(cases):
        rendered, static = both_engines(payload)
        url = site.url(f"/page/products?case={number}")
        rows.append(
            (
                await insert_classic_row(connection, url, rendered),
                await insert_classic_row(connection, url + "&static", static),
            )
        )

    await run_burst(worker_settings)

    results = []
    for browser_id, http_id in rows:
        browser = await job_row(connection, browser_id)
        http = await job_row(connection, http_id)
        assert browser.status == "completed", browser.last_error
        assert http.status == "completed", http.last_error
        assert http.result["items"] == browser.result["items"]
        assert http.result["fields"] == browser.result["fields"]
        assert http.result.get("truncated") == browser.result.get("truncated")
        assert "text_sample" not in browser.result
        results.append(browser.result)
    items = results[0]["items"]
    assert [item["sku"] for item in items] == ["a1", "b2", "c3", "c3-s"]
    first, second, third, nested = items
    assert first == {
        "name": "Laptop One",
        "bold": "One",
        "price": "$1,299.00",
        "prices": ["$1,299.00"],
        "sku": "a1",
        "class": "product",
        "missing_attribute": None,
        "link": "p/1",
        "tags": ["new", "sale"],
        "outside": ["Laptop One"],
        "nested_products": [],
        "itself_by_class": None,
    }
    assert second["price"] is None
    assert second["prices"] == []
    assert second["tags"] == []
    assert third["name"] == "Laptop Three"
    assert third["prices"] == ["1.499,50 EUR", "old"]
    assert third["class"] == "product featured"
    assert third["outside"] == ["Laptop Three", "Small"]
    assert third["nested_products"] == ["c3-s"]
    assert third["itself_by_class"] == "Small"
    assert nested["name"] == "Small"
    assert "truncated" not in results[0]
    assert [item["sku"] for item in results[1]["items"]] == ["a1", "b2"]
    assert results[1]["truncated"] == ["items"]


@pytest.mark.timeout(90)
async def test_transforms_give_identical_values_after_either_engine(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["products"] = PRODUCTS
    payload = {
        "extract": {
            "count": {"selector": "li.product", "all": True, "transforms": [{"type": "join"}]},
            "first_price": {"selector": ".price", "transforms": [{"type": "price"}]},
        },
        "items": {
            "selector": "ul.products > li.product",
            "fields": {
                "name": {"selector": "h2", "transforms": [{"type": "uppercase"}]},
                "price": {
                    "selector": ".price",
                    "transforms": [
                        {"type": "regex", "pattern": "[0-9][0-9.,]*", "group": 0},
                        {"type": "price", "decimal": ",", "currency": "EUR"},
                    ],
                },
                "url": {
                    "selector": "a",
                    "attribute": "href",
                    "transforms": [{"type": "absoluteUrl"}],
                },
                "sku": {
                    "attribute": "data-sku",
                    "transforms": [{"type": "regex", "pattern": "^([a-z])"}, {"type": "uppercase"}],
                },
                "tags": {
                    "selector": "ul.tags li",
                    "all": True,
                    "transforms": [
                        {"type": "join", "separator": "|"},
                        {"type": "default", "value": "none"},
                    ],
                },
                "class": {"attribute": "class", "transforms": [{"type": "number"}]},
            },
        },
    }
    rendered, static = both_engines(payload)
    url = site.url("/page/products?transforms")
    browser_id = await insert_classic_row(connection, url, rendered)
    http_id = await insert_classic_row(connection, url + "&static", static)

    await run_burst(worker_settings)

    browser = await job_row(connection, browser_id)
    http = await job_row(connection, http_id)
    assert browser.status == "completed", browser.last_error
    assert http.status == "completed", http.last_error
    assert http.result["items"] == browser.result["items"]
    assert http.result["fields"] == browser.result["fields"]
    assert browser.result["fields"]["first_price"] == {"amount": 1299.0, "currency": "USD"}
    first, second, third = browser.result["items"]
    assert first["name"] == "LAPTOP ONE"
    assert first["url"] == site.url("/shop/p/1")
    assert second["url"] == site.url("/shop/p/2?x=1")
    assert third["url"] is None
    # "$1,299.00" read as the job said, with a decimal comma: 1.299.
    assert first["price"] == {"amount": 1.299, "currency": "EUR"}
    assert second["price"] is None
    assert third["price"] == {"amount": 1499.5, "currency": "EUR"}
    assert [item["sku"] for item in (first, second, third)] == ["A", "B", "C"]
    assert [item["tags"] for item in (first, second, third)] == ["new|sale", "none", "none"]
    assert first["class"] is None


@pytest.mark.timeout(90)
async def test_a_row_that_asks_for_no_fields_gets_the_same_title_and_text_sample_in_both_engines(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["text"] = TEXT_PAGE
    site.pages["empty"] = "<!doctype html><title>Empty</title><body> \n <script>1</script>"
    rows: list[tuple[int, int]] = []
    for name in ("text", "empty"):
        rendered, static = both_engines({})
        url = site.url(f"/page/{name}")
        rows.append(
            (
                await insert_classic_row(connection, url, rendered),
                await insert_classic_row(connection, url + "?static", static),
            )
        )
    asks_for_fields = await insert_classic_row(
        connection, site.url("/page/text?fields"), {"extract": {"heading": "h1"}}
    )

    await run_burst(worker_settings)

    results = []
    for browser_id, http_id in rows:
        browser = await job_row(connection, browser_id)
        http = await job_row(connection, http_id)
        assert browser.status == "completed", browser.last_error
        assert http.status == "completed", http.last_error
        assert http.result.get("text_sample") == browser.result.get("text_sample")
        assert http.result["title"] == browser.result["title"]
        results.append(browser.result)
    sample = results[0]["text_sample"]
    assert sample.startswith("Hello world café & bar onetwoin svg \U0001f600 word \U0001f600 word")
    assert len(sample) == 1000
    for hidden in ("script text", "template", "enable scripts", "margin"):
        assert hidden not in sample
    assert results[0]["title"] == "Plain text"
    assert "text_sample" not in results[1]
    fields_row = await job_row(connection, asks_for_fields)
    assert fields_row.status == "completed", fields_row.last_error
    assert "text_sample" not in fields_row.result


@pytest.mark.parametrize("selector", ["li >", "li:nth-child(", "::before-ish"])
async def test_a_selector_either_engine_cannot_parse_fails_both_rows_as_bad_selector(
    site: HostileSite, worker_settings: Any, connection: Connection, selector: str
) -> None:
    site.pages["list"] = "<ul><li>a</li></ul>"
    rendered, static = both_engines({"extract": {"x": selector}})
    ids = [
        await insert_classic_row(connection, site.url("/page/list"), rendered),
        await insert_classic_row(connection, site.url("/page/list?static"), static),
    ]

    await run_burst(worker_settings)

    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "failed"
        assert row.last_reason == "bad_selector"
        assert selector in (row.last_error or "")


@pytest.mark.parametrize("where", ["item", "field"])
async def test_an_items_selector_either_engine_cannot_parse_fails_both_rows_as_bad_selector(
    site: HostileSite, worker_settings: Any, connection: Connection, where: str
) -> None:
    site.pages["list"] = "<ul><li>a</li></ul>"
    items = (
        {"selector": "li >", "fields": {"x": ""}}
        if where == "item"
        else {"selector": "li", "fields": {"x": "b:nth-child("}}
    )
    rendered, static = both_engines({"items": items})
    ids = [
        await insert_classic_row(connection, site.url("/page/list"), rendered),
        await insert_classic_row(connection, site.url("/page/list?static"), static),
    ]

    await run_burst(worker_settings)

    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "failed"
        assert row.last_reason == "bad_selector"


# XPath over the catalogue: the same HTML5 tree in both engines (implied <tbody>, <template>
# contents apart, SVG in its namespace), node kinds other than elements, and positions.
CATALOGUE_XPATHS: dict[str, Any] = {
    "heading": {"xpath": "//h1"},
    "second": {"xpath": "//ul[@class='items']/li[2]"},
    "odd": {"xpath": "//li[contains(@class, 'item')][position() mod 2 = 1]", "all": True},
    "last": {"xpath": "(//li)[last()]"},
    "sku_attributes": {"xpath": "//li/@data-sku", "all": True},
    "sku_of_sale": {"xpath": "//li[contains(@class, 'sale')]", "attribute": "data-sku"},
    "following": {"xpath": "//li[@data-sku='b2']/following-sibling::li", "all": True},
    "implied_tbody": {"xpath": "//table/tbody/tr/td[2]", "all": True},
    "no_tbody_child": {"xpath": "//table/tr", "all": True},
    "text_nodes": {"xpath": "//p[@class='mixed']/text()", "all": True},
    "comment": {"xpath": "//p[@class='mixed']/comment()"},
    "template_bold": {"xpath": "//p[@class='mixed']//b"},
    "template": {"xpath": "//template"},
    "svg_by_name": {"xpath": "//svg"},
    "svg_by_local_name": {"xpath": "//*[local-name()='svg']/*", "attribute": "href"},
    "noscript": {"xpath": "//noscript"},
    "by_text": {"xpath": "//h2[normalize-space()='Nested']/following-sibling::span"},
    "ancestor": {"xpath": "//span[@class='deep']/ancestor::section/h2"},
    "attribute_with_attribute": {"xpath": "//li/@data-sku", "attribute": "data-sku"},
    "union": {"xpath": "//h2 | //h1/small", "all": True},
    "missing": {"xpath": "//article"},
    "missing_all": {"xpath": "//article", "all": True},
}


@pytest.mark.timeout(90)
async def test_the_same_xpaths_give_identical_results_in_chromium_and_the_http_engine(
    site: HostileSite, worker_settings: Any, connection: Connection
) -> None:
    site.pages["catalogue"] = CATALOGUE
    site.pages["products"] = PRODUCTS
    xpath_items = {
        "xpath": "//ul[@class='products']/li",
        "fields": {
            "name": {"xpath": "./h2"},
            "sku": {"xpath": "@data-sku"},
            "itself": {"xpath": ".", "attribute": "class"},
            "tags": {"xpath": ".//ul[@class='tags']/li", "all": True},
            "css_price": ".price",
        },
    }
    css_items_xpath_fields = {
        "selector": "li.product",
        "fields": {"first_tag": {"xpath": ".//li[1]"}, "h2_text": {"xpath": "h2/text()"}},
    }
    cases = [
        ("catalogue", {"extract": CATALOGUE_XPATHS}),
        ("products", {"items": xpath_items}),
        ("products", {"items": css_items_xpath_fields}),
    ]
    rows: list[tuple[int, int]] = []
    for number, (name, payload) in enumerate(cases):
        rendered, static = both_engines(payload)
        url = site.url(f"/page/{name}?case={number}")
        rows.append(
            (
                await insert_classic_row(connection, url, rendered),
                await insert_classic_row(connection, url + "&static", static),
            )
        )

    await run_burst(worker_settings)

    results = []
    for browser_id, http_id in rows:
        browser = await job_row(connection, browser_id)
        http = await job_row(connection, http_id)
        assert browser.status == "completed", browser.last_error
        assert http.status == "completed", http.last_error
        assert http.result["fields"] == browser.result["fields"]
        assert http.result.get("items") == browser.result.get("items")
        results.append(browser.result)
    # The values themselves, so that "identical" cannot mean "identically empty".
    fields = results[0]["fields"]
    assert fields["heading"] == "Laptops (3)"
    assert fields["second"] == "Two"
    assert fields["odd"] == ["One", "Three"]
    assert fields["last"] == "Four & more"
    assert fields["sku_attributes"] == ["a1", "b2", "c3", "D4"]
    assert fields["sku_of_sale"] == "b2"
    assert fields["following"] == ["Three", "Four & more"]
    assert fields["implied_tbody"] == ["8 cores", "16 GB"]
    assert fields["no_tbody_child"] == []
    assert fields["text_nodes"] == ["before", "after"]
    assert fields["comment"] == "comment"
    assert fields["template_bold"] is None
    assert fields["template"] == ""
    assert fields["svg_by_name"] is None
    assert fields["svg_by_local_name"] == "/svg-link"
    assert fields["noscript"] == "<b>enable scripts</b>"
    assert fields["by_text"] == "deep two"
    assert fields["ancestor"] == "Nested"
    assert fields["attribute_with_attribute"] is None
    assert fields["union"] == ["(3)", "Nested"]
    assert fields["missing"] is None
    assert fields["missing_all"] == []
    items = results[1]["items"]
    assert [item["sku"] for item in items] == ["a1", "b2", "c3"]
    assert items[0] == {
        "name": "Laptop One",
        "sku": "a1",
        "itself": "product",
        "tags": ["new", "sale"],
        "css_price": "$1,299.00",
    }
    assert [item["first_tag"] for item in results[2]["items"]] == ["new", None, "Small", None]
    assert [item["h2_text"] for item in results[2]["items"]][1] == "Laptop Two"


@pytest.mark.parametrize("xpath", ["//li[", "count(//li)", "string(//li)", "//li/@data-sku = 'a'"])
async def test_an_xpath_that_is_invalid_or_selects_no_nodes_fails_both_rows_as_bad_selector(
    site: HostileSite, worker_settings: Any, connection: Connection, xpath: str
) -> None:
    site.pages["list"] = "<ul><li data-sku=a>a</li></ul>"
    rendered, static = both_engines({"extract": {"x": {"xpath": xpath}}})
    ids = [
        await insert_classic_row(connection, site.url("/page/list"), rendered),
        await insert_classic_row(connection, site.url("/page/list?static"), static),
    ]

    await run_burst(worker_settings)

    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "failed", row.result
        assert row.last_reason == "bad_selector"
        assert "XPath" in (row.last_error or "")
