"""The crawl memory: what a crawl saw of each URL across its runs (docs/queue.md, "Crawl memory").

A crawl is named by a key: every run of a scheduled ScrapeJob shares one, and any job or SQL
producer may name one (payload `crawlKey`). Per (crawl key, URL) the memory keeps the page's
validators (ETag, Last-Modified), the hashes of its content and of its extracted result, and
when it was last fetched and last changed. The claim answers a row that names a crawl with its
row of the memory (a primary-key look-up; rows without a crawl key look nothing up), a worker
reads it again here when the row waited long for a page, and the row's completion writes it
back (decision record 14).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import InvalidJob, translate_database_errors

# A crawl key is a name, not a document: a schedule's key (namespace, name and uid) is at most
# about 370 characters; a producer's own key fits well within this.
MAX_CRAWL_KEY_CHARS: Final = 512
# ETag and Last-Modified values longer than this are not kept (no conditional request then):
# real ones are a quoted hash or an HTTP date, far below it.
MAX_VALIDATOR_CHARS: Final = 1024
# The most `recrawlAfterSeconds` may say: a year.
MAX_RECRAWL_AFTER_SECONDS: Final = 365 * 24 * 3600.0
# Memory rows deleted per transaction by the age bound's prune.
PRUNE_BATCH_ROWS: Final = 5_000


def url_hash(url: str) -> bytes:
    """The memory's key for `url`: SHA-256 of the URL as the row holds it."""
    return hashlib.sha256(url.encode("utf-8", errors="surrogatepass")).digest()


def schedule_crawl_key(namespace: str, name: str, uid: str) -> str:
    """The crawl key every run of one scheduled ScrapeJob shares. The uid makes a schedule
    deleted and created again under its name a new crawl."""
    return f"schedule/{namespace}/{name}/{uid}"


def named_crawl_key(namespace: str, key: str) -> str:
    """The crawl key of a ScrapeJob's `spec.recrawl.key`: namespaced, so that two namespaces
    naming the same key never read each other's memory."""
    return f"{namespace}/{key}"


@dataclass(frozen=True)
class PageMemory:
    """What a crawl remembers of one URL. `age_seconds` is how long ago it was fetched, by the
    database's clock (so no worker's clock decides what `recrawlAfterSeconds` skips)."""

    etag: str | None
    last_modified: str | None
    content_hash: bytes | None
    result_hash: bytes | None
    fetched_at: datetime
    changed_at: datetime
    age_seconds: float

    @property
    def has_validators(self) -> bool:
        """Whether a conditional request can be made for the URL."""
        return self.etag is not None or self.last_modified is not None


@dataclass(frozen=True)
class PageVisit:
    """What one fetch of a URL saw, to remember. `not_modified`: the site answered 304, and
    the remembered hashes stay (the visit's own are ignored)."""

    etag: str | None
    last_modified: str | None
    content_hash: bytes | None
    result_hash: bytes | None
    not_modified: bool = False


def _kept_validator(value: str | None) -> str | None:
    if value is None or not value or len(value) > MAX_VALIDATOR_CHARS:
        return None
    return value


def _check_key(crawl_key: str) -> None:
    if not 1 <= len(crawl_key) <= MAX_CRAWL_KEY_CHARS:
        raise InvalidJob(f"a crawl key has 1 to {MAX_CRAWL_KEY_CHARS} characters")


async def read_page_memory(
    connection: psycopg.AsyncConnection[Any], crawl_key: str, url: str
) -> PageMemory | None:
    """What the crawl `crawl_key` remembers of `url`, or None when it never fetched it."""
    return (await read_page_memories(connection, [(crawl_key, url)]))[0]


def memory_from_columns(
    etag: str | None,
    last_modified: str | None,
    content: bytes | None,
    result: bytes | None,
    fetched: datetime | None,
    changed: datetime | None,
    age: float | None,
) -> PageMemory | None:
    """The PageMemory of a memory row's columns as CRAWL_MEMORY_READ (and the claim) answer
    them; None when there is no row (a URL its crawl never fetched: all NULL)."""
    if fetched is None or changed is None or age is None:
        return None
    return PageMemory(
        etag=etag,
        last_modified=last_modified,
        content_hash=bytes(content) if content is not None else None,
        result_hash=bytes(result) if result is not None else None,
        fetched_at=fetched,
        changed_at=changed,
        age_seconds=max(0.0, float(age)),
    )


@translate_database_errors
async def read_page_memories(
    connection: psycopg.AsyncConnection[Any], pages: Sequence[tuple[str, str]]
) -> list[PageMemory | None]:
    """What crawls remember of `pages`, (crawl key, URL) pairs, in one statement: one entry per
    pair, in their order, None for a URL its crawl never fetched."""
    for crawl_key, _ in pages:
        _check_key(crawl_key)
    memories: list[PageMemory | None] = [None] * len(pages)
    if not pages:
        return memories
    cursor = await connection.execute(
        statements.CRAWL_MEMORY_READ,
        {
            "crawl_keys": [crawl_key for crawl_key, _ in pages],
            "url_hashes": [url_hash(url) for _, url in pages],
        },
    )
    for position, *columns in await cursor.fetchall():
        memories[position - 1] = memory_from_columns(*columns)
    return memories


