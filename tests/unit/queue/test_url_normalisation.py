"""Two spellings of the same page share one dedup key; different pages do not."""

from __future__ import annotations

import pytest
from scrapeq_queue import InvalidJob, normalise_url
from scrapeq_queue.urls import target_problem


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("HTTPS://Shop.Example.com/a?b=1#top", "https://shop.example.com/a?b=1"),
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("  https://example.com/x  ", "https://example.com/x"),
        ("http://[::1]:8080/p", "http://[::1]:8080/p"),
    ],
)
def test_equivalent_spellings_normalise_to_one_key(given: str, expected: str) -> None:
    assert normalise_url(given) == expected


def test_path_case_and_query_order_are_kept_because_sites_may_care() -> None:
    assert normalise_url("https://e.com/A?b=2&a=1") == "https://e.com/A?b=2&a=1"
    assert normalise_url("https://e.com/A") != normalise_url("https://e.com/a")


def test_a_blank_url_is_rejected() -> None:
    with pytest.raises(InvalidJob):
        normalise_url("   ")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[::1/", "cannot be parsed: Invalid IPv6 URL"),
        ("http://shop.example:0/", "has port 0"),
        ("http://shop.example:25/", "uses port 25, another protocol's port"),
        ("https://shop.example:6667/", "uses port 6667"),
        ("http://shop.example:99999/", "Port out of range"),
        ("http://shop.example:eighty/", "Port could not be cast"),
        ("http:///path", "has no host"),
        ("https://shop..example/", "is not a valid DNS name"),
        ("https://" + "x" * 64 + ".example/", "is not a valid DNS name"),
        ("https://\u2024.example/", "is not a valid DNS name"),
        ("https://shop.example/a\r\nb", "contains control characters"),
        ("https://shop.example/" + "a" * 9000, "at most 8192 are allowed"),
    ],
)
def test_a_url_no_engine_can_fetch_is_named_with_its_problem(url: str, fragment: str) -> None:
    problem = target_problem(url)
    assert problem is not None
    assert fragment in problem
    assert len(problem) < 400


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/",
        "https://shop.example./fully-qualified",
        "https://bücher.example/",
        "http://127.0.0.2:8080/x",
        "http://[fe80::1]/",
        "https://shop.example:65535/",
        "file:///etc/passwd",  # the network guard's to refuse (blocked_scheme)
    ],
)
def test_a_url_an_engine_may_try_has_no_problem(url: str) -> None:
    assert target_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://site12.test/12345",
        "HTTPS://Shop.Example.COM/a?b=1#top",
        "http://127.0.0.1/",
        "http://1.2.3/",
        "http://0x7f.1/",
        "http://xn--e-0ga.example/",
        "http://shop.example./",
        "http://" + "a" * 63 + ".example/",
        "http://" + "a" * 64 + ".example/",
        "http://shop..example/",
        "http://.example/",
        "http://shop.example:25/",
        "http://[::1]/",
        "http://exämple.example/",
        "https://shop.example/\x7f",
        "https://shop.example/a b",
        "http:///path",
        "ftp://shop.example/",
        "http://user@shop.example/",
    ],
)
def test_the_plain_url_shortcut_gives_the_answer_the_full_parse_gives(url: str) -> None:
    from scrapeq_queue import urls

    assert target_problem(url) == urls._parsed_target_problem(url.strip(), url)
