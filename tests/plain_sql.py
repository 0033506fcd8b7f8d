"""Rows as a plain SQL producer writes them: one INSERT into scraping_jobs, no Python checks.

The hostile-row tests of the queue and of the worker insert what a producer that bypasses
scrapeq's Python can store; both write it the same way, here.
"""

from __future__ import annotations

from typing import Any

import psycopg


async def insert_plain_row(
    connection: psycopg.AsyncConnection[Any], url: str, payload_sql: str, parser_type: str = "p"
) -> int:
    """INSERT a row whose payload is the SQL expression `payload_sql` (cast to jsonb, so an
    expression may build what no literal in a test file should spell out); its id."""
    cursor = await connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        f"VALUES (%s, %s, {payload_sql}::jsonb) RETURNING id",
        (url, parser_type),
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])
