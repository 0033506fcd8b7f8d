"""Site policies against a real PostgreSQL: a site's limit for everyone is its policy's (else
the pool's default) and no producer raises it; a job's own limit and delay bind only its rows
and can only be stricter; the most specific pattern wins; the backlog count follows the
same rule; and a namespace a policy refuses is named with that policy."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import inspection
from scrapeq_queue.rows import Owner

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

FOUR_PER_SITE = queue.SitePoliteness(max_concurrent_per_site=4)


async def claim(connection: Connection, worker: str = "w", limit: int = 50) -> list[Any]:
    return await queue.claim_jobs(
        connection,
        worker_id=worker,
        queues=["default"],
        limit=limit,
        lease_seconds=30,
        politeness=FOUR_PER_SITE,
    )


def owner(name: str) -> Owner:
    return Owner(uid=f"uid-{name}", namespace="team", name=name)


async def enqueue_job(
    connection: Connection, name: str, urls: list[str], limit: int | None = None, **more: Any
) -> None:
    politeness: dict[str, Any] = dict(more)
    if limit is not None:
        politeness["maxConcurrentPerSite"] = limit
    await queue.enqueue_for_owner(
        connection, owner(name), urls, payload={"politeness": politeness} if politeness else {}
    )


async def claim_from_many_connections(database_url: str, claimers: int = 6) -> list[Any]:
    """Rounds of claims from `claimers` connections at once until a round claims nothing: every
    row the limits let start is then in flight."""

    async def one_claimer(name: str) -> list[Any]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return await claim(conn, name, limit=20)

    claimed: list[Any] = []
    for round_number in range(10):
        names = [f"claimer-{round_number}-{n}" for n in range(claimers)]
        taken = [job for jobs in await asyncio.gather(*map(one_claimer, names)) for job in jobs]
        if not taken:
            return claimed
        claimed.extend(taken)
    raise AssertionError(f"claims still took rows after 10 rounds: {len(claimed)} in flight")


def per_owner(jobs: list[Any]) -> dict[str | None, int]:
    counts: dict[str | None, int] = {}
    for job in jobs:
        counts[job.owner_uid] = counts.get(job.owner_uid, 0) + 1
    return counts


async def test_a_policy_of_one_request_holds_while_a_job_asks_for_fifty(
    async_connection: Connection, database_url: str
) -> None:
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="gentle", patterns=("shop.test",), max_concurrent_per_site=1),
    )
    await enqueue_job(
        async_connection, "greedy", [f"https://shop.test/{n}" for n in range(100)], limit=50
    )

    claimed = await claim_from_many_connections(database_url)

    assert len(claimed) == 1
    assert (await queue.site_states(async_connection, ["shop.test"]))["shop.test"].in_flight == 1
    assert await inspection.startable_due(async_connection, default_max_per_site=4) == {
        "default": 0
    }


async def test_a_job_asking_for_one_gets_one_and_another_job_still_gets_the_policys_four(
    async_connection: Connection, database_url: str
) -> None:
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="shops", patterns=("shop.test",), max_concurrent_per_site=4),
    )
    # The careful job's rows come first in the site's order: the other job's rows are found
    # behind them.
    await enqueue_job(
        async_connection, "careful", [f"https://shop.test/c{n}" for n in range(20)], limit=1
    )
    await enqueue_job(async_connection, "plain", [f"https://shop.test/p{n}" for n in range(20)])

    claimed = await claim_from_many_connections(database_url)

    assert per_owner(claimed) == {"uid-careful": 1, "uid-plain": 3}
    [careful] = [job for job in claimed if job.owner_uid == "uid-careful"]
    await queue.complete_job(
        async_connection, careful.id, careful.attempt, result={}, duration_seconds=0
    )
    again = await claim_from_many_connections(database_url)
    assert per_owner(again) == {"uid-careful": 1}
    # Nothing a job named moved the site's limit.
    state = (await queue.site_states(async_connection, ["shop.test"]))["shop.test"]
    assert (state.max_in_flight, state.in_flight) == (4, 4)


async def test_a_job_alone_on_a_site_gets_its_own_limit_and_without_a_policy_the_pools(
    async_connection: Connection, database_url: str
) -> None:
    await enqueue_job(
        async_connection, "two", [f"https://two.test/{n}" for n in range(10)], limit=2
    )
    await enqueue_job(
        async_connection, "wide", [f"https://wide.test/{n}" for n in range(10)], limit=50
    )
    claimed = await claim_from_many_connections(database_url)
    assert per_owner(claimed) == {"uid-two": 2, "uid-wide": 4}
    assert await inspection.startable_due(async_connection, default_max_per_site=4) == {
        "default": 0
    }


async def test_rows_without_an_owner_share_one_group_per_site_with_the_limit_they_named(
    async_connection: Connection, database_url: str
) -> None:
    await queue.enqueue_many(
        async_connection,
        [f"https://classic.test/{n}" for n in range(10)],
        payload={"politeness": {"maxConcurrentPerSite": 1}},
    )
    await queue.enqueue_many(async_connection, [f"https://classic.test/x{n}" for n in range(10)])
    await enqueue_job(async_connection, "job", [f"https://classic.test/j{n}" for n in range(10)])

    claimed = await claim_from_many_connections(database_url)

    assert per_owner(claimed) == {None: 1, "uid-job": 3}


async def test_a_jobs_own_delay_spaces_only_its_own_rows(
    async_connection: Connection, database_url: str
) -> None:
    await enqueue_job(
        async_connection,
        "slow",
        [f"https://paced.test/s{n}" for n in range(5)],
        delaySeconds=60,
    )
    await enqueue_job(async_connection, "fast", [f"https://paced.test/f{n}" for n in range(5)])

    first = await claim_from_many_connections(database_url)
    assert per_owner(first) == {"uid-slow": 1, "uid-fast": 3}
    [slow] = [job for job in first if job.owner_uid == "uid-slow"]
    await queue.complete_job(async_connection, slow.id, slow.attempt, result={}, duration_seconds=0)
    fast = [job for job in first if job.owner_uid == "uid-fast"]
    for job in fast:
        await queue.complete_job(
            async_connection, job.id, job.attempt, result={}, duration_seconds=0
        )

    # The slow job's next row waits for its delay; the other job's rows do not.
    second = await claim_from_many_connections(database_url)
    assert per_owner(second) == {"uid-fast": 2}
    assert await inspection.startable_due(async_connection, default_max_per_site=4) == {
        "default": 0
    }


async def test_the_most_specific_pattern_wins_and_a_change_reaches_sites_already_known(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="everyone", patterns=("*",), max_concurrent_per_site=3),
    )
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(
            name="pages", patterns=("*.pages.test",), max_concurrent_per_site=1, delay_seconds=2
        ),
    )
    sites = ["other.test", "pages.test", "alice.pages.test", "exact.pages.test"]
    # A plain INSERT keys a row by its host name (no public-suffix list in SQL).
    for site in sites:
        await async_connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, 'classic')",
            (f"https://{site}/",),
        )
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="exact", patterns=("exact.pages.test",), max_concurrent_per_site=5),
    )

    states = await queue.site_states(async_connection, sites)
    assert {site: (states[site].max_in_flight, states[site].delay_seconds) for site in sites} == {
        "other.test": (3, None),
        "pages.test": (1, 2.0),
        "alice.pages.test": (1, 2.0),
        "exact.pages.test": (5, None),
    }
    rules = await queue.site_rules(async_connection, [*sites, "new.test"])
    assert {site: rule.pattern for site, rule in rules.items()} == {
        "other.test": "*",
        "pages.test": "*.pages.test",
        "alice.pages.test": "*.pages.test",
        "exact.pages.test": "exact.pages.test",
        "new.test": "*",
    }

    changed = await queue.delete_site_policy(async_connection, "everyone")
    assert changed == 1
    state = (await queue.site_states(async_connection, ["other.test"]))["other.test"]
    assert state.max_in_flight is None


async def test_retaining_the_listed_policies_removes_the_others_but_not_one_written_since(
    async_connection: Connection,
) -> None:
    for name in ("listed", "deleted"):
        await queue.apply_site_policy(
            async_connection,
            queue.SitePolicy(name=name, patterns=(f"{name}.test",), max_concurrent_per_site=1),
        )
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, 'classic')",
        ("https://deleted.test/",),
    )
    listed_at = await queue.database_now(async_connection)
    # Created while the cluster was being listed: not in the listing, but newer than it.
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="new", patterns=("new.test",), max_concurrent_per_site=1),
    )

    removed = await queue.retain_site_policies(async_connection, ["listed"], listed_at=listed_at)

    assert removed == ["deleted"]
    rules = await queue.site_rules(async_connection, ["listed.test", "deleted.test", "new.test"])
    assert {site: rule.policies for site, rule in rules.items()} == {
        "listed.test": ("listed",),
        "deleted.test": (),
        "new.test": ("new",),
    }
    state = (await queue.site_states(async_connection, ["deleted.test"]))["deleted.test"]
    assert state.max_in_flight is None


async def test_policies_naming_one_pattern_combine_to_the_strictest_of_each_setting(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(
            name="a",
            patterns=("both.test",),
            max_concurrent_per_site=2,
            respect_robots_txt=False,
            user_agent="scrapeq-a",
        ),
    )
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(
            name="b",
            patterns=("both.test",),
            max_concurrent_per_site=6,
            delay_seconds=1.5,
            respect_robots_txt=True,
            contact="ops@example.org",
        ),
    )
    [rule] = (await queue.site_rules(async_connection, ["both.test"])).values()
    assert rule == queue.SiteRule(
        host_key="both.test",
        pattern="both.test",
        policies=("a", "b"),
        max_concurrent_per_site=2,
        delay_seconds=1.5,
        respect_robots_txt=True,
        user_agent="scrapeq-a",
        contact="ops@example.org",
    )


async def test_a_namespace_a_policy_refuses_is_named_with_the_policy(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(name="no-bank", patterns=("bank.test",), denied_namespaces=("team",)),
    )
    await queue.apply_site_policy(
        async_connection,
        queue.SitePolicy(
            name="partners-only", patterns=("*.partner.test",), allowed_namespaces=("partners",)
        ),
    )
    sites = ["bank.test", "a.partner.test", "open.test"]
    assert await queue.refusing_policies(async_connection, sites, "team") == {
        "bank.test": "no-bank",
        "a.partner.test": "partners-only",
    }
    assert await queue.refusing_policies(async_connection, sites, "partners") == {}
    rules = await queue.site_rules(async_connection, sites)
    assert {site: rule.refusing_policy("team") for site, rule in rules.items()} == {
        "bank.test": "no-bank",
        "a.partner.test": "partners-only",
        "open.test": None,
    }
    assert rules["a.partner.test"].refusing_policy("partners") is None
    assert rules["bank.test"].refusing_policy(None) is None


@pytest.mark.parametrize(
    "policy",
    [
        {"patterns": ("Example.com",)},
        {"patterns": ("*example.com",)},
        {"patterns": ()},
        {"patterns": ("*",), "max_concurrent_per_site": 0},
        {"patterns": ("*",), "delay_seconds": 7200.0},
        {"patterns": ("*",), "user_agent": ""},
    ],
)
def test_a_policy_that_cannot_be_kept_is_refused_with_what_is_wrong(policy: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="site policy p: "):
        queue.SitePolicy(name="p", **policy)
