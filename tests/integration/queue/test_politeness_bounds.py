"""The database clamps a row's politeness to the same bounds the queue validates with
(scrapeq_queue.politeness), so a row written by plain SQL cannot go beyond them either."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from scrapeq_queue.politeness import MAX_CONCURRENT_PER_SITE_LIMIT, MAX_DELAY_SECONDS

pytestmark = pytest.mark.postgres


async def clamped(connection: psycopg.AsyncConnection[Any], function: str, payload: Any) -> Any:
    # The function name is one of two constants below, never input.
    cursor = await connection.execute(f"SELECT {function}(%s::jsonb)", (json.dumps(payload),))
    row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_a_row_s_site_limit_and_delay_are_clamped_to_the_queue_s_bounds(
    async_connection: psycopg.AsyncConnection[Any],
) -> None:
    limit = "scrapeq_payload_max_per_host"
    delay = "scrapeq_payload_delay_seconds"

    def politeness(**values: float) -> dict[str, Any]:
        return {"politeness": values}

    too_many = politeness(maxConcurrentPerSite=MAX_CONCURRENT_PER_SITE_LIMIT * 10)
    assert await clamped(async_connection, limit, too_many) == MAX_CONCURRENT_PER_SITE_LIMIT
    assert await clamped(async_connection, limit, politeness(maxConcurrentPerSite=0)) == 1
    too_long = politeness(delaySeconds=MAX_DELAY_SECONDS * 10)
    assert await clamped(async_connection, delay, too_long) == MAX_DELAY_SECONDS
    assert await clamped(async_connection, delay, politeness(delaySeconds=-5)) == 0
