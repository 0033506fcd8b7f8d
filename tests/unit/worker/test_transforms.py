"""Field transforms: each one on the values it is for, on the values it cannot apply to (null,
never an exception), and in chains; the same Python code runs after either engine."""

from __future__ import annotations

from typing import Any

import pytest
from scrapeq_worker.extraction import (
    TRUNCATION_MARKER,
    ExtractedPage,
    Transform,
    parse_fields,
    parse_items,
)
from scrapeq_worker.transforms import (
    absolute_url,
    apply_transforms,
    parse_number,
    parse_price,
    transform_page,
)

pytestmark = pytest.mark.timeout(10)

BASE = "https://shop.example/shop/"


def step(kind: str, **options: Any) -> Transform:
    return Transform(kind, tuple(options.items()))


def run(value: Any, *steps: Transform) -> Any:
    return apply_transforms(value, steps, link_base=BASE)


@pytest.mark.parametrize(
    ("text", "decimal", "thousands", "expected"),
    [
        ("$1,299.00", ".", ",", 1299.0),
        ("1.299,00 €", ",", ".", 1299.0),
        ("1 299,50", ",", " ", 1299.5),
        ("1'299.95 CHF", ".", "'", 1299.95),
        ("4 reviews", ".", ",", 4),
        ("from 12 to 20", ".", ",", 12),
        ("-3 °C", ".", ",", -3),
        ("\u22122.5", ".", ",", -2.5),
        ("SKU-123", ".", ",", 123),
        ("12345", ".", ",", 12345),
        ("1,5 kg", ".", ",", 1),
        ("1,5 kg", ",", ".", 1.5),
        ("1299", ".", "", 1299),
        ("no digits", ".", ",", None),
        ("", ".", ",", None),
    ],
)
def test_number_reads_the_first_number_with_the_given_separators(
    text: str, decimal: str, thousands: str, expected: float | None
) -> None:
    found = parse_number(text, decimal, thousands)
    assert found == expected
    assert type(found) is type(expected)


def test_a_number_too_large_for_a_float_is_null_and_a_long_integer_becomes_a_float() -> None:
    assert parse_number("9" * 400) is None
    assert parse_number("1" * 20) == float("1" * 20)
    assert parse_number("1" * 5000) is None


def test_number_over_a_huge_text_of_digit_groups_takes_linear_time() -> None:
    # 200,000 characters of "1,1,1,…" would take quadratic time with a backtracking pattern.
    assert parse_number("1," * 100_000 + "x") == 1


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        ("$1,299.00", {}, {"amount": 1299.0, "currency": "USD"}),
        ("1.299,00 €", {"decimal": ","}, {"amount": 1299.0, "currency": "EUR"}),
        ("EUR 15", {}, {"amount": 15.0, "currency": "EUR"}),
        ("15 SKU", {}, {"amount": 15.0, "currency": None}),
        ("£7.50", {}, {"amount": 7.5, "currency": "GBP"}),
        ("US$ 3", {}, {"amount": 3.0, "currency": "USD"}),
        ("R$ 10,00", {"decimal": ","}, {"amount": 10.0, "currency": "BRL"}),
        ("$4", {"currency": "CAD"}, {"amount": 4.0, "currency": "CAD"}),
        ("GBP 4", {"currency": "CAD"}, {"amount": 4.0, "currency": "GBP"}),
        ("12 kr", {}, {"amount": 12.0, "currency": None}),
        ("call us", {}, None),
    ],
)
def test_price_reads_the_amount_and_the_currency_from_a_code_or_a_symbol(
    text: str, options: dict[str, str], expected: dict[str, Any] | None
) -> None:
    assert run(text, step("price", **options)) == expected


def test_price_with_a_decimal_comma_uses_a_point_for_thousands_by_default() -> None:
    assert parse_price("1.499,50 EUR", ",", ".") == {"amount": 1499.5, "currency": "EUR"}


def test_regex_gives_the_group_asked_for_or_the_first_group_or_the_whole_match() -> None:
    assert run("SKU-123 in stock", step("regex", pattern=r"SKU-(\d+)")) == "123"
    assert run("SKU-123", step("regex", pattern=r"SKU-(\d+)", group=0)) == "SKU-123"
    assert run("SKU-123", step("regex", pattern=r"\d+")) == "123"
    assert run("no match", step("regex", pattern=r"SKU-(\d+)")) is None
    assert run("b", step("regex", pattern=r"(a)|(b)", group=1)) is None


