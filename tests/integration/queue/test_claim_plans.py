"""The claim's plans do not depend on the statistics being fresh: a burst of pending rows into a
table whose statistics say nearly nothing is pending (many finished rows, analyzed before the
burst, autovacuum not yet there) must not turn the claim's UPDATE of its chosen rows into a walk
of every pending row's index entry. The plans are read with auto_explain, which sends each
statement's plan inside the claim function to the client as a notice."""

from __future__ import annotations

import re

import psycopg
import pytest
import scrapeq_queue as queue

pytestmark = pytest.mark.timeout(120)

FINISHED = 20_000
PENDING = 3_000
SITES = 100


async def test_the_claim_updates_its_rows_by_key_when_the_statistics_say_none_are_pending(
    database_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as setup:
        await setup.execute("ALTER TABLE scraping_jobs SET (autovacuum_enabled = off)")
        await setup.execute(
            """
            INSERT INTO scraping_jobs (url_to_scrape, parser_type, status, finished_at)
            SELECT 'https://old' || n %% %(sites)s || '.example/' || n, 'classic', 'completed',
                   now()
            FROM generate_series(1, %(finished)s) AS n
            """,
            {"sites": SITES, "finished": FINISHED},
        )
        await setup.execute("ANALYZE scraping_jobs")
        await queue.enqueue_many(
            setup, [f"https://site{n % SITES}.example/{n}" for n in range(PENDING)]
        )

    plans: list[str] = []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as claimer:
        claimer.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = notice",
        ):
            await claimer.execute(setting)
        jobs = await queue.claim_jobs(
            claimer,
            worker_id="w",
            queues=["default"],
            limit=50,
            lease_seconds=30,
            politeness=queue.SitePoliteness(max_concurrent_per_site=2),
        )
    assert len(jobs) == 50

    (claim_plan,) = [plan for plan in plans if "Update on scraping_jobs" in plan]
    # The scan that finds the rows the UPDATE writes (the one of the same alias): by primary
    # key, not through an index of pending rows that the statistics make look empty.
    alias = re.search(r"Update on scraping_jobs (\w+)", claim_plan)
    assert alias is not None, claim_plan
    (scan,) = re.findall(rf".*Scan.* on scraping_jobs {alias[1]}\b.*", claim_plan)
    assert "using scraping_jobs_pkey" in scan, claim_plan
