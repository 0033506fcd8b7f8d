"""Site policies hold with real `scrapeq worker` processes: three workers (8 page slots each)
claim from one PostgreSQL queue, and the local site counts the requests it has in flight, per
host and per job. Pages are `render: false`: limits live in the claim, the same for both engines.
A namespace a policy refuses never reaches the site, and a policy's robots.txt rule wins over
a job's looser one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_queue.rows import Owner

from tests.waiting import eventually

from .conftest import Connection, job_row
from .polite_site import PoliteSite, Robots, running_polite_site
from .test_host_politeness import A, B, C, D, all_completed, three_workers

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]


@pytest.fixture
def polite_site() -> Iterator[PoliteSite]:
    yield from running_polite_site()


async def enqueue_job(
    connection: Connection, name: str, urls: list[str], **politeness: Any
) -> list[int]:
    payload: dict[str, Any] = {"render": False}
    if politeness:
        payload["politeness"] = politeness
    await queue.enqueue_for_owner(
        connection,
        Owner(uid=f"uid-{name}", namespace="team", name=name),
        urls,
        payload=payload,
        max_retries=5,
    )
    cursor = await connection.execute(
        "SELECT id FROM scraping_jobs WHERE owner_uid = %s ORDER BY id", (f"uid-{name}",)
    )
    return [row[0] for row in await cursor.fetchall()]


async def test_a_policy_of_one_request_holds_while_a_scrapejob_asks_for_fifty(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="gentle", patterns=(A,), max_concurrent_per_site=1)
    )
    greedy = await enqueue_job(
        connection,
        "greedy",
        [polite_site.url(A, f"/page/{n}?ms=100") for n in range(16)],
        maxConcurrentPerSite=50,
    )
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, greedy, 90, "the greedy job's rows")
    assert len(polite_site.arrivals(A, "/page/")) == 16
    assert polite_site.records[A].max_in_flight == 1


async def test_a_job_asking_for_one_gets_one_while_another_job_gets_the_policys_four(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    # Four is above the workers' default (2 per site): the policy, not the pool, sets it.
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="shops", patterns=(B,), max_concurrent_per_site=4)
    )
    careful = await enqueue_job(
        connection,
        "careful",
        [polite_site.url(B, f"/page/c{n}?ms=200&group=careful") for n in range(12)],
        maxConcurrentPerSite=1,
    )
    plain = await enqueue_job(
        connection,
        "plain",
        [polite_site.url(B, f"/page/p{n}?ms=200&group=plain") for n in range(36)],
    )
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, plain, 90, "the plain job's rows")
        await all_completed(connection, careful, 90, "the careful job's rows")
    record = polite_site.records[B]
    assert record.group_max_in_flight["careful"] == 1
    # The careful job holds at most one of the site's four slots: the other job had the rest.
    assert record.group_max_in_flight["plain"] >= 3
    assert record.max_in_flight == 4
    state = (await queue.site_states(connection, [B]))[B]
    assert state.max_in_flight == 4


async def test_a_row_of_a_site_its_namespace_may_not_crawl_fails_for_good_and_is_never_fetched(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="no-team", patterns=(C,), denied_namespaces=("team",))
    )
    refused = await enqueue_job(connection, "refused", [polite_site.url(C, "/page/1")])
    allowed = await enqueue_job(connection, "allowed", [polite_site.url(D, "/page/1")])
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, allowed, 60, "the allowed site's row")

        async def refused_failed() -> bool:
            row = await job_row(connection, refused[0])
            return row.status == "failed"

        await eventually(refused_failed, within=30, what="the refused row failed")
    row = await job_row(connection, refused[0])
    assert row.last_reason == "site_not_allowed"
    assert polite_site.arrivals(C) == []


async def test_a_policy_that_obeys_robots_txt_wins_over_a_job_that_does_not(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    polite_site.robots[D] = Robots(200, "User-agent: *\nDisallow: /page/private\n")
    await queue.apply_site_policy(
        connection, queue.SitePolicy(name="robots", patterns=(D,), respect_robots_txt=True)
    )
    [forbidden] = await enqueue_job(
        connection, "careless", [polite_site.url(D, "/page/private/1")], respectRobotsTxt=False
    )
    async with three_workers(database_url, tmp_path):

        async def failed() -> bool:
            return (await job_row(connection, forbidden)).status == "failed"

        await eventually(failed, within=30, what="the disallowed row failed")
    assert (await job_row(connection, forbidden)).last_reason == "robots_disallowed"
    assert polite_site.arrivals(D, "/page/") == []


async def test_a_site_hears_the_user_agent_and_contact_its_policy_sets(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    await queue.apply_site_policy(
        connection,
        queue.SitePolicy(name="agent", patterns=(A,), user_agent="ExampleBot/1.0 (+ops@example)"),
    )
    await queue.apply_site_policy(
        connection,
        queue.SitePolicy(name="contact", patterns=(B,), contact="https://crawler.example/about"),
    )
    ids = await enqueue_job(
        connection,
        "agents",
        [
            polite_site.url(A, "/page/a"),
            polite_site.url(B, "/page/b"),
            polite_site.url(C, "/page/c"),
        ],
    )
    # The job's own User-Agent gives way where a policy sets one.
    await connection.execute(
        "UPDATE scraping_jobs SET payload = payload || %s::jsonb WHERE id = ANY(%s)",
        ('{"headers": {"user-agent": "JobAgent/9"}}', ids),
    )
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, ids, 60, "the rows of the three sites")
    assert polite_site.records[A].user_agents == ["ExampleBot/1.0 (+ops@example)"]
    [on_b] = polite_site.records[B].user_agents
    assert on_b.startswith("Mozilla/5.0 (compatible; scrapeq/")
    assert on_b.endswith("; +https://crawler.example/about)")
    assert polite_site.records[C].user_agents == ["JobAgent/9"]


async def test_robots_txt_is_read_and_matched_with_the_user_agent_a_policy_sets(
    polite_site: PoliteSite, connection: Connection, database_url: str, tmp_path: Path
) -> None:
    # The group of the policy's product token shuts /page/private; every other crawler may go.
    polite_site.robots[D] = Robots(
        200, "User-agent: ExampleBot\nDisallow: /page/private\n\nUser-agent: *\nDisallow:\n"
    )
    await queue.apply_site_policy(
        connection,
        queue.SitePolicy(name="agent", patterns=(D,), user_agent="ExampleBot/1.0 (+ops@example)"),
    )
    [forbidden, allowed] = await enqueue_job(
        connection,
        "agent",
        [polite_site.url(D, "/page/private/1"), polite_site.url(D, "/page/open")],
    )
    async with three_workers(database_url, tmp_path):
        await all_completed(connection, [allowed], 60, "the allowed row")

        async def forbidden_failed() -> bool:
            return (await job_row(connection, forbidden)).status == "failed"

        await eventually(forbidden_failed, within=30, what="the disallowed row failed")
    assert (await job_row(connection, forbidden)).last_reason == "robots_disallowed"
    assert polite_site.arrivals(D, "/page/private") == []
    assert polite_site.records[D].robots_user_agents == ["ExampleBot/1.0 (+ops@example)"]
