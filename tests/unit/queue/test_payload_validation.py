"""The payload options a producer may set, and how bad ones are reported."""

from __future__ import annotations

import json

import pytest
from scrapeq_queue import PAYLOAD_OPTIONS, validate_payload
from scrapeq_queue.payload import (
    UnreadablePayload,
    claimed_payload_problems,
    load_payload,
    load_payload_and_key,
)
from scrapeq_queue.sealed_credentials import Credentials, SealingKeys


def test_an_empty_or_null_payload_is_valid() -> None:
    assert validate_payload({}) == []
    assert validate_payload(None) == []


def test_every_documented_option_is_accepted_with_a_valid_value() -> None:
    payload = {
        "render": True,
        "waitFor": ".product",
        "waitUntil": "networkidle2",
        "timeoutSeconds": 45,
        "extract": {"title": "h1", "price": {"selector": ".price", "attribute": "data-v"}},
        "follow": {
            "selector": "a.product",
            "maxDepth": 1,
            "maxPages": 500,
            "sameHost": False,
            "include": ["/product/"],
            "exclude": [r"\?sort="],
            "extract": {"name": "h1"},
        },
        "next": {"selector": "a[rel=next]", "maxPages": 10_000, "page": 2},
        "routes": {"detail": {"extract": {"name": "h1"}, "waitFor": "h1"}},
        "route": "detail",
        "headers": {"Accept-Language": "en"},
        "blockResources": ["image", "font", "media", "stylesheet"],
        "blockMarkers": [{"selector": "#challenge"}, {"selector": "h1", "text": "Verify"}],
        "sealed": SealingKeys.from_text(SealingKeys.generate()).seal(
            Credentials(origins=("https://shop.example:443",), headers={"X-Token": "t"})
        ),
        "politeness": {"maxConcurrentPerSite": 4, "delaySeconds": 1.5, "respectRobotsTxt": True},
        "parser": "shop.product-page_v2",
        "items": {
            "selector": "li.product",
            "fields": {"name": "h2", "sku": {"attribute": "data-sku"}, "itself": ""},
            "limit": 100,
        },
        "structuredData": ["json-ld", "opengraph"],
        "steps": [{"action": "click", "selector": "button.more"}],
        "session": {
            "login": {
                "url": "https://shop.example/login",
                "steps": [{"action": "click", "selector": "button.sign-in"}],
            }
        },
        "keep": ["html", "text", "screenshot", "pdf"],
        "source": {"kind": "sitemap", "lastmodAfter": "2026-01-31T00:00:00Z"},
        "crawlKey": "prices/shop.example",
        "recrawlAfterSeconds": 3600,
    }
    assert set(payload) == set(PAYLOAD_OPTIONS)
    assert validate_payload(payload) == []


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ([1, 2], "payload must be a JSON object of options, got a JSON array"),
        ("render", "payload must be a JSON object of options, got a JSON string"),
        (42, "payload must be a JSON object of options, got a JSON number"),
    ],
)
def test_a_payload_that_is_not_an_object_is_named_for_what_it_is(
    payload: object, expected: str
) -> None:
    assert validate_payload(payload) == [expected]


