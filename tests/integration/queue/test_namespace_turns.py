"""Namespaces take turns in the claim (docs/queue.md, "Namespace turns"), on real PostgreSQL: a
small namespace's rows on a site shared with another namespace's backlog of 100,000 rows are
claimed within a bound, by several claiming connections at once, and with the turns switched off
(`scrapeq.namespace_turns`) they wait behind the backlog as rows of one namespace would."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import inspection

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

Connection = psycopg.AsyncConnection[Any]

QUEUE = "tenants"
BACKLOG_SITES = 100
BACKLOG_PER_SITE = 1_000
SMALL_ROWS = 10
CLAIMERS = 4
BATCH = 10
# B's rows must all be claimed before A has had this many of its 100,000 claimed. With turns,
# B's head on the shared site is visited once per rotation over the queue's 101 heads (about 200
# of A's rows at 2 rows per site and 10 per claim) and gives up to 2 rows: its 10 rows need 5
# visits, about 1,000 of A's rows; the bound allows five times that. Without turns B's rows come
# after A's 1,000 older rows on the shared site, which gets about 4 rows per rotation: some
# 50,000 of A's rows.
BOUND_OF_BACKLOG_ROWS = 5_000


async def fill(
    connection: Connection, *, sites: int = BACKLOG_SITES, small_site: str = "site-0.test"
) -> None:
    """Namespace team-a: 100,000 due rows over `sites` sites, an hour old; then team-b: 10 rows
    on `small_site` (team-a's first site unless told otherwise), due now."""
    await connection.execute(
        """
        INSERT INTO scraping_jobs (url_to_scrape, parser_type, queue, run_at, owner_uid,
                                   owner_namespace, owner_name)
        SELECT format('https://site-%%s.test/a/%%s', n %% %(sites)s, n), 'default', %(queue)s,
               now() - interval '1 hour' + n * interval '1 millisecond', 'uid-a', 'team-a',
               'backlog'
        FROM generate_series(0, %(rows)s - 1) AS n
        """,
        {"sites": sites, "queue": QUEUE, "rows": BACKLOG_SITES * BACKLOG_PER_SITE},
    )
    await connection.execute(
        """
        INSERT INTO scraping_jobs (url_to_scrape, parser_type, queue, owner_uid,
                                   owner_namespace, owner_name)
        SELECT format('https://%%s/b/%%s', %(site)s::text, n), 'default', %(queue)s, 'uid-b',
               'team-b', 'small'
        FROM generate_series(1, %(rows)s) AS n
        """,
        {"queue": QUEUE, "rows": SMALL_ROWS, "site": small_site},
    )


async def claim_until_small_is_done(
    database_url: str, *, namespace_turns: bool, bound: int = BOUND_OF_BACKLOG_ROWS
) -> tuple[int, int, list[int]]:
    """CLAIMERS connections claim and complete at once until team-b's rows are all claimed or
    team-a has had `bound` rows claimed. Returns (team-a rows claimed, team-b rows
    claimed, every claimed id)."""
    claimed: Counter[str] = Counter()
    ids: list[int] = []
    done = asyncio.Event()

    async def claimer(number: int) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as own:
            await own.execute(
                "SELECT set_config('scrapeq.namespace_turns', %s, false)",
                ("on" if namespace_turns else "off",),
            )
            while not done.is_set():
                jobs = await queue.claim_jobs(
                    own, worker_id=f"w{number}", queues=[QUEUE], limit=BATCH, lease_seconds=60
                )
                for job in jobs:
                    claimed[job.owner_namespace or ""] += 1
                    ids.append(job.id)
                await queue.complete_many(
                    own,
                    [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs],
                )
                if claimed["team-b"] == SMALL_ROWS or claimed["team-a"] >= bound:
                    done.set()

    await asyncio.gather(*(claimer(number) for number in range(CLAIMERS)))
    return claimed["team-a"], claimed["team-b"], ids


async def test_a_small_namespace_on_a_site_shared_with_a_backlog_of_100000_rows_takes_turns(
    database_url: str, async_connection: Connection
) -> None:
    await fill(async_connection)

    backlog, small, ids = await claim_until_small_is_done(database_url, namespace_turns=True)

    assert small == SMALL_ROWS
    assert backlog < BOUND_OF_BACKLOG_ROWS
    assert len(ids) == len(set(ids)), "a row was claimed twice"


# B on a site of its own among A's 1,000 sites (100 rows each): B's one head is visited once per
# rotation over the 1,001 heads, about 2,000 of A's rows at 10 rows and 5 sites per claim, and
# gives up to 2 rows: its 10 rows need 5 rotations, about 10,000 of A's rows; the bound allows
# twice that.
BOUND_AMONG_MANY_SITES = 20_000


async def test_a_small_namespace_among_another_namespaces_1000_sites_waits_rotations_not_rows(
    database_url: str, async_connection: Connection
) -> None:
    await fill(async_connection, sites=1_000, small_site="small.test")

    backlog, small, ids = await claim_until_small_is_done(
        database_url, namespace_turns=True, bound=BOUND_AMONG_MANY_SITES
    )

    assert small == SMALL_ROWS
    assert backlog < BOUND_AMONG_MANY_SITES
    assert len(ids) == len(set(ids)), "a row was claimed twice"


async def test_with_namespace_turns_off_the_small_namespace_waits_behind_the_backlog(
    database_url: str, async_connection: Connection
) -> None:
    await fill(async_connection)

    backlog, small, ids = await claim_until_small_is_done(database_url, namespace_turns=False)

    assert backlog >= BOUND_OF_BACKLOG_ROWS
    assert small < SMALL_ROWS
    assert len(ids) == len(set(ids)), "a row was claimed twice"


async def test_heads_are_kept_per_site_queue_and_namespace_with_ownerless_rows_as_one(
    async_connection: Connection,
) -> None:
    await async_connection.execute(
        """
        INSERT INTO scraping_jobs (url_to_scrape, parser_type, owner_uid, owner_namespace,
                                   owner_name)
        VALUES ('https://shared.test/1', 'default', 'u1', 'team-a', 'one'),
               ('https://shared.test/2', 'default', 'u2', 'team-b', 'two'),
               ('https://shared.test/3', 'default', 'u3', 'team-b', 'three')
        """
    )
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES "
        "('https://shared.test/4', 'default'), ('https://shared.test/5', 'default')"
    )
    heads = await (
        await async_connection.execute(
            """
            SELECT heads.owner_namespace, jobs.url_to_scrape
            FROM scrapeq_host_queues AS heads JOIN scraping_jobs AS jobs ON jobs.id = heads.head_id
            WHERE heads.host_key = 'shared.test' ORDER BY heads.owner_namespace
            """
        )
    ).fetchall()
    assert heads == [
        ("", "https://shared.test/4"),
        ("team-a", "https://shared.test/1"),
        ("team-b", "https://shared.test/2"),
    ]

    # One claim takes the site's two slots in turns of namespaces: the oldest row of each of
    # two namespaces, not the two oldest rows.
    jobs = await queue.claim_jobs(
        async_connection,
        worker_id="w",
        queues=["default"],
        limit=10,
        lease_seconds=30,
        politeness=queue.SitePoliteness(max_concurrent_per_site=2),
    )
    assert len(jobs) == 2
    assert len({job.owner_namespace for job in jobs}) == 2


