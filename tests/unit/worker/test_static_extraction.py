"""The static engine (lexbor) builds the tree a browser builds and runs full CSS selectors;
the conformance test in tests/integration/worker compares it with Chromium itself."""

from __future__ import annotations

import pytest
from scrapeq_worker.errors import BadInput
from scrapeq_worker.extraction import (
    TRUNCATION_MARKER,
    cap_result,
    extract_static,
    parse_fields,
    parse_items,
)

PAGE = """<!doctype html><html><head><title>  A   shop </title><base href="/shop/"></head>
<body><div id="main" class="listing wide">
  <h1>Laptops <small>(3)</small></h1>
  <ul class="items">
    <li class="item" data-sku="a1">One<li class="item sale" data-sku="b2">Two
    <li class="item" data-sku="c3">Three
  </ul>
  <a class="product" href="p/1#reviews">first</a><a href="https://other.example/x">x</a>
  <a href="mailto:someone@example.com">mail</a><img src="i.png">
</div></body></html>"""


def extract(fields: dict[str, object], **options: object) -> dict[str, object]:
    page = extract_static(PAGE, parse_fields(fields), base_url="http://site.test/a/b", **options)
    return page.fields


def test_text_is_whitespace_normalised_like_the_browser_engine() -> None:
    assert extract({"title": "h1"}) == {"title": "Laptops (3)"}


def test_all_returns_every_match_and_implied_end_tags_are_respected() -> None:
    assert extract({"items": {"selector": "ul.items > li.item", "all": True}}) == {
        "items": ["One", "Two", "Three"]
    }


def test_attributes_and_attribute_selectors() -> None:
    assert extract(
        {
            "sku": {"selector": "li.sale", "attribute": "data-sku"},
            "third": {"selector": "li[data-sku=c3]"},
            "starts": {"selector": '[data-sku^="b"]'},
            "image": {"selector": "div#main img", "attribute": "src"},
        }
    ) == {"sku": "b2", "third": "Three", "starts": "Two", "image": "i.png"}


def test_a_missing_element_is_null_and_a_missing_list_is_empty() -> None:
    assert extract({"one": "span.none", "many": {"selector": "table td", "all": True}}) == {
        "one": None,
        "many": [],
    }


def test_comma_groups_match_in_document_order() -> None:
    assert extract({"both": {"selector": "h1, li.sale", "all": True}}) == {
        "both": ["Laptops (3)", "Two"]
    }


def test_title_links_and_followed_links_are_absolute_http_urls() -> None:
    page = extract_static(PAGE, (), base_url="http://site.test/a/b", follow_selector="a.product")
    assert page.title == "A shop"
    assert page.links == ["http://site.test/shop/p/1", "https://other.example/x"]
    assert page.follow == ["http://site.test/shop/p/1"]


def test_selectors_beyond_descendant_and_child_combinators_work() -> None:
    assert extract(
        {
            "second": "ul.items > li:nth-child(2)",
            "after_first": {"selector": "li.item:first-child + li", "attribute": "data-sku"},
            "siblings": {"selector": "li.sale ~ li", "all": True},
            "not_sale": {"selector": "li.item:not(.sale)", "all": True},
        }
    ) == {"second": "Two", "after_first": "b2", "siblings": ["Three"], "not_sale": ["One", "Three"]}


def test_an_element_matching_several_selectors_of_a_group_is_listed_once() -> None:
    assert extract({"items": {"selector": "li, li.sale, .item", "all": True}}) == {
        "items": ["One", "Two", "Three"]
    }


def test_whitespace_the_browser_counts_is_collapsed_and_entities_are_decoded() -> None:
    page = "<p>a&nbsp;&nbsp;b\u3000c &amp;\ufeff d\n\t e&#x2003;</p>"
    found = extract_static(page, parse_fields({"p": "p"}), base_url="http://site.test/")
    assert found.fields == {"p": "a b c & d e"}


def test_an_attribute_without_a_value_is_empty_and_a_missing_one_is_null() -> None:
    page = '<input id="q" disabled><input id="r">'
    fields = {
        "disabled": {"selector": "#q", "attribute": "disabled"},
        "absent": {"selector": "#r", "attribute": "disabled"},
    }
    found = extract_static(page, parse_fields(fields), base_url="http://site.test/")
    assert found.fields == {"disabled": "", "absent": None}


@pytest.mark.parametrize("selector", ["li:nth-child(", "a[=x]", "::", "li >"])
def test_a_selector_lexbor_cannot_parse_is_bad_input(selector: str) -> None:
    with pytest.raises(BadInput, match="invalid CSS selector") as caught:
        extract({"x": selector})
    assert caught.value.reason == "bad_selector"