def test_an_unknown_option_is_reported_with_the_known_ones() -> None:
    (problem,) = validate_payload({"rendr": True})
    assert "unknown payload option 'rendr'" in problem
    assert "render" in problem


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"render": "yes"}, "render must be true or false"),
        ({"waitFor": ""}, "waitFor must be a CSS selector string of 1-1024 characters"),
        ({"waitUntil": "idle"}, "waitUntil must be one of"),
        ({"timeoutSeconds": 0}, "timeoutSeconds must be a number above 0"),
        ({"timeoutSeconds": True}, "timeoutSeconds must be a number above 0"),
        ({"timeoutSeconds": 10_000}, "at most 600"),
        ({"extract": {}}, "extract must be a non-empty object"),
        ({"extract": {"title": {"css": "h1"}}}, "extract.title has unknown keys: css"),
        ({"extract": {"title": 3}}, "extract.title must be a selector string"),
        ({"follow": {"maxDepth": 1}}, "follow.selector must be a string of 1-1024 characters"),
        (
            {"follow": {"selector": "a", "maxPages": 0}},
            "follow.maxPages must be an integer from 1 to 100000",
        ),
        ({"follow": {"selector": "a", "sameHost": "yes"}}, "follow.sameHost must be true"),
        (
            {"follow": {"selector": "a", "sameDomain": False}},
            "follow.sameDomain is now follow.sameHost",
        ),
        ({"follow": {"selector": "a", "include": "/p/"}}, "follow.include must be a list"),
        (
            {"follow": {"selector": "a", "exclude": ["(unclosed"]}},
            "follow.exclude[0] '(unclosed' is not a valid regular expression",
        ),
        ({"follow": {"selector": "a", "extract": {"n": 3}}}, "follow.extract.n must be a selector"),
        ({"next": "a.next"}, 'next must be an object {"selector": ..., "maxPages": ...}'),
        ({"next": {"maxPages": 3}}, "next.selector must be a string of 1-1024 characters"),
        ({"next": {"selector": " "}}, "next.selector must be a string of 1-1024 characters"),
        ({"next": {"selector": "a", "maxPages": 0}}, "next.maxPages must be an integer from 1"),
        (
            {"next": {"selector": "a", "maxPages": 10_001}},
            "next.maxPages must be an integer from 1 to 10000",
        ),
        ({"next": {"selector": "a", "page": True}}, "next.page must be an integer from 1"),
        ({"next": {"selector": "a", "button": "b"}}, "next has unknown keys: button"),
        ({"headers": {"X": 1}}, "headers must be an object"),
        ({"blockResources": "image"}, "blockResources must be a list of distinct kinds"),
        ({"blockMarkers": {"selector": "h1"}}, "blockMarkers must be a list of at most 20"),
        ({"blockMarkers": [{"selector": "h1"}] * 21}, "blockMarkers must be a list of at most 20"),
        ({"blockMarkers": [{"selector": " "}]}, "blockMarkers[0].selector must be a CSS"),
        ({"blockMarkers": [{"selector": "h1", "text": "x" * 201}]}, "blockMarkers[0].text"),
        ({"blockMarkers": [{"selector": "h1", "regex": "x"}]}, "blockMarkers[0]: must be"),
        ({"blockResources": ["image", "script"]}, "from image, font, media, stylesheet"),
        ({"blockResources": ["font", "font"]}, "blockResources must be a list of distinct"),
        ({"parser": ""}, "parser must be the name of a registered parser"),
        ({"parser": "my parser"}, "parser must be the name of a registered parser"),
        ({"parser": "p" * 101}, "1-100 letters, digits"),
        ({"parser": ["a"]}, "parser must be the name of a registered parser"),
    ],
)
def test_an_option_with_a_wrong_value_is_reported_by_name(
    payload: dict[str, object], fragment: str
) -> None:
    problems = validate_payload(payload)
    assert any(fragment in problem for problem in problems), problems


def test_every_problem_is_reported_not_only_the_first() -> None:
    assert len(validate_payload({"render": 1, "nope": 2, "waitUntil": "never"})) == 3


@pytest.mark.parametrize(
    ("name", "pattern", "fragment"),
    [
        ("include", r"/(\w+)/\1", "invalid escape sequence: \\1"),
        ("exclude", r"/p/(?!sale)", "invalid perl operator: (?!"),
        ("include", r"(?<=/)item", "invalid perl operator: (?<"),
    ],
)
def test_a_follow_pattern_python_accepts_but_re2_refuses_is_reported_with_the_re2_rules(
    name: str, pattern: str, fragment: str
) -> None:
    """The operator turns these problems into InvalidSpec, so a ScrapeJob hears why at once."""
    (problem,) = validate_payload({"follow": {"selector": "a", name: [pattern]}})
    assert problem.startswith(f"follow.{name}[0] {pattern!r} is not a valid regular expression")
    assert fragment in problem
    assert "no backreferences" in problem
    assert "lookaround" in problem


def test_a_pattern_that_backtracks_exponentially_in_python_is_accepted_for_re2() -> None:
    assert validate_payload({"follow": {"selector": "a", "include": ["(a+)+$"]}}) == []


