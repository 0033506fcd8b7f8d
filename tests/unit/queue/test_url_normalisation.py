"""Two spellings of the same page share one dedup key; different pages do not."""

from __future__ import annotations

import pytest
from scrapeq_queue import InvalidJob, normalise_url


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
