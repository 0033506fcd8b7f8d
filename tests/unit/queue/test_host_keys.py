"""Host keys group rows by the site a person means: the registrable domain."""

from __future__ import annotations

import pytest
from scrapeq_queue import host_key_of, validate_payload


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://www.example.co.uk/a", "example.co.uk"),
        ("https://shop.example.co.uk:8443/b?c", "example.co.uk"),
        ("http://EXAMPLE.com./", "example.com"),
        ("https://alice.github.io/", "alice.github.io"),
        ("https://bob.github.io/", "bob.github.io"),
        ("http://127.0.0.3:8080/x", "127.0.0.3"),
        ("http://[::1]/x", "::1"),
        ("http://localhost:9/", "localhost"),
        ("https://co.uk/", "co.uk"),
        ("not a url", ""),
    ],
)
def test_the_host_key_is_the_registrable_domain_or_the_host_itself(url: str, key: str) -> None:
    assert host_key_of(url) == key


def test_politeness_in_a_payload_is_validated() -> None:
    assert (
        validate_payload(
            {
                "politeness": {
                    "maxConcurrentPerSite": 2,
                    "delaySeconds": 0.5,
                    "respectRobotsTxt": False,
                }
            }
        )
        == []
    )
    assert validate_payload(
        {"politeness": {"maxConcurrentPerSite": 0, "delaySeconds": -1, "respectRobotsTxt": "no"}}
    ) == [
        "politeness.maxConcurrentPerSite must be an integer from 1 to 1000",
        "politeness.delaySeconds must be a number from 0 to 3600",
        "politeness.respectRobotsTxt must be true or false",
    ]
    assert validate_payload({"politeness": {"perHost": 1}}) == [
        "politeness has unknown keys: perHost"
    ]


def test_a_row_naming_a_site_s_limit_under_its_key_before_0_1_0_is_told_the_key_now() -> None:
    assert validate_payload({"politeness": {"maxConcurrentPerHost": 4}}) == [
        "politeness.maxConcurrentPerHost is now politeness.maxConcurrentPerSite"
    ]