def _nested(levels: int) -> str:
    return '{"extract": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"timeoutSeconds": 1' + "0" * 400 + "}", "a number of 401 digits"),
        ('{"timeoutSeconds": ' + "9" * 5000 + "}", "a number of 5000 digits"),
        ('{"timeoutSeconds": -' + "9" * 5000 + "}", "a number of 5000 digits"),
        ('{"timeoutSeconds": 1e400}', "a number too large to represent"),
        ('{"timeoutSeconds": NaN}', "NaN, which is not a JSON number"),
        ('{"timeoutSeconds": Infinity}', "Infinity, which is not a JSON number"),
        (_nested(3000), "deeper than 32 levels"),
        (_nested(40), "deeper than 32 levels"),
        ('{"headers": {"X": "' + "a" * 300_000 + '"}}', "at most 262144 are allowed"),
        ("{not json", "payload is not readable JSON"),
    ],
)
def test_a_payload_no_worker_could_load_is_read_as_a_problem_never_an_exception(
    text: str, fragment: str
) -> None:
    loaded = load_payload(text.encode())
    assert isinstance(loaded, UnreadablePayload)
    (problem,) = validate_payload(loaded)
    assert fragment in problem


def test_a_payload_within_the_bounds_loads_as_its_value() -> None:
    text = '{"timeoutSeconds": 12.5, "follow": {"selector": "a", "maxPages": 100000}}'
    assert load_payload(text.encode()) == {
        "timeoutSeconds": 12.5,
        "follow": {"selector": "a", "maxPages": 100000},
    }
    assert load_payload(memoryview(b"null")) is None


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"timeoutSeconds": 10**5000}, "a number above 1e+15 in magnitude"),
        ({"timeoutSeconds": 10**20}, "a number of 21 digits; numbers are at most 1e+15"),
        ({"timeoutSeconds": float("inf")}, "too large to represent"),
        ({"timeoutSeconds": float("nan")}, "NaN, which is not a JSON number"),
        ({"timeoutSeconds": -5}, "timeoutSeconds must be a number above 0"),
        ({"politeness": {"delaySeconds": 10**12}}, "delaySeconds must be a number from 0"),
        ({"politeness": {"delaySeconds": -1}}, "delaySeconds must be a number from 0"),
        ({"politeness": {"maxConcurrentPerSite": 10**12}}, "maxConcurrentPerSite must be"),
        (
            {"follow": {"selector": "a", "maxDepth": 1000}},
            "follow.maxDepth must be an integer from 0 to 5",
        ),
        (
            {"follow": {"selector": "a", "maxDepth": -1}},
            "follow.maxDepth must be an integer from 0 to 5",
        ),
        (
            {"follow": {"selector": "a", "maxPages": 10**9}},
            "follow.maxPages must be an integer from 1 to 100000",
        ),
        ({"extract": {"x" * 5000: "h1"}}, "must have 1-63 characters"),
        ({"extract": {"t": "h" * 2000}}, "extract.t must be a selector of 1-1024 characters"),
        ({"extract": {"t": {"selector": "h1", "attribute": "a" * 300}}}, "at most 256 characters"),
        ({"headers": {"X-A": "one\r\nX-Injected: two"}}, "without line breaks or NUL"),
        ({"headers": {"X-A": "nul\x00"}}, "without line breaks or NUL"),
        ({"headers": {"Bad Name": "v"}}, "must be 1-256 letters, digits"),
        ({"headers": {"": "v"}}, "must be 1-256 letters, digits"),
        ({"headers": {f"X-{n}": "v" for n in range(51)}}, "at most 50 header name"),
        (
            {
                "extract": ["h1"] * 3,
                "deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
            },
            "deeper than 32",
        ),
        ({"headers": {"X": "a" * 300_000}}, "at most 262144 are allowed"),
        ({"render": {1, 2}}, "only JSON values"),
        ({"extract": {1: "h1"}}, "only JSON values"),
        ({"politeness": {None: 1}}, "only JSON values"),
    ],
)
def test_every_number_size_and_depth_in_a_payload_is_bounded(
    payload: dict[str, object], fragment: str
) -> None:
    problems = validate_payload(payload)
    assert any(fragment in problem for problem in problems), problems


