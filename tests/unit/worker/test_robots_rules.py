"""robots.txt rules: what each answer means, one fetch per origin and time-to-live."""

from __future__ import annotations

import asyncio

import pytest
from scrapeq_worker.errors import PermanentFailure, RetryLater
from scrapeq_worker.robots import RobotsRules, respects_robots

pytestmark = pytest.mark.timeout(10)

ROBOTS = "User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"


class FakeSite:
    def __init__(self, status: int = 200, text: str = ROBOTS, error: Exception | None = None):
        self.status, self.text, self.error = status, text, error
        self.requests: list[str] = []

    async def fetch(self, url: str) -> tuple[int, str]:
        self.requests.append(url)
        await asyncio.sleep(0.01)
        if self.error is not None:
            raise self.error
        return self.status, self.text


async def test_disallowed_urls_fail_for_good_and_allowed_ones_pass_with_the_crawl_delay() -> None:
    site = FakeSite()
    rules = RobotsRules(site.fetch)
    with pytest.raises(PermanentFailure) as failure:
        await rules.check("https://shop.test/private/1")
    assert failure.value.reason == "robots_disallowed"
    verdict = await rules.check("https://shop.test/public")
    assert verdict.crawl_delay_seconds == 2.0
    assert site.requests == ["https://shop.test/robots.txt"]


async def test_concurrent_jobs_of_one_origin_share_a_single_fetch_until_the_ttl_ends() -> None:
    now = [0.0]
    site = FakeSite()
    rules = RobotsRules(site.fetch, ttl_seconds=100, clock=lambda: now[0])
    verdicts = await asyncio.gather(*(rules.check(f"https://shop.test/{n}") for n in range(10)))
    assert [verdict.fresh for verdict in verdicts].count(True) == 1
    assert len(site.requests) == 1
    now[0] = 101
    await rules.check("https://shop.test/again")
    assert len(site.requests) == 2


async def test_a_missing_robots_txt_allows_everything() -> None:
    rules = RobotsRules(FakeSite(status=404, text="Disallow: /").fetch)
    assert (await rules.check("https://shop.test/private")).crawl_delay_seconds is None


@pytest.mark.parametrize(
    "site",
    [FakeSite(status=503), FakeSite(error=RetryLater("timed out", reason="timeout"))],
    ids=["server error", "timeout"],
)
async def test_an_unreadable_robots_txt_disallows_everything_for_a_while(site: FakeSite) -> None:
    now = [0.0]
    rules = RobotsRules(site.fetch, unavailable_ttl_seconds=60, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(RetryLater) as retry:
            await rules.check("https://down.test/page")
        assert retry.value.reason == "robots_unavailable"
    assert len(site.requests) == 1
    now[0] = 61
    site.status, site.error = 200, None
    await rules.check("https://down.test/page")
    assert len(site.requests) == 2


def test_a_row_can_turn_robots_txt_off_or_on_whatever_the_pool_says() -> None:
    assert respects_robots({}, True)
    assert not respects_robots({}, False)
    assert not respects_robots({"politeness": {"respectRobotsTxt": False}}, True)
    assert respects_robots({"politeness": {"respectRobotsTxt": True}}, False)
