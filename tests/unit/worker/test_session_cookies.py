"""A session's cookie jar in the stored form, an aiohttp jar and Chrome DevTools' form
(docs/worker.md, "Sessions")."""

from __future__ import annotations

import pytest
from scrapeq_worker.session_cookies import cdp_cookie, cookie_jar, jar_cookies, merged

pytestmark = pytest.mark.timeout(10)

STORED = {
    "name": "visitor",
    "value": "v42",
    "domain": "127.0.0.2",
    "path": "/",
    "expires": -1.0,
    "secure": False,
    "httpOnly": True,
}


async def test_a_stored_jar_goes_through_an_aiohttp_jar_unchanged() -> None:
    later = {**STORED, "name": "consent", "value": "yes", "expires": 4102444800.0}
    assert sorted(jar_cookies(cookie_jar([STORED, later])), key=lambda c: c["name"]) == [
        later,
        STORED,
    ]


async def test_a_cookie_without_a_name_or_domain_is_not_kept() -> None:
    assert jar_cookies(cookie_jar([{"name": "", "domain": "a.test"}, {"name": "x"}])) == []


def test_a_browser_s_cookies_are_laid_over_the_jar_one_per_name_domain_and_path() -> None:
    fresh = {**STORED, "value": "v43", "size": 11, "priority": "Medium"}
    other = {**STORED, "domain": "other.test"}
    assert merged([STORED, other], [fresh]) == [{**STORED, "value": "v43"}, other]


def test_a_session_cookie_is_set_in_the_browser_without_an_expiry() -> None:
    assert "expires" not in cdp_cookie(STORED)
    assert cdp_cookie({**STORED, "expires": 4102444800.0})["expires"] == 4102444800.0