def test_extract_fields_are_bounded_in_number_and_total_size() -> None:
    (too_many,) = validate_payload({"extract": {f"f{n}": "h1" for n in range(10_000)}})
    assert too_many == "extract has 10000 fields; at most 50 are allowed"
    wide = {f"f{n}": "div > " * 60 for n in range(50)}  # 50 selectors of 360 characters
    problems = validate_payload({"extract": wide, "follow": {"selector": "a", "extract": wide}})
    assert any("at most 16384 are allowed" in problem for problem in problems), problems
    assert validate_payload({"extract": {f"f{n}": "h1" for n in range(50)}}) == []


def test_a_payload_with_thousands_of_problems_names_a_bounded_number_of_them() -> None:
    problems = validate_payload({f"unknown{n}": n for n in range(5000)})
    assert len(problems) == 21
    assert problems[-1] == "and 4980 more problems"
    (long_name,) = validate_payload({"x" * 100_000: 1})
    # The name is cut short; the list of known options grows with the vocabulary.
    assert len(long_name) < 120 + len(", ".join(PAYLOAD_OPTIONS))


@pytest.mark.parametrize(
    ("items", "fragment"),
    [
        ([], 'items must be an object {"selector": ...'),
        ({"fields": {"a": "b"}}, "items.selector must be a CSS selector of 1-1024 characters"),
        ({"selector": "li", "fields": {}}, "items.fields must be a non-empty object"),
        ({"selector": "li", "fields": {"a": "b"}, "limit": 0}, "items.limit must be an integer"),
        ({"selector": "li", "fields": {"a": "b"}, "limit": 10_001}, "from 1 to 10000"),
        ({"selector": "li", "fields": {"a": "b"}, "sort": 1}, "items has unknown keys: sort"),
        ({"selector": "li", "fields": {"a": 3}}, "items.fields.a must be a selector string"),
        ({"selector": "li", "fields": {"a": {"attribute": 3}}}, "items.fields.a.attribute must"),
        ({"selector": "li", "fields": {"a": ":scope > b"}}, "items.fields.a.selector may be"),
        ({"selector": "li", "fields": {"a": "b :SCOPE"}}, "items.fields.a.selector may be"),
        ({"selector": "li", "fields": {"a": {"all": "yes"}}}, "items.fields.a.all must be"),
        ({"xpath": "", "fields": {"a": "b"}}, "items.xpath must be an XPath of 1-1024"),
        ({"xpath": "//li", "selector": "li", "fields": {"a": "b"}}, "a selector or an xpath"),
        ({"xpath": "//li", "fields": {"a": {"xpath": 3}}}, "items.fields.a.xpath must be a"),
        (
            {"xpath": "//li", "fields": {"a": {"xpath": ".", "selector": "b"}}},
            "items.fields.a must name a selector or an xpath, not both",
        ),
    ],
)
def test_a_bad_items_spec_is_reported_by_name(items: object, fragment: str) -> None:
    problems = validate_payload({"items": items})
    assert any(fragment in problem for problem in problems), problems


def test_xpaths_are_accepted_wherever_a_field_or_items_names_a_selector() -> None:
    assert (
        validate_payload(
            {
                "extract": {"t": {"xpath": "//h1", "all": True}, "c": "h1"},
                "items": {"xpath": "//li", "fields": {"a": {"xpath": "@href"}, "b": "b"}},
            }
        )
        == []
    )
    (problem,) = validate_payload({"extract": {"t": {"xpath": "x" * 1025}}})
    assert problem == "extract.t.xpath must have at most 1024 characters"


def test_a_next_button_is_clicked_on_rendered_pages_only() -> None:
    click = {"selector": "button.next", "click": True, "settleSeconds": 2}
    assert validate_payload({"next": click}) == []
    assert validate_payload({"next": click, "render": False}) == [
        "next.click clicks a button on rendered pages only: remove it or set render to true"
    ]
    assert validate_payload({"next": {**click, "click": "yes", "settleSeconds": 0}}) == [
        "next.click must be true or false",
        "next.settleSeconds must be a number above 0 and at most 30",
    ]
    routed = {
        "render": False,
        "follow": {"selector": "a", "label": "list"},
        "routes": {"list": {"next": click}},
    }
    assert validate_payload(routed) == [
        "routes.list.next.click clicks a button on rendered pages only: remove it or set render "
        "to true"
    ]