def test_malformed_field_specs_are_bad_input() -> None:
    with pytest.raises(BadInput, match="unknown keys"):
        parse_fields({"x": {"selector": "h1", "css": "h1"}})
    with pytest.raises(BadInput, match="names both a selector and an xpath"):
        parse_fields({"x": {"selector": "h1", "xpath": "//h1"}})


def test_items_read_each_field_inside_their_element_and_the_element_itself() -> None:
    items = parse_items(
        {"selector": "li.item", "fields": {"text": "", "sku": {"attribute": "data-sku"}}}
    )
    page = extract_static(PAGE, (), base_url="http://site.test/a/b", items=items)
    assert page.items == [
        {"text": "One", "sku": "a1"},
        {"text": "Two", "sku": "b2"},
        {"text": "Three", "sku": "c3"},
    ]
    assert page.truncated == []
    assert page.text_sample is None


def test_items_past_the_limit_are_left_out_and_named_as_truncated() -> None:
    items = parse_items({"selector": "li.item", "fields": {"sku": {"attribute": "data-sku"}}})
    assert items is not None
    page = extract_static(
        PAGE,
        (),
        base_url="http://site.test/a/b",
        items=type(items)(items.selector, items.fields, limit=2),
    )
    assert page.items == [{"sku": "a1"}, {"sku": "b2"}]
    assert page.truncated == ["items"]


def test_items_stop_when_the_text_budget_is_spent_and_are_named_as_truncated() -> None:
    html = "<ul>" + "<li>" + "x" * 100 + "</li>" * 1 + ("<li>" + "y" * 100) * 50 + "</ul>"
    items = parse_items({"selector": "li", "fields": {"text": ""}})
    page = extract_static(html, (), base_url="http://site.test/", items=items, max_characters=250)
    assert page.items is not None
    assert [len(item["text"]) for item in page.items[:2]] == [100, 100]
    assert page.items[2]["text"].endswith(TRUNCATION_MARKER)
    assert len(page.items) == 3
    assert page.truncated == ["items"]


def test_the_result_cap_keeps_the_first_items_that_fit_and_names_items() -> None:
    result = {"url": "http://site.test/", "items": [{"text": "x" * 100} for _ in range(100)]}
    capped = cap_result(result, 2000)
    assert 0 < len(capped["items"]) < 100
    assert all(item == {"text": "x" * 100} for item in capped["items"])
    assert capped["truncated"] == ["items"]


def test_xpath_copes_with_what_xml_cannot_hold_and_with_deep_nesting() -> None:
    hostile = (
        "<div a:b='1' 1x='2' data-k='v\x01'>text\x02here<!-- a -- b --><!--x---></div>"
        + "<section>" * 5000
        + "<b>deep</b>"
        + "</section>" * 5000
    )
    fields = parse_fields(
        {
            "text": {"xpath": "//div"},
            "attribute": {"xpath": "//div/@data-k"},
            "comment": {"xpath": "//comment()"},
            "deep": {"xpath": "//section/b"},
            "depth": {"xpath": "//b/ancestor::section", "all": True},
        }
    )
    found = extract_static(hostile, fields, base_url="http://site.test/").fields
    # The element's text is read from lexbor's tree itself; values the XPath copy holds show
    # characters XML cannot hold as U+FFFD.
    assert found["text"] == "text\x02here"
    assert found["attribute"] == "v\ufffd"
    assert found["comment"] == "a -- b"
    assert found["deep"] == "deep"
    assert isinstance(found["depth"], list)
    assert len(found["depth"]) == 5000


def test_an_xpath_field_and_css_items_read_the_same_elements() -> None:
    page = extract_static(
        PAGE,
        parse_fields({"skus": {"xpath": "//li/@data-sku", "all": True}}),
        base_url="http://site.test/",
        items=parse_items({"selector": "li.item", "fields": {"sku": {"xpath": "@data-sku"}}}),
    )
    assert page.fields == {"skus": ["a1", "b2", "c3"]}
    assert page.items == [{"sku": "a1"}, {"sku": "b2"}, {"sku": "c3"}]


@pytest.mark.parametrize("xpath", ["//li[", "count(//li)", "1 = 1", "//x:li"])
def test_an_xpath_that_is_invalid_or_computes_a_value_is_a_bad_selector(xpath: str) -> None:
    with pytest.raises(BadInput, match="invalid XPath") as caught:
        extract({"x": {"xpath": xpath}})
    assert caught.value.reason == "bad_selector"
