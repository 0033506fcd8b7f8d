"""A User-Agent's product token: the name robots.txt groups are matched against."""

from __future__ import annotations

import pytest
from scrapeq_worker.user_agent import DEFAULT_USER_AGENT, product_token, user_agent

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("agent", "token"),
    [
        (DEFAULT_USER_AGENT, "scrapeq"),
        (user_agent("https://crawler.example/about"), "scrapeq"),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot"),
        ("ExampleBot/1.0 (+ops@example)", "ExampleBot"),
        ("acme-crawler", "acme-crawler"),
        (None, "scrapeq"),
        ("", "scrapeq"),
        ("/// nothing readable", "scrapeq"),
    ],
)
def test_the_product_token_of_a_user_agent(agent: str | None, token: str) -> None:
    assert product_token(agent) == token