def test_items_fields_are_bounded_like_extract_fields() -> None:
    fields = {f"f{number}": "b" for number in range(51)}
    (problem,) = validate_payload({"items": {"selector": "li", "fields": fields}})
    assert problem == "items.fields has 51 fields; at most 50 are allowed"


def test_an_item_field_without_a_selector_or_with_an_empty_one_reads_the_element_itself() -> None:
    from scrapeq_queue.payload import item_fields_as_extract

    assert item_fields_as_extract(
        {"a": "", "b": {"attribute": "href"}, "c": {"selector": " "}, "d": "b", "e": " :Scope"}
    ) == {
        "a": ":scope",
        "b": {"attribute": "href", "selector": ":scope"},
        "c": {"selector": ":scope"},
        "d": "b",
        "e": ":scope",
    }


def test_every_transform_is_accepted_with_valid_options() -> None:
    transforms = [
        {"type": "trim"},
        {"type": "lowercase"},
        {"type": "uppercase"},
        {"type": "number", "decimal": ",", "thousands": "."},
        {"type": "price", "decimal": ".", "thousands": "", "currency": "CAD"},
        {"type": "regex", "pattern": r"SKU-(\d+)", "group": 1},
        {"type": "absoluteUrl"},
        {"type": "join", "separator": ", "},
        {"type": "default", "value": "n/a"},
    ]
    from scrapeq_queue.payload import TRANSFORM_KEYS

    assert {transform["type"] for transform in transforms} == set(TRANSFORM_KEYS)
    payload = {
        "extract": {"a": {"selector": "b", "transforms": transforms[:9]}},
        "items": {
            "selector": "li",
            "fields": {"a": {"transforms": [{"type": "default", "value": 0}]}},
        },
    }
    assert validate_payload(payload) == []


@pytest.mark.parametrize(
    ("transforms", "fragment"),
    [
        ("trim", "extract.f.transforms must be a list of at most 10 transforms"),
        ([{"type": "trim"}] * 11, "must be a list of at most 10 transforms"),
        (["trim"], 'extract.f.transforms[0] must be an object {"type": ...} with type one of'),
        ([{"type": "eval"}], "with type one of trim, lowercase"),
        ([{"type": "trim", "pattern": "x"}], "transforms[0] (trim) has unknown keys: pattern"),
        ([{"type": "number", "decimal": ";"}], '(number) decimal must be "." or ","'),
        ([{"type": "number", "decimal": ",", "thousands": ","}], "differ from decimal"),
        ([{"type": "price", "currency": "usd"}], "currency must be an ISO 4217 code"),
        ([{"type": "regex"}], "(regex) pattern must be a regular expression of 1-1024"),
        ([{"type": "regex", "pattern": "x" * 1025}], "pattern must be a regular expression"),
        ([{"type": "regex", "pattern": r"(a)\1"}], "is not a valid regular expression"),
        ([{"type": "regex", "pattern": r"(?=a)"}], "no backreferences"),
        ([{"type": "regex", "pattern": "(a)", "group": 2}], "group must be an integer from 0 to 1"),
        ([{"type": "join", "separator": 1}], "separator must be a string of at most 64"),
        ([{"type": "default", "value": [1]}], "value must be a string of at most 1024"),
        ([{"type": "default", "value": "x" * 1025}], "value must be a string of at most 1024"),
    ],
)
def test_a_bad_transform_is_reported_by_field_position_and_kind(
    transforms: object, fragment: str
) -> None:
    problems = validate_payload({"extract": {"f": {"selector": "b", "transforms": transforms}}})
    assert any(fragment in problem for problem in problems), problems


def test_a_bad_item_field_transform_is_reported_under_items() -> None:
    (problem,) = validate_payload(
        {"items": {"selector": "li", "fields": {"f": {"transforms": [{"type": "nope"}]}}}}
    )
    assert problem.startswith("items.fields.f.transforms[0] must be an object")


@pytest.mark.parametrize("value", [True, False, ["json-ld"], ["opengraph", "microdata", "json-ld"]])
def test_structured_data_is_true_false_or_a_list_of_syntaxes(value: object) -> None:
    assert validate_payload({"structuredData": value}) == []


