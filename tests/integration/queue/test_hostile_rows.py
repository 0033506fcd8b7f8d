"""Rows written by plain SQL that no worker could load fail alone; their neighbours are claimed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.plain_sql import insert_plain_row

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]

# Payloads PostgreSQL stores without complaint and that each broke a whole claim once.
HOSTILE_PAYLOADS = {
    "a number PostgreSQL prints with 401 digits": (
        """'{"timeoutSeconds": 1e400}'""",
        "a number of 401 digits",
    ),
    "a 5,000-digit integer": (
        "('{\"timeoutSeconds\": ' || repeat('9', 5000) || '}')",
        "a number of 5000 digits",
    ),
    "a negative 5,000-digit delay": (
        "('{\"politeness\": {\"delaySeconds\": -' || repeat('9', 5000) || '}}')",
        "a number of 5000 digits",
    ),
    "a timeout of a million seconds": (
        """'{"timeoutSeconds": 1000000}'""",
        "timeoutSeconds must be a number above 0 and at most 600",
    ),
    "a crawl 1000 links deep": (
        """'{"follow": {"selector": "a", "maxDepth": 1000, "maxPages": 30}}'""",
        "follow.maxDepth must be an integer from 0 to 5",
    ),
    "a header value with a line break": (
        """'{"headers": {"X-A": "one\\r\\nX-B: two"}}'""",
        "without line breaks or NUL",
    ),
}


async def failure_of(connection: Connection, job_id: int) -> tuple[str, str | None, str | None]:
    cursor = await connection.execute(
        "SELECT status::text, last_error_reason, last_error FROM scraping_jobs WHERE id = %s",
        (job_id,),
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


@pytest.mark.parametrize("case", sorted(HOSTILE_PAYLOADS))
async def test_a_row_no_worker_could_load_fails_alone_and_its_neighbours_are_claimed(
    async_connection: Connection, case: str
) -> None:
    payload_sql, fragment = HOSTILE_PAYLOADS[case]
    before = await queue.enqueue(async_connection, "https://e.test/before")
    hostile = await insert_plain_row(async_connection, "https://e.test/hostile", payload_sql)
    after = await queue.enqueue(async_connection, "https://e.test/after")

    jobs = await queue.claim_jobs(
        async_connection,
        worker_id="w",
        queues=["default"],
        limit=10,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )

    assert sorted(job.id for job in jobs) == sorted([before, after])
    status, reason, error = await failure_of(async_connection, hostile)
    assert (status, reason) == ("failed", "invalid_payload")
    assert error is not None
    assert fragment in error
    assert len(error) < 1000


async def test_a_row_nested_deeper_than_the_bound_fails_alone_when_it_predates_the_check(
    async_connection: Connection,
) -> None:
    # The table refuses such a payload when it is written; a row written before the bound
    # existed (here: with its trigger off) is still read. test_migrations upgrades a database
    # holding such rows.
    await async_connection.execute(
        "ALTER TABLE scraping_jobs DISABLE TRIGGER scrapeq_jobs_payload_bounds_on_insert"
    )
    healthy = await queue.enqueue(async_connection, "https://e.test/healthy")
    deep = await insert_plain_row(
        async_connection,
        "https://e.test/deep",
        "('{\"extract\": ' || repeat('[', 3000) || repeat(']', 3000) || '}')",
    )

    jobs = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    )

    assert [job.id for job in jobs] == [healthy]
    status, reason, error = await failure_of(async_connection, deep)
    assert (status, reason) == ("failed", "invalid_payload")
    assert error == "invalid payload: payload nests objects and arrays deeper than 32 levels"


async def test_a_row_due_since_minus_infinity_is_claimed_like_any_other(
    async_connection: Connection,
) -> None:
    cursor = await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, run_at) "
        "VALUES ('https://e.test/always', 'p', '-infinity') RETURNING id"
    )
    row = await cursor.fetchone()
    assert row is not None
    healthy = await queue.enqueue(async_connection, "https://e.test/healthy")

    jobs = await queue.claim_jobs(
        async_connection,
        worker_id="w",
        queues=["default"],
        limit=10,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )

    assert sorted(job.id for job in jobs) == sorted([row[0], healthy])
    (ancient,) = [job for job in jobs if job.id == row[0]]
    assert ancient.run_at.year == 1


def nested_payload_sql(containers: int) -> str:
    """A payload whose `extract` holds arrays nested so that `containers` levels of objects
    and arrays exist, the payload itself counted."""
    inner = containers - 1
    return f"('{{\"extract\": ' || repeat('[', {inner}) || repeat(']', {inner}) || '}}')"


@pytest.mark.parametrize(
    ("payload_sql", "constraint", "problem"),
    [
        ("'[1, 2]'", "scrapeq_jobs_payload_is_object", "got a JSON array"),
        ("'\"render\"'", "scrapeq_jobs_payload_is_object", "got a JSON string"),
        (
            "('{\"headers\": {\"X\": \"' || repeat('a', 262144) || '\"}}')",
            "scrapeq_jobs_payload_bounded",
            "at most 262144 are allowed",
        ),
        (nested_payload_sql(33), "scrapeq_jobs_payload_bounded", "deeper than 32 levels"),
        (nested_payload_sql(3000), "scrapeq_jobs_payload_bounded", "deeper than 32 levels"),
    ],
)
async def test_the_table_refuses_at_insert_a_payload_the_claim_would_fail(
    async_connection: Connection, payload_sql: str, constraint: str, problem: str
) -> None:
    cursor = await async_connection.execute(f"SELECT {payload_sql}::jsonb::text")
    row = await cursor.fetchone()
    assert row is not None
    (validated,) = queue.validate_payload(queue.load_payload(row[0]))
    assert problem in validated

    with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
        await insert_plain_row(async_connection, "https://e.test/refused", payload_sql)


async def test_the_table_and_the_claim_draw_the_depth_bound_at_the_same_level(
    async_connection: Connection,
) -> None:
    deepest = await insert_plain_row(async_connection, "https://e.test/32", nested_payload_sql(32))
    cursor = await async_connection.execute(
        "SELECT payload::text FROM scraping_jobs WHERE id = %s", (deepest,)
    )
    row = await cursor.fetchone()
    assert row is not None
    problems = queue.validate_payload(queue.load_payload(row[0]))
    assert problems  # extract is not an object...
    assert not any("deeper" in problem for problem in problems), problems  # ...but not too deep
    with pytest.raises(psycopg.errors.CheckViolation):
        await insert_plain_row(async_connection, "https://e.test/33", nested_payload_sql(33))


async def test_a_payload_changed_by_an_update_is_held_to_the_bounds(
    async_connection: Connection,
) -> None:
    job_id = await queue.enqueue(
        async_connection, "https://e.test/changed", payload={"render": True}
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="scrapeq_jobs_payload_bounded"):
        await async_connection.execute(
            f"UPDATE scraping_jobs SET payload = {nested_payload_sql(33)}::jsonb WHERE id = %s",
            (job_id,),
        )
    with pytest.raises(psycopg.errors.CheckViolation, match="scrapeq_jobs_payload_is_object"):
        await async_connection.execute(
            "UPDATE scraping_jobs SET payload = '[1]' WHERE id = %s", (job_id,)
        )
    await async_connection.execute(
        "UPDATE scraping_jobs SET payload = '{\"render\": false}' WHERE id = %s", (job_id,)
    )
    cursor = await async_connection.execute(
        "SELECT payload FROM scraping_jobs WHERE id = %s", (job_id,)
    )
    assert await cursor.fetchone() == ({"render": False},)