@dataclass(frozen=True)
class PageWrite:
    """One fetch to remember: the crawl, the URL and what the fetch saw."""

    crawl_key: str
    url: str
    visit: PageVisit


@translate_database_errors
async def remember_page(
    connection: psycopg.AsyncConnection[Any],
    crawl_key: str,
    url: str,
    visit: PageVisit,
    *,
    fetched_at: datetime | None = None,
) -> bool:
    """Record `visit` as the crawl's memory of `url`; False when a later fetch of the URL was
    already recorded (the memory keeps the latest fetch, whichever run wrote first).

    Atomic per URL: two runs of one crawl writing the same URL at once leave the memory of one
    of them whole, never a mix. `changed_at` moves only when the result's hash differs from the
    remembered one. `fetched_at` defaults to the database's now().
    """
    return await write_pages(connection, [PageWrite(crawl_key, url, visit)], fetched_at) == 1


async def write_pages(
    connection: psycopg.AsyncConnection[Any],
    writes: Sequence[PageWrite],
    fetched_at: datetime | None = None,
) -> int:
    """Record several fetches in one statement (in the caller's transaction, if any); return
    how many were recorded. Of two writes of one (crawl key, URL), the last given wins."""
    latest: dict[tuple[str, bytes], PageWrite] = {}
    for write in writes:
        _check_key(write.crawl_key)
        latest[(write.crawl_key, url_hash(write.url))] = write
    if not latest:
        return 0
    # Key order: the lock order of every memory write, so two batches sharing URLs never
    # wait for each other in a cycle.
    pages = sorted(latest.items(), key=lambda item: item[0])
    cursor = await connection.execute(
        statements.CRAWL_MEMORY_WRITE,
        {**memory_columns([write for _, write in pages]), "fetched_at": fetched_at},
    )
    return len(await cursor.fetchall())


def memory_columns(writes: Sequence[PageWrite]) -> dict[str, list[Any]]:
    """The columns the memory writes bind, one entry per write in its order: the crawl keys,
    URL hashes, URLs, validators kept and hashes (none for a 304: the remembered ones stay)."""
    for write in writes:
        _check_key(write.crawl_key)
    return {
        "crawl_keys": [write.crawl_key for write in writes],
        "url_hashes": [url_hash(write.url) for write in writes],
        "urls": [write.url for write in writes],
        "etags": [_kept_validator(write.visit.etag) for write in writes],
        "last_modifieds": [_kept_validator(write.visit.last_modified) for write in writes],
        "content_hashes": [
            None if write.visit.not_modified else write.visit.content_hash for write in writes
        ],
        "result_hashes": [
            None if write.visit.not_modified else write.visit.result_hash for write in writes
        ],
    }


@translate_database_errors
async def forget_crawl(connection: psycopg.AsyncConnection[Any], crawl_key: str) -> int:
    """Delete everything the crawl `crawl_key` remembers (its schedule was deleted); return how
    many URLs it forgot. Batches of PRUNE_BATCH_ROWS, each its own short transaction."""
    _check_key(crawl_key)
    return await _delete_in_batches(
        connection, statements.CRAWL_MEMORY_FORGET_BATCH, {"crawl_key": crawl_key}
    )


@translate_database_errors
async def prune_crawl_memory(
    connection: psycopg.AsyncConnection[Any], *, older_than: timedelta
) -> int:
    """Delete the memory of URLs no crawl fetched for longer than `older_than` (the age bound);
    return how many went. Such a URL is fetched in full the next time it comes."""
    if older_than <= timedelta(0):
        raise InvalidJob(f"older_than must be positive, not {older_than}")
    now_row = await (await connection.execute(statements.DATABASE_NOW)).fetchone()
    assert now_row is not None
    return await _delete_in_batches(
        connection,
        statements.CRAWL_MEMORY_PRUNE_BATCH,
        {"fetched_before": now_row[0] - older_than},
    )


async def _delete_in_batches(
    connection: psycopg.AsyncConnection[Any], statement: str, params: dict[str, Any]
) -> int:
    deleted = 0
    while True:
        cursor = await connection.execute(statement, {**params, "batch": PRUNE_BATCH_ROWS})
        row = await cursor.fetchone()
        batch = int(row[0]) if row else 0
        deleted += batch
        if batch < PRUNE_BATCH_ROWS:
            return deleted


__all__ = [
    "MAX_CRAWL_KEY_CHARS",
    "MAX_RECRAWL_AFTER_SECONDS",
    "MAX_VALIDATOR_CHARS",
    "PageMemory",
    "PageVisit",
    "PageWrite",
    "forget_crawl",
    "named_crawl_key",
    "prune_crawl_memory",
    "read_page_memories",
    "read_page_memory",
    "remember_page",
    "schedule_crawl_key",
    "url_hash",
    "write_pages",
]
