"""Result size caps, what each HTTP status means for a job, and the defaults a payload gets."""

from __future__ import annotations

import email.utils
import json
import time

import pytest
from scrapeq_worker.errors import PageBlocked, PermanentFailure, RetryLater
from scrapeq_worker.extraction import TRUNCATION_MARKER, cap_result
from scrapeq_worker.http_status import (
    MAX_RETRY_AFTER_SECONDS,
    check_status,
    is_html,
    navigation_failure,
    parse_retry_after,
)
from scrapeq_worker.job_options import options_from_payload


def size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_a_small_result_is_left_alone() -> None:
    result = {"url": "http://a.test/", "fields": {"name": "x"}, "links": []}
    assert cap_result(dict(result), 1000) == result


def test_an_oversized_result_is_cut_to_the_limit_and_says_what_was_cut() -> None:
    result = {
        "url": "http://a.test/",
        "fields": {"body": "x" * 300_000, "small": "kept"},
        "links": [f"http://a.test/{n}" for n in range(5000)],
    }
    capped = cap_result(result, 64 * 1024)
    assert size(capped) <= 64 * 1024
    assert capped["fields"]["small"] == "kept"
    assert capped["fields"]["body"].endswith(TRUNCATION_MARKER)
    assert "fields.body" in capped["truncated"]


def test_a_result_that_cannot_be_cut_small_enough_fails_clearly() -> None:
    with pytest.raises(PermanentFailure) as failure:
        cap_result({"url": "http://a.test/" + "x" * 5000, "fields": {}}, 1000)
    assert failure.value.reason == "result_too_large"


def test_many_large_fields_share_the_limit_fairly_in_one_pass() -> None:
    result = {
        "url": "http://a.test/",
        "fields": {f"f{n}": "x" * 1000 for n in range(2000)} | {"small": "kept"},
        "links": [],
    }
    started = time.monotonic()
    capped = cap_result(result, 256 * 1024)
    took = time.monotonic() - started
    assert size(capped) <= 256 * 1024
    assert capped["fields"]["small"] == "kept"
    cut = [value for name, value in capped["fields"].items() if name != "small"]
    assert all(value.endswith(TRUNCATION_MARKER) for value in cut)
    assert len({len(value) for value in cut}) == 1  # the same share for each
    assert capped["truncated"] == [f"fields.f{n}" for n in range(2000)]
    assert took < 2  # the 200 passes this replaced took 25 s here, and then gave up


def test_ten_thousand_large_fields_fail_as_too_large_in_seconds_not_minutes() -> None:
    """Their names alone leave no room for values: result_too_large, found in one pass (the
    repeated passes this replaced took over two minutes on the same input)."""
    result = {"url": "http://a.test/", "fields": {f"f{n}": "x" * 1000 for n in range(10_000)}}
    started = time.monotonic()
    with pytest.raises(PermanentFailure) as failure:
        cap_result(result, 256 * 1024)
    assert failure.value.reason == "result_too_large"
    assert time.monotonic() - started < 5


def test_a_list_whose_first_item_is_larger_than_its_share_keeps_that_item_cut() -> None:
    result = {"url": "http://a.test/", "fields": {"all": ["y" * 500_000, "z" * 10]}}
    capped = cap_result(result, 10_000)
    [first] = capped["fields"]["all"]
    assert first.startswith("y" * 9000)
    assert first.endswith(TRUNCATION_MARKER)
    assert size(capped) <= 10_000


def test_names_cut_while_extracting_stay_listed_first() -> None:
    small = {"url": "http://a.test/", "fields": {"a": "x"}, "truncated": ["fields.a"]}
    assert cap_result(dict(small), 1000) == small
    big = {
        "url": "http://a.test/",
        "fields": {"a": "x", "b": "y" * 5000},
        "truncated": ["fields.a"],
    }
    assert cap_result(big, 1000)["truncated"] == ["fields.a", "fields.b"]


