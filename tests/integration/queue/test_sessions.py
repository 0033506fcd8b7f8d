"""The session pool on a real PostgreSQL: which session a row's page gets, how blocks retire a
session on one site and a failing proxy for every worker, sticky follow-ups, and bounded
cookie jars (docs/queue.md, "Sessions")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import sessions
from scrapeq_queue.politeness import NO_SITE_LIMIT
from scrapeq_queue.sessions import SessionRules, choose_session, proxy_id, record_session

from tests.integration.queue.test_host_politeness import claim

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

PROXIES = [proxy_id(f"http://127.0.0.1:{port}") for port in (3128, 3129, 3130)]
RULES = SessionRules(
    blocks_per_site=1, proxy_failures_in_a_row=3, proxy_failed_sites=2, proxy_retire_seconds=60
)


def site(job: queue.ClaimedJob) -> str:
    assert job.host_key is not None
    return job.host_key


async def claimed(connection: Connection, url: str) -> queue.ClaimedJob:
    job_id = await queue.enqueue(connection, url)
    claimed = await claim(connection, limit=50, politeness=NO_SITE_LIMIT)
    (job,) = [job for job in claimed if job.id == job_id]
    return job


async def page(
    connection: Connection,
    job: queue.ClaimedJob,
    outcome: sessions.Outcome,
    *,
    proxies: list[str] = PROXIES,
    cookies: list[dict[str, Any]] | None = None,
) -> tuple[sessions.Session, sessions.SessionRecord]:
    """One page of `job` on the session the pool chooses, ending with `outcome`."""
    chosen = await choose_session(
        connection, job_id=job.id, attempt=job.attempt, host_key=site(job), proxy_ids=proxies
    )
    assert chosen is not None
    record = await record_session(
        connection,
        job_id=job.id,
        attempt=job.attempt,
        session_id=chosen.session_id,
        host_key=site(job),
        outcome=outcome,
        cookies=cookies,
        rules=RULES,
    )
    return chosen, record


async def tried_sessions(connection: Connection, job_id: int) -> list[int]:
    cursor = await connection.execute(
        "SELECT tried_sessions FROM scraping_jobs WHERE id = %s", (job_id,)
    )
    row = await cursor.fetchone()
    assert row is not None
    return list(row[0])


def test_a_proxy_id_shows_neither_its_address_nor_its_credentials() -> None:
    url = "socks5://scraper:pa55word@proxy.internal.example:1080"
    shown = proxy_id(url)
    assert shown.startswith("p")
    assert len(shown) == 17
    for secret in ("scraper", "pa55word", "proxy.internal", "1080"):
        assert secret not in shown
    assert proxy_id(url) == shown
    assert proxy_id("socks5://other:pa55word@proxy.internal.example:1080") != shown
    assert proxy_id(None) == sessions.DIRECT


async def test_a_blocked_row_is_retried_on_a_session_of_another_proxy_and_records_each(
    async_connection: Connection,
) -> None:
    job = await claimed(async_connection, "https://defended.example/item/1")
    seen: list[sessions.Session] = []
    for tried in range(3):
        chosen, record = await page(async_connection, job, "blocked")
        assert chosen.tried == tried
        seen.append(chosen)
        assert record.session_retired
    assert len({chosen.session_id for chosen in seen}) == 3
    assert {chosen.proxy_id for chosen in seen} == set(PROXIES)
    assert await tried_sessions(async_connection, job.id) == [s.session_id for s in seen]


async def test_a_session_retired_on_one_site_still_serves_another_site(
    async_connection: Connection,
) -> None:
    defended = await claimed(async_connection, "https://defended.example/a")
    blocked, record = await page(async_connection, defended, "blocked", proxies=PROXIES[:1])
    assert record.session_retired
    # The same proxy gets a fresh jar on the defended site ...
    again = await claimed(async_connection, "https://defended.example/b")
    fresh, _ = await page(async_connection, again, "ok", proxies=PROXIES[:1])
    assert fresh.session_id != blocked.session_id
    assert fresh.proxy_id == blocked.proxy_id
    # ... and the blocked session is still the healthiest elsewhere.
    other = await claimed(async_connection, "https://open.example/a")
    elsewhere, _ = await page(async_connection, other, "ok", proxies=PROXIES[:1])
    assert elsewhere.session_id == blocked.session_id


async def test_a_proxy_failing_in_a_row_is_retired_for_every_worker_and_pages_use_the_rest(
    async_connection: Connection,
) -> None:
    dead = PROXIES[0]
    retired = False
    for number in range(RULES.proxy_failures_in_a_row):
        job = await claimed(async_connection, f"https://shop.example/p/{number}")
        chosen = await choose_session(
            async_connection,
            job_id=job.id,
            attempt=job.attempt,
            host_key=site(job),
            proxy_ids=[dead],
        )
        assert chosen is not None
        record = await record_session(
            async_connection,
            job_id=job.id,
            attempt=job.attempt,
            session_id=chosen.session_id,
            host_key=site(job),
            outcome="proxy_failed",
            rules=RULES,
        )
        retired = record.proxy_retired
    assert retired
    assert await sessions.retired_proxies(async_connection, PROXIES) == [dead]
    job = await claimed(async_connection, "https://shop.example/p/after")
    for _ in range(5):
        chosen, _ = await page(async_connection, job, "ok")
        assert chosen.proxy_id != dead
    alone = await claimed(async_connection, "https://shop.example/p/alone")
    assert (
        await choose_session(
            async_connection,
            job_id=alone.id,
            attempt=alone.attempt,
            host_key=site(alone),
            proxy_ids=[dead],
        )
        is None
    )


async def test_a_proxy_blocked_on_enough_sites_is_retired_though_it_never_failed_in_a_row(
    async_connection: Connection,
) -> None:
    proxy = PROXIES[:1]
    first = await claimed(async_connection, "https://one.example/x")
    _, record = await page(async_connection, first, "blocked", proxies=proxy)
    assert not record.proxy_retired
    good = await claimed(async_connection, "https://elsewhere.example/x")
    await page(async_connection, good, "ok", proxies=proxy)
    second = await claimed(async_connection, "https://two.example/x")
    _, record = await page(async_connection, second, "blocked", proxies=proxy)
    assert record.proxy_retired


async def test_a_page_that_went_well_clears_its_proxys_failures(
    async_connection: Connection,
) -> None:
    proxy = PROXIES[:1]
    for number in range(10):
        job = await claimed(async_connection, f"https://flaky.example/{number}")
        _, record = await page(async_connection, job, "proxy_failed", proxies=proxy)
        assert not record.proxy_retired
        await page(async_connection, job, "ok", proxies=proxy)


async def test_followed_rows_keep_their_parents_session_and_its_cookies(
    async_connection: Connection,
) -> None:
    parent = await claimed(async_connection, "https://shop.example/login")
    jar = [{"name": "sid", "value": "42", "domain": "shop.example", "path": "/"}]
    chosen, _ = await page(async_connection, parent, "ok", cookies=jar)
    assert await queue.complete_job(
        async_connection,
        parent.id,
        parent.attempt,
        result={},
        duration_seconds=0.1,
        follow_urls=[queue.FollowUrl("https://shop.example/account")],
    )
    (child,) = [job for job in await claim(async_connection) if job.url.endswith("/account")]
    # Another session is healthier by uses, yet the child stays on its parent's.
    followed, _ = await page(async_connection, child, "ok")
    assert followed.session_id == chosen.session_id
    assert list(followed.cookies) == jar


async def test_a_blocked_sticky_session_gives_way_to_another(
    async_connection: Connection,
) -> None:
    job = await claimed(async_connection, "https://sticky.example/1")
    first, _ = await page(async_connection, job, "ok")
    again, _ = await page(async_connection, job, "ok")
    assert again.session_id == first.session_id
    blocked, _ = await page(async_connection, job, "blocked")
    assert blocked.session_id == first.session_id
    after, _ = await page(async_connection, job, "ok")
    assert after.session_id != first.session_id


async def test_a_cookie_jar_over_the_bound_keeps_its_first_cookies(
    async_connection: Connection,
) -> None:
    job = await claimed(async_connection, "https://crumbs.example/1")
    jar = [{"name": f"c{number}", "value": "x" * 4000} for number in range(40)]
    chosen, _ = await page(async_connection, job, "ok", cookies=jar)
    again, _ = await page(async_connection, job, "ok")
    assert again.session_id == chosen.session_id
    kept = list(again.cookies)
    assert 0 < len(kept) < len(jar)
    assert kept == jar[: len(kept)]


async def test_the_pool_refuses_a_proxy_id_that_could_be_an_address(
    async_connection: Connection,
) -> None:
    job = await claimed(async_connection, "https://strict.example/1")
    with pytest.raises(ValueError, match="not a proxy id"):
        await choose_session(
            async_connection,
            job_id=job.id,
            attempt=job.attempt,
            host_key=site(job),
            proxy_ids=["10.0.0.1:3128"],
        )


def test_session_rules_refuse_numbers_out_of_their_bounds() -> None:
    with pytest.raises(ValueError, match="sessions per row"):
        SessionRules(sessions_per_row=sessions.MAX_TRIED_SESSIONS + 1)
    with pytest.raises(ValueError, match="blocks per site"):
        SessionRules(blocks_per_site=0)


async def test_sessions_nobody_took_for_the_idle_time_are_pruned_with_their_proxy(
    async_connection: Connection,
) -> None:
    old = await claimed(async_connection, "https://old.example/1")
    stale, _ = await page(async_connection, old, "blocked", proxies=PROXIES[:1])
    fresh_job = await claimed(async_connection, "https://new.example/1")
    fresh, _ = await page(async_connection, fresh_job, "ok", proxies=PROXIES[1:2])
    await async_connection.execute(
        "UPDATE scrapeq_sessions SET last_used_at = now() - interval '10 days',"
        " created_at = now() - interval '10 days' WHERE session_id = %s",
        (stale.session_id,),
    )
    await async_connection.execute(
        "UPDATE scrapeq_proxies SET created_at = now() - interval '10 days' WHERE proxy_id = %s",
        (PROXIES[0],),
    )
    await async_connection.execute(
        "UPDATE scrapeq_proxy_sites SET last_failed_at = now() - interval '10 days'"
    )

    await queue.prune_idle_sites(async_connection, idle_longer_than=timedelta(days=7))

    cursor = await async_connection.execute("SELECT session_id FROM scrapeq_sessions")
    assert [row[0] for row in await cursor.fetchall()] == [fresh.session_id]
    cursor = await async_connection.execute("SELECT proxy_id FROM scrapeq_proxies ORDER BY 1")
    assert [row[0] for row in await cursor.fetchall()] == [PROXIES[1]]
    # The row whose session went gets another.
    again, _ = await page(async_connection, old, "ok", proxies=PROXIES[:1])
    assert again.session_id != stale.session_id