def test_regex_runs_in_linear_time_on_a_pattern_that_backtracks_in_python() -> None:
    assert run("a" * 100_000 + "!", step("regex", pattern=r"(a+)+$")) is None


def test_absolute_url_resolves_against_the_base_and_keeps_only_http_urls() -> None:
    assert absolute_url(" p/1#reviews ", BASE) == "https://shop.example/shop/p/1#reviews"
    assert absolute_url("/p/2?x=1", BASE) == "https://shop.example/p/2?x=1"
    assert absolute_url("//cdn.example/i.png", BASE) == "https://cdn.example/i.png"
    assert absolute_url("javascript:void(0)", BASE) is None
    assert absolute_url("mailto:a@b.example", BASE) is None
    assert absolute_url("", BASE) is None
    assert absolute_url("http://[::1", BASE) is None


def test_trim_normalises_whitespace_of_attribute_values_as_text_is_normalised() -> None:
    assert run("  two\n\twords\u00a0here ", step("trim")) == "two words here"


def test_lowercase_and_uppercase() -> None:
    assert run("Mixed Case", step("lowercase")) == "mixed case"
    assert run("Mixed Case", step("uppercase")) == "MIXED CASE"


def test_transforms_apply_to_each_item_of_a_list_and_join_makes_one_string() -> None:
    assert run(["$1", "$2", None], step("number")) == [1, 2, None]
    assert run(["new", None, "sale"], step("uppercase"), step("join", separator=", ")) == (
        "NEW, SALE"
    )
    assert run(["1", "2"], step("number"), step("join")) == "1 2"
    assert run("already text", step("join")) == "already text"
    assert run([{"amount": 1.0}], step("join")) is None


def test_default_replaces_a_null_an_empty_string_or_an_empty_list() -> None:
    assert run(None, step("default", value="n/a")) == "n/a"
    assert run("", step("default", value=0)) == 0
    assert run([], step("default", value="none")) == "none"
    assert run("kept", step("default", value="n/a")) == "kept"
    assert run("no digits", step("number"), step("default", value=0)) == 0


@pytest.mark.parametrize(
    "kind", ["trim", "lowercase", "uppercase", "number", "price", "regex", "absoluteUrl"]
)
@pytest.mark.parametrize("value", [None, 12, 1.5, True, {"amount": 1.0}])
def test_a_transform_that_cannot_apply_gives_null_never_an_exception(kind: str, value: Any) -> None:
    assert run(value, step(kind, pattern="x")) is None


def test_a_chain_runs_in_order() -> None:
    assert run(
        " Price: EUR 1.299,00 (was 1.499,00) ",
        step("trim"),
        step("regex", pattern=r"EUR [0-9.,]+", group=0),
        step("price", decimal=","),
    ) == {"amount": 1299.0, "currency": "EUR"}


def test_a_page_gets_its_fields_and_items_transformed_and_cut_values_named() -> None:
    fields = parse_fields(
        {
            "price": {"selector": ".p", "transforms": [{"type": "price"}]},
            "count": {"selector": ".c", "transforms": [{"type": "number"}]},
            "plain": ".x",
        }
    )
    items = parse_items(
        {
            "selector": "li",
            "fields": {
                "link": {"attribute": "href", "transforms": [{"type": "absoluteUrl"}]},
                "n": {"selector": "b", "transforms": [{"type": "number"}]},
            },
        }
    )
    page = ExtractedPage(
        fields={"price": "$1,299.00", "count": "7" + TRUNCATION_MARKER, "plain": " as is "},
        items=[{"link": "p/1", "n": "2"}, {"link": None, "n": "3" + TRUNCATION_MARKER}],
        link_base=BASE,
    )
    transform_page(page, fields, items)
    assert page.fields == {
        "price": {"amount": 1299.0, "currency": "USD"},
        "count": 7,
        "plain": " as is ",
    }
    assert page.items == [
        {"link": "https://shop.example/shop/p/1", "n": 2},
        {"link": None, "n": 3},
    ]
    assert page.truncated == ["fields.count", "items"]