async def test_a_namespace_cap_holds_for_several_claiming_connections_and_frees_as_rows_finish(
    database_url: str, async_connection: Connection
) -> None:
    await async_connection.execute(
        """
        INSERT INTO scraping_jobs (url_to_scrape, parser_type, queue, owner_uid,
                                   owner_namespace, owner_name)
        SELECT format('https://%%s-%%s.test/%%s', ns, n %% 50, n), 'default', %(queue)s,
               'uid-' || ns, ns, 'job'
        FROM generate_series(1, 400) AS n, unnest(ARRAY['capped', 'free']) AS ns
        """,
        {"queue": QUEUE},
    )
    await queue.set_namespace_limits(async_connection, {"capped": 7, "*": 1000})
    assert await queue.namespace_limits(async_connection) == {"*": 1000, "capped": 7}
    # The autoscaler's count follows the caps as the claim does: 7 capped rows, and the free
    # namespace's 50 sites with 2 rows each.
    assert await inspection.startable_due(async_connection, default_max_per_site=2) == {
        QUEUE: 7 + 100
    }

    held: list[queue.ClaimedJob] = []
    # What the limits allow at most: 7 capped rows, and the free namespace's 50 sites with 2
    # rows each. A claim passes over a namespace whose lock another claim holds, so how many
    # claims it takes to get there depends on the machine: claim until then, with a deadline.
    allowed = 7 + 100
    deadline = time.monotonic() + 60

    async def claimer(number: int) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as own:
            while len(held) < allowed and time.monotonic() < deadline:
                held.extend(
                    await queue.claim_jobs(
                        own, worker_id=f"w{number}", queues=[QUEUE], limit=10, lease_seconds=60
                    )
                )

    # Six connections claim at once and hold every row they get.
    await asyncio.gather(*(claimer(number) for number in range(6)))

    by_namespace = Counter(job.owner_namespace for job in held)
    assert by_namespace["capped"] == 7
    assert by_namespace["free"] == 100  # its 50 sites, 2 rows each: the sites' limits
    assert len({job.id for job in held}) == len(held)
    # Nothing more may start, and the autoscaler's count says so.
    assert await inspection.startable_due(async_connection, default_max_per_site=2) == {QUEUE: 0}

    # Finishing 3 of the capped namespace's rows lets exactly 3 more go out.
    finished = [job for job in held if job.owner_namespace == "capped"][:3]
    await queue.complete_many(
        async_connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in finished]
    )
    assert await inspection.startable_due(async_connection, default_max_per_site=2) == {QUEUE: 3}
    more = await queue.claim_jobs(
        async_connection, worker_id="w", queues=[QUEUE], limit=50, lease_seconds=60
    )
    assert Counter(job.owner_namespace for job in more) == {"capped": 3}

    # A cap removed (the operator wrote none) holds no more.
    await queue.set_namespace_limits(async_connection, {})
    assert await queue.namespace_limits(async_connection) == {}