@pytest.mark.parametrize(("status", "reason"), [(404, "http_4xx"), (410, "http_4xx")])
def test_client_errors_are_permanent(status: int, reason: str) -> None:
    with pytest.raises(PermanentFailure) as failure:
        check_status(status, {}, url="http://a.test/")
    assert failure.value.reason == reason


@pytest.mark.parametrize(
    ("status", "reason"),
    [(408, "http_408"), (429, "blocked"), (403, "blocked"), (500, "http_5xx"), (503, "http_5xx")],
)
def test_timeouts_rate_limits_and_server_errors_retry(status: int, reason: str) -> None:
    with pytest.raises(RetryLater) as retry:
        check_status(status, {}, url="http://a.test/")
    assert retry.value.reason == reason


@pytest.mark.parametrize("status", [403, 429])
def test_a_refusing_status_is_a_blocked_page_recognised_by_its_status(status: int) -> None:
    with pytest.raises(PageBlocked) as blocked:
        check_status(status, {}, url="http://a.test/")
    assert (blocked.value.reason, blocked.value.rule) == ("blocked", "status")


def test_retry_after_is_honoured_for_429_and_503() -> None:
    with pytest.raises(RetryLater) as retry:
        check_status(429, {"retry-after": "120"}, url="http://a.test/")
    assert retry.value.delay_seconds == 120


def test_success_and_redirect_statuses_pass() -> None:
    for status in (200, 204, 304, None):
        check_status(status, {}, url="http://a.test/")


def test_retry_after_reads_seconds_and_http_dates_and_clamps() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("30") == 30
    assert parse_retry_after(email.utils.formatdate(now + 90, usegmt=True), now=now) == 90
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0
    assert parse_retry_after("999999") == MAX_RETRY_AFTER_SECONDS
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_html_is_recognised_by_media_type() -> None:
    assert is_html("text/html; charset=utf-8")
    assert is_html("application/xhtml+xml")
    assert is_html(None)
    assert not is_html("application/pdf")
    assert not is_html("image/png")


@pytest.mark.parametrize(
    ("payload", "wait_until"),
    [
        (None, "networkidle0"),
        ({}, "networkidle0"),
        ({"render": True, "extract": {"t": "h1"}}, "networkidle0"),
        ({"waitFor": ".price"}, "load"),
        ({"waitUntil": "domcontentloaded"}, "domcontentloaded"),
        ({"waitUntil": "load", "waitFor": ".price"}, "load"),
    ],
)
def test_a_row_that_says_nothing_about_waiting_waits_for_network_idle_like_the_classic_worker(
    payload: object, wait_until: str
) -> None:
    assert options_from_payload(payload, default_timeout_seconds=30).wait_until == wait_until


@pytest.mark.parametrize(
    ("error_text", "kind", "reason"),
    [
        (
            "net::ERR_TOO_MANY_REDIRECTS at http://a.example/",
            PermanentFailure,
            "too_many_redirects",
        ),
        ("net::ERR_INVALID_URL at http://a.example/", PermanentFailure, "bad_url"),
        ("net::ERR_CONNECTION_REFUSED at http://a.example/", RetryLater, "network_error"),
    ],
)
def test_a_failed_navigation_gets_the_kind_and_reason_the_plain_http_engine_gives(
    error_text: str, kind: type, reason: str
) -> None:
    error = navigation_failure("http://a.example/", error_text)
    assert type(error) is kind
    assert error.reason == reason


def test_fields_the_extraction_cut_are_named_even_when_the_result_fits() -> None:
    result = {
        "url": "https://example.com/",
        "fields": {
            "whole": "text",
            "cut": "tex" + TRUNCATION_MARKER,
            "spent": TRUNCATION_MARKER,
            "items": ["a", TRUNCATION_MARKER],
        },
        "truncated": ["fields.cut"],
    }
    capped = cap_result(result, 10_000)
    assert capped["truncated"] == ["fields.cut", "fields.spent", "fields.items"]
    assert capped["fields"]["whole"] == "text"
