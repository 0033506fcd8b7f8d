"""URLs taken from the results of an earlier job (a ScrapeJob's `urlsFrom.scrapeJob`).

A pipeline's second stage often starts from what the first one extracted: the product links of
a category crawl, say. This reads one result field of an owner's completed rows, resolves
relative URLs against the page they were found on and keeps the http(s) ones, each once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors


@dataclass
class ResultUrls:
    """The URLs found, and how many values were not http(s) URLs (skipped)."""

    urls: list[str] = field(default_factory=list)
    skipped: int = 0
    # True when more values existed than the limit allowed to read.
    truncated: bool = False


@translate_database_errors
async def urls_from_results(
    connection: psycopg.AsyncConnection[Any], owner_uid: str, result_field: str, *, limit: int
) -> ResultUrls:
    """The distinct absolute http(s) URLs in `result_field` of the owner's completed rows.

    At most `limit` values are read (then `truncated` is set), so a huge upstream result
    cannot exhaust memory; order follows the rows' ids and the order within each value.
    """
    cursor = await connection.execute(
        statements.OWNER_RESULT_FIELD_VALUES,
        {"owner_uid": owner_uid, "field": result_field, "limit": limit + 1},
    )
    rows = await cursor.fetchall()
    found = ResultUrls(truncated=len(rows) > limit)
    seen: set[str] = set()
    for page_url, value in rows[:limit]:
        url = _absolute_http_url(str(page_url), str(value))
        if url is None:
            found.skipped += 1
        elif url not in seen:
            seen.add(url)
            found.urls.append(url)
    return found


def _absolute_http_url(page_url: str, value: str) -> str | None:
    candidate = value.strip()
    if not candidate:
        return None
    try:
        absolute = urljoin(page_url, candidate)
        parts = urlsplit(absolute)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return absolute.split("#", 1)[0]
