"""The payload options a producer may set, and how bad ones are reported."""

from __future__ import annotations

import pytest
from scrapeq_queue import PAYLOAD_OPTIONS, validate_payload
from scrapeq_queue.sealed_credentials import Credentials, SealingKeys


def test_an_empty_or_null_payload_is_valid() -> None:
    assert validate_payload({}) == []
    assert validate_payload(None) == []


def test_every_documented_option_is_accepted_with_a_valid_value() -> None:
    payload = {
        "render": False,
        "waitFor": ".product",
        "waitUntil": "networkidle2",
        "timeoutSeconds": 45,
        "extract": {"title": "h1", "price": {"selector": ".price", "attribute": "data-v"}},
        "follow": {
            "selector": "a.product",
            "maxDepth": 1,
            "maxPages": 500,
            "sameDomain": False,
            "include": ["/product/"],
            "exclude": [r"\?sort="],
            "extract": {"name": "h1"},
        },
        "headers": {"Accept-Language": "en"},
        "blockResources": ["image", "font", "media", "stylesheet"],
        "sealed": SealingKeys.from_text(SealingKeys.generate()).seal(
            Credentials(origins=("https://shop.example:443",), headers={"X-Token": "t"})
        ),
        "politeness": {"maxConcurrentPerHost": 4, "delaySeconds": 1.5, "respectRobotsTxt": True},
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
        ({"waitFor": ""}, "waitFor must be a non-empty CSS selector"),
        ({"waitUntil": "idle"}, "waitUntil must be one of"),
        ({"timeoutSeconds": 0}, "timeoutSeconds must be a number above 0"),
        ({"timeoutSeconds": True}, "timeoutSeconds must be a number above 0"),
        ({"timeoutSeconds": 10_000}, "at most 600"),
        ({"extract": {}}, "extract must be a non-empty object"),
        ({"extract": {"title": {"css": "h1"}}}, "extract.title has unknown keys: css"),
        ({"extract": {"title": 3}}, "extract.title must be a selector string"),
        ({"follow": {"maxDepth": 1}}, "follow.selector must be a non-empty string"),
        ({"follow": {"selector": "a", "maxPages": 0}}, "follow.maxPages must be an integer >= 1"),
        ({"follow": {"selector": "a", "sameDomain": "yes"}}, "follow.sameDomain must be true"),
        ({"follow": {"selector": "a", "include": "/p/"}}, "follow.include must be a list"),
        (
            {"follow": {"selector": "a", "exclude": ["(unclosed"]}},
            "follow.exclude[0] '(unclosed' is not a valid regular expression",
        ),
        ({"follow": {"selector": "a", "extract": {"n": 3}}}, "follow.extract.n must be a selector"),
        ({"headers": {"X": 1}}, "headers must be an object"),
        ({"blockResources": "image"}, "blockResources must be a list of distinct kinds"),
        ({"blockResources": ["image", "script"]}, "from image, font, media, stylesheet"),
        ({"blockResources": ["font", "font"]}, "blockResources must be a list of distinct"),
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
