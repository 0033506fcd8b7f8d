"""Adaptive concurrency against a real PostgreSQL (docs/queue.md, "Adaptive concurrency"): a
site whose policy makes its limit adaptive starts at 2, grows by one per round of
completions up to the policy's limit while its latency holds, falls by a quarter when the
latency rises past twice its floor and by half on a server error, each at most once per
latency; the claim and the backlog count follow the limit it reached; a site without the
setting keeps its policy's limit, and turning the setting off gives the policy's limit back."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import inspection
from scrapeq_queue.politeness import ADAPTIVE_START_LIMIT

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

SITE = "adaptive.test"
CEILING = 6
# The pool's own default limit is higher than the adaptive start, so that only the adaptive
# limit can explain a claim of fewer rows.
POOL = queue.SitePoliteness(max_concurrent_per_site=10)


def adaptive_policy(ceiling: int = CEILING, adaptive: bool = True) -> queue.SitePolicy:
    return queue.SitePolicy(
        name="adaptive",
        patterns=(SITE,),
        max_concurrent_per_site=ceiling,
        adaptive_concurrency=adaptive,
    )


async def claim(connection: Connection) -> list[queue.ClaimedJob]:
    return await queue.claim_jobs(
        connection, worker_id="w", queues=["default"], limit=50, lease_seconds=30, politeness=POOL
    )


async def complete(connection: Connection, jobs: list[queue.ClaimedJob], duration: float) -> None:
    """Completes `jobs` in one statement, each having taken `duration` seconds."""
    done = await queue.complete_many(
        connection,
        [queue.Completion(job.id, job.attempt, {}, duration) for job in jobs],
    )
    assert done == {job.id for job in jobs}


async def site(connection: Connection) -> queue.SiteState:
    return (await queue.site_states(connection, [SITE]))[SITE]


async def test_an_adaptive_site_starts_at_two_and_grows_one_per_round_to_its_policys_limit(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(async_connection, adaptive_policy())
    await queue.enqueue_many(async_connection, [f"https://{SITE}/{n}" for n in range(200)])

    claimed_per_round: list[int] = []
    for _ in range(8):
        jobs = await claim(async_connection)
        claimed_per_round.append(len(jobs))
        # Every round as fast as the last: the latency stays at its floor.
        await complete(async_connection, jobs, duration=0.2)

    # A round of n completions adds n / limit: one per round, to the policy's limit and no more.
    assert claimed_per_round == [ADAPTIVE_START_LIMIT, 3, 4, 5, 6, 6, 6, 6]
    state = await site(async_connection)
    assert (state.adaptive_ceiling, state.adaptive_limit, state.max_in_flight) == (6, 6.0, 6)
    assert state.latency_seconds == pytest.approx(0.2)


async def test_a_latency_past_twice_its_floor_takes_a_quarter_off_once_per_latency(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(async_connection, adaptive_policy())
    await queue.enqueue_many(async_connection, [f"https://{SITE}/{n}" for n in range(200)])
    for _ in range(6):
        await complete(async_connection, await claim(async_connection), duration=0.2)
    assert (await site(async_connection)).adaptive_limit == 6.0

    # The site slows down: one slow completion lifts the average past twice the floor.
    [slow, *rest] = await claim(async_connection)
    await complete(async_connection, [slow], duration=30.0)
    state = await site(async_connection)
    assert state.adaptive_limit == pytest.approx(6 * 0.75)
    assert state.max_in_flight == 4
    # The responses of the requests that were in flight when it fell say the same thing again:
    # within one latency they lower it no further, nor raise it.
    await complete(async_connection, rest, duration=30.0)
    assert (await site(async_connection)).adaptive_limit == pytest.approx(6 * 0.75)
    # The claim follows the lowered limit: the site has none in flight, so 4 start.
    assert len(await claim(async_connection)) == 4
    assert await inspection.startable_due(async_connection, default_max_per_site=10) == {
        "default": 0
    }


async def test_a_server_error_halves_an_adaptive_sites_limit(async_connection: Connection) -> None:
    await queue.apply_site_policy(async_connection, adaptive_policy())
    await queue.enqueue_many(async_connection, [f"https://{SITE}/{n}" for n in range(200)])
    # Slow pages (10 s): the next steps run well within a latency of the fall.
    for _ in range(6):
        await complete(async_connection, await claim(async_connection), duration=10.0)
    [failing, *others] = await claim(async_connection)

    await queue.retry_job(
        async_connection,
        failing.id,
        failing.attempt,
        error="HTTP 500",
        reason="http_5xx",
        duration_seconds=10.0,
        host_key=failing.host_key,
    )

    state = await site(async_connection)
    assert (state.adaptive_limit, state.max_in_flight) == (3.0, 3)
    assert (state.recent_server_errors, state.breaker_trips) == (1, 0)
    # The others were in flight when it fell: within a latency their successes do not raise it.
    await complete(async_connection, others, duration=10.0)
    assert (await site(async_connection)).adaptive_limit == 3.0
    assert len(await claim(async_connection)) == 3


async def test_a_site_without_the_setting_keeps_its_policys_limit_and_writes_no_state(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(async_connection, adaptive_policy(adaptive=False))
    await queue.enqueue_many(async_connection, [f"https://{SITE}/{n}" for n in range(50)])
    jobs = await claim(async_connection)
    assert len(jobs) == CEILING
    await complete(async_connection, jobs, duration=5.0)
    state = await site(async_connection)
    assert (state.adaptive_ceiling, state.adaptive_limit, state.latency_seconds) == (
        None,
        None,
        None,
    )
    assert state.max_in_flight == CEILING


async def test_a_policy_change_keeps_the_limit_reached_within_the_new_bound_and_off_restores_it(
    async_connection: Connection,
) -> None:
    await queue.apply_site_policy(async_connection, adaptive_policy())
    await queue.enqueue_many(async_connection, [f"https://{SITE}/{n}" for n in range(200)])
    for _ in range(3):
        await complete(async_connection, await claim(async_connection), duration=0.2)
    assert (await site(async_connection)).adaptive_limit == 5.0

    # A higher bound: the limit reached stays and may grow further.
    await queue.apply_site_policy(async_connection, adaptive_policy(ceiling=20))
    state = await site(async_connection)
    assert (state.adaptive_ceiling, state.adaptive_limit, state.max_in_flight) == (20, 5.0, 5)
    # A lower bound clamps it.
    await queue.apply_site_policy(async_connection, adaptive_policy(ceiling=3))
    state = await site(async_connection)
    assert (state.adaptive_ceiling, state.adaptive_limit, state.max_in_flight) == (3, 3.0, 3)
    # Off: the policy's limit, whatever the limit had reached.
    await queue.apply_site_policy(async_connection, adaptive_policy(ceiling=8, adaptive=False))
    state = await site(async_connection)
    assert (state.adaptive_ceiling, state.adaptive_limit, state.max_in_flight) == (None, None, 8)


def test_an_adaptive_policy_names_the_limit_it_may_grow_to() -> None:
    with pytest.raises(ValueError, match="adaptiveConcurrency needs maxConcurrentPerSite"):
        queue.SitePolicy(name="open", patterns=("*",), adaptive_concurrency=True)


async def test_the_database_refuses_an_adaptive_policy_without_a_limit(
    async_connection: Connection,
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        await async_connection.execute(
            "INSERT INTO scrapeq_site_policies (policy, pattern, adaptive) VALUES ('p', '*', true)"
        )