@pytest.mark.parametrize("value", [[], ["rdfa"], ["json-ld", "json-ld"], "json-ld", 1, None])
def test_a_bad_structured_data_option_names_the_syntaxes(value: object) -> None:
    (problem,) = validate_payload({"structuredData": value})
    assert problem == (
        "structuredData must be true, false or a list of distinct syntaxes from "
        "json-ld, microdata, opengraph"
    )


def test_every_problem_of_a_next_option_is_named_at_once() -> None:
    problems = validate_payload({"next": {"selector": "", "maxPages": 0, "page": -1, "x": 1}})
    assert problems == [
        "next has unknown keys: x",
        "next.selector must be a string of 1-1024 characters",
        "next.maxPages must be an integer from 1 to 10000",
        "next.page must be an integer from 1 to 10000",
    ]


ROUTES = {
    "detail": {
        "extract": {"name": "h1"},
        "follow": {"selector": "a.reviews", "label": "reviews", "maxDepth": 2},
    },
    "reviews": {"items": {"selector": "li", "fields": {"text": ""}}, "next": {"selector": "a"}},
}


def test_a_crawl_whose_labels_all_name_routes_is_valid() -> None:
    payload = {"follow": {"selector": "a.product", "label": "detail"}, "routes": ROUTES}
    assert validate_payload(payload) == []
    assert validate_payload({**payload, "route": "reviews"}) == []


def test_every_label_that_names_no_route_is_named_with_the_routes_there_are() -> None:
    routes = {**ROUTES, "detail": {"follow": {"selector": "a", "label": "ratings"}}}
    problems = validate_payload(
        {"follow": {"selector": "a", "label": "details"}, "routes": routes, "route": "list"}
    )
    assert problems == [
        "follow.label 'details' names no route (routes: detail, reviews)",
        "route 'list' names no route (routes: detail, reviews)",
        "routes.detail.follow.label 'ratings' names no route (routes: detail, reviews)",
    ]
    assert validate_payload({"follow": {"selector": "a", "label": "detail"}}) == [
        "follow.label 'detail' names no route (routes: none)"
    ]


def test_routes_are_bounded_and_each_route_is_checked_as_the_payload_s_own_options() -> None:
    too_many = {f"r{n}": {} for n in range(21)}
    assert validate_payload({"routes": too_many})[0] == (
        "routes has 21 labels; at most 20 are allowed"
    )
    problems = validate_payload(
        {
            "routes": {
                "bad label": {},
                "detail": {"extract": {}, "script": "x", "next": {"maxPages": 0}},
                "steps": {"steps": [{"action": "evaluate"}]},
                "empty": 3,
            }
        }
    )
    assert problems[0].startswith("routes label 'bad label' must be 1-63 letters")
    assert "routes.detail has unknown keys: script" in problems[1]
    assert "routes.detail.extract must be a non-empty object" in problems[2]
    assert "routes.detail.next.selector must be a string" in problems[3]
    assert "routes.empty must be an object of extract, items, follow, next, steps" in problems[5]
    assert any(problem.startswith("routes.steps.steps[0]") for problem in problems)
    assert validate_payload({"routes": {}}) == [
        'routes must be a non-empty object {"<label>": {"extract": ..., ...}, ...}'
    ]


def test_a_follow_rule_has_a_label_or_an_extract_not_both() -> None:
    problems = validate_payload(
        {"follow": {"selector": "a", "label": "detail", "extract": {"n": "h1"}}, "routes": ROUTES}
    )
    assert problems == [
        "follow.extract and follow.label exclude each other: the route's own extract applies "
        "to the pages of a label"
    ]


def test_a_route_s_steps_need_rendered_pages_like_the_payload_s_own() -> None:
    routes = {"detail": {"steps": [{"action": "click", "selector": "button"}]}}
    assert validate_payload({"routes": routes}) == []
    assert validate_payload({"routes": routes, "render": False}) == [
        "routes.detail.steps run on rendered pages only: remove them or set render to true"
    ]


@pytest.mark.parametrize(
    "keep",
    [[], ["html"], ["text", "html"], ["html", "text", "screenshot", "pdf"]],
)
def test_a_keep_list_of_distinct_artifacts_is_valid(keep: list[str]) -> None:
    assert validate_payload({"keep": keep}) == []


