"""What a worker writes while it expands a source row (a sitemap, a robots.txt) into rows.

A source row is a row whose payload carries `source` (scrapeq_queue.payload.SOURCE_KINDS). The
worker that holds it streams its document and hands each batch of entries to
`enqueue_expanded`: one transaction, fenced by the row's (id, attempt), that inserts the
entries as rows of the source's owner and records how far the expansion got in the row's
`source_progress`. A rescued source's next attempt reads that progress (`source_progress`) and
skips the entries already handled. Decision record 13 in docs/architecture.md says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors
from scrapeq_queue.hosts import host_key_of, host_name_of
from scrapeq_queue.rows import ClaimedJob
from scrapeq_queue.urls import normalise_url

# The dedup key of a sitemap row: apart from the page rows' keys (normalised URLs), so that a
# sitemap listed as a page of its own site is still read as a sitemap, and once.
SITEMAP_KEY_PREFIX: Final = "sitemap:"


@dataclass(frozen=True)
class SourceProgress:
    """How far a source row's expansion got (all zero before its first batch)."""

    entries: int = 0
    enqueued: int = 0
    sitemaps: int = 0
    skipped: int = 0

    @classmethod
    def from_column(cls, value: Any) -> SourceProgress:
        """The progress recorded in `source_progress` (NULL or a foreign shape: nothing yet)."""
        if not isinstance(value, dict):
            return cls()

        def count(name: str) -> int:
            number = value.get(name)
            return number if isinstance(number, int) and number >= 0 else 0

        return cls(count("entries"), count("enqueued"), count("sitemaps"), count("skipped"))


@dataclass(frozen=True)
class ExpandedEntry:
    """One entry a source yields: a page to scrape, or a sitemap to expand in a row of its own."""

    url: str
    is_sitemap: bool = False


@dataclass(frozen=True)
class ExpandedBatch:
    """What one batch inserted: entries already queued for the owner insert nothing."""

    pages: int
    sitemaps: int


@dataclass(frozen=True)
class KeyedEntries:
    """A batch of entries with the keys its insert binds (dedup key, host key), in the order
    given. Computing the keys is most of the Python work of a batch: an expansion makes them
    with `keyed_entries` off the event loop while the previous batch's insert runs."""

    urls: list[str]
    is_sitemap: list[bool]
    dedup_keys: list[str]
    host_keys: list[str]

    def __len__(self) -> int:
        return len(self.urls)


def keyed_entries(entries: Sequence[ExpandedEntry]) -> KeyedEntries:
    """`entries` with their dedup keys and host keys (CPU only, no I/O)."""
    return KeyedEntries(
        urls=[entry.url for entry in entries],
        is_sitemap=[entry.is_sitemap for entry in entries],
        dedup_keys=[dedup_key_of(entry) for entry in entries],
        host_keys=_host_keys(entries),
    )


def dedup_key_of(entry: ExpandedEntry) -> str:
    """The entry's dedup key per owner: its normalised URL, prefixed for a sitemap."""
    key = normalise_url(entry.url)
    return SITEMAP_KEY_PREFIX + key if entry.is_sitemap else key


@translate_database_errors
async def source_progress(
    connection: psycopg.AsyncConnection[Any], job: ClaimedJob
) -> SourceProgress | None:
    """The recorded progress of the source row `job` holds; None when the attempt is no longer
    current (the row was cancelled or rescued)."""
    cursor = await connection.execute(
        statements.JOB_SOURCE_PROGRESS, {"id": job.id, "attempt": job.attempt}
    )
    row = await cursor.fetchone()
    if row is None:
        return None
    return SourceProgress.from_column(row[0])


@translate_database_errors
async def enqueue_expanded(
    connection: psycopg.AsyncConnection[Any],
    job: ClaimedJob,
    entries: Sequence[ExpandedEntry] | KeyedEntries,
    *,
    entries_done: int,
    skipped: int = 0,
) -> ExpandedBatch | None:
    """Insert one batch of the source row `job`'s entries and record its progress.

    `entries`: the batch, with its keys already made (`keyed_entries`) or not;
    `entries_done`: how many entries of the document are handled once this batch is in (the
    next attempt starts after them); `skipped`: how many of this batch's share of the document
    were left out (a filter, a bad URL). One transaction under the owner's rows lock, which a
    cancel also takes: a batch either commits before a cancel reads the owner's rows, or finds
    its source cancelled. Returns None when the attempt is no longer current (fenced: nothing
    was inserted, and the expansion should stop).
    """
    keyed = entries if isinstance(entries, KeyedEntries) else keyed_entries(entries)
    parameters = {
        "id": job.id,
        "attempt": job.attempt,
        "urls": keyed.urls,
        "is_source": keyed.is_sitemap,
        "dedup_keys": keyed.dedup_keys,
        "host_keys": keyed.host_keys,
        "entries": entries_done,
        "skipped": skipped,
    }
    async with connection.transaction():
        await connection.execute(statements.JOB_FOLLOW_LOCK, {"parent_id": job.id})
        cursor = await connection.execute(statements.JOB_INSERT_EXPANDED, parameters)
        row = await cursor.fetchone()
    if row is None:
        return None
    return ExpandedBatch(pages=int(row[0]), sitemaps=int(row[1]))


def _host_keys(entries: Sequence[ExpandedEntry]) -> list[str]:
    """Each entry's host key; the registrable domain is looked up once per host (a sitemap's
    URLs are mostly of one host, and the look-up costs more than the rest of a row)."""
    by_host: dict[str, str] = {}
    keys: list[str] = []
    for entry in entries:
        host = host_name_of(entry.url)
        key = by_host.get(host)
        if key is None:
            key = by_host[host] = host_key_of(entry.url)
        keys.append(key)
    return keys