@pytest.mark.parametrize(
    "keep",
    ["html", ["html", "html"], ["html", "dom"], [1], {"html": True}, None],
)
def test_a_keep_that_is_not_a_list_of_distinct_artifacts_is_refused_with_the_names(
    keep: object,
) -> None:
    assert validate_payload({"keep": keep}) == [
        "keep must be a list of distinct artifacts from html, text, screenshot, pdf"
    ]


def test_screenshot_and_pdf_need_a_rendered_page_and_html_and_text_do_not() -> None:
    assert validate_payload({"render": False, "keep": ["html", "text"]}) == []
    assert validate_payload({"render": False, "keep": ["screenshot"]}) == [
        "keep: screenshot needs a rendered page: remove it or set render to true"
    ]
    assert validate_payload({"render": False, "keep": ["pdf", "screenshot"]}) == [
        "keep: screenshot and pdf need a rendered page: remove them or set render to true"
    ]
    assert validate_payload({"keep": ["screenshot", "pdf"]}) == []


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("sitemap", "source must be an object"),
        ({"kind": "feed"}, "source.kind must be one of sitemap, robots"),
        ({"kind": "sitemap", "lastmodAfter": "yesterday"}, "source.lastmodAfter must be"),
        ({"kind": "robots", "depth": 2}, "source has unknown keys"),
    ],
)
def test_a_bad_source_option_is_reported_with_what_it_takes(source: object, problem: str) -> None:
    problems = validate_payload({"source": source})
    assert len(problems) == 1
    assert problems[0].startswith(problem)


def test_a_crawl_key_is_a_bounded_string_and_recrawl_after_needs_one() -> None:
    assert validate_payload({"crawlKey": "prices", "recrawlAfterSeconds": 0.5}) == []
    assert validate_payload({"crawlKey": ""}) == [
        "crawlKey must be a string of 1 to 512 characters"
    ]
    assert validate_payload({"crawlKey": "k" * 513}) == [
        "crawlKey must be a string of 1 to 512 characters"
    ]
    assert validate_payload({"recrawlAfterSeconds": 60}) == [
        "recrawlAfterSeconds needs a crawlKey: the crawl whose fetches it counts"
    ]
    assert validate_payload({"crawlKey": "prices", "recrawlAfterSeconds": 0}) == [
        "recrawlAfterSeconds must be a number of seconds above 0 and at most 31,536,000"
    ]


@pytest.mark.parametrize(
    "payload",
    [
        {"render": True, "extract": {"title": "h1"}},
        {"render": "yes", "extract": {"title": 3}},
        {"timeoutSeconds": 10_000, "unknown": 1},
        {"items": {"selector": "li", "fields": {"p": {"selector": ".p", "transforms": [{}]}}}},
    ],
)
def test_a_claimed_payload_gets_the_verdict_of_a_full_check_however_often_it_is_read(
    payload: dict[str, object],
) -> None:
    """Claims read a job's payload once per row; the verdicts on its text are kept."""
    expected = validate_payload(payload)
    text = json.dumps(payload).encode()
    for _ in range(3):
        loaded = load_payload(text)
        assert loaded == payload
        assert validate_payload(loaded, loaded=True) == expected
        # The claim's way: the verdict kept under the key of the text it read.
        value, key = load_payload_and_key(text)
        assert value == payload
        problems = claimed_payload_problems(value, key)
        assert problems == expected
        problems.append("a caller's own addition")  # a copy: the kept verdict is unchanged


def test_a_payload_out_of_bounds_is_refused_however_often_it_is_read() -> None:
    text = _nested(40).encode()
    for _ in range(3):
        loaded = load_payload(text)
        assert isinstance(loaded, UnreadablePayload)
        assert "deeper than 32 levels" in validate_payload(loaded, loaded=True)[0]


def test_the_kept_verdicts_are_bounded() -> None:
    from scrapeq_queue import payload as payload_module

    for n in range(2000):
        value, key = load_payload_and_key(
            f'{{"timeoutSeconds": {n % 600 + 1}, "waitFor": "#i{n}"}}'
        )
        assert claimed_payload_problems(value, key) == []
    assert len(payload_module._IN_BOUNDS._entries) == 512
    assert len(payload_module._OPTION_VERDICTS._entries) == 512
