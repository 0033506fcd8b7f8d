"""The producer side of the queue: enqueue one or many URLs, per owner idempotently, cancel.

Every insert is one statement, so the table's statement-level trigger sends exactly one
NOTIFY per call, however many rows it inserts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Unpack

import psycopg
from psycopg.types.json import Jsonb

from scrapeq_queue import statements
from scrapeq_queue.errors import InvalidJob, translate_database_errors
from scrapeq_queue.hosts import host_key_of
from scrapeq_queue.payload import validate_payload
from scrapeq_queue.rows import NewJob, Owner, RowOptions
from scrapeq_queue.urls import normalise_url

# Rows per INSERT statement in enqueue_many: big enough that 100k URLs take a handful of round
# trips, small enough that one statement's arrays stay a few MB. All chunks share one
# transaction, and PostgreSQL folds identical NOTIFYs of one transaction into one.
INSERT_CHUNK_ROWS: Final = 20_000

# What a new job gets when the producer says nothing.
DEFAULT_QUEUE: Final = "default"
DEFAULT_PARSER: Final = "default"
DEFAULT_MAX_RETRIES: Final = 3
DEFAULT_BACKOFF_SECONDS: Final = 10.0


@translate_database_errors
async def enqueue(
    connection: psycopg.AsyncConnection[Any],
    url: str,
    *,
    run_at: datetime | None = None,
    owner: Owner | None = None,
    dedup_key: str | None = None,
    **options: Unpack[RowOptions],
) -> int | None:
    """Enqueue one URL; return its id, or None when (owner, dedup_key) already exists.

    `run_at` delays the job; `dedup_key` (scoped by owner) makes the call idempotent. Raises
    InvalidJob for a blank URL or a payload that validate_payload rejects.
    """
    ids = await _insert(
        connection, [NewJob(url=url, dedup_key=dedup_key)], options, run_at=run_at, owner=owner
    )
    return ids[0] if ids else None


@translate_database_errors
async def enqueue_many(
    connection: psycopg.AsyncConnection[Any],
    jobs: Iterable[str | NewJob],
    *,
    run_at: datetime | None = None,
    owner: Owner | None = None,
    dedup_by_url: bool = False,
    **options: Unpack[RowOptions],
) -> list[int]:
    """Enqueue many URLs (or NewJob rows) in one transaction; return the new ids.

    Multi-row inserts of INSERT_CHUNK_ROWS rows: 100,000 URLs take a few seconds. The row
    options are the defaults for every row; a NewJob overrides them per row. With
    `dedup_by_url`, each row's dedup key is its normalised URL (unless the NewJob sets one),
    so rows already present for the same owner are skipped.
    """
    rows = [job if isinstance(job, NewJob) else NewJob(url=job) for job in jobs]
    return await _insert(
        connection, rows, options, run_at=run_at, owner=owner, dedup_by_url=dedup_by_url
    )


@translate_database_errors
async def enqueue_for_owner(
    connection: psycopg.AsyncConnection[Any],
    owner: Owner,
    urls: Iterable[str],
    **options: Unpack[RowOptions],
) -> int:
    """Enqueue the URLs of one ScrapeJob; return how many rows were new.

    Idempotent per (owner.uid, normalised URL): calling it again (an operator restart, a
    re-delivered event) inserts nothing twice, and URLs repeated within `urls` count once.
    """
    ids = await _insert(
        connection,
        [NewJob(url=url) for url in urls],
        options,
        run_at=None,
        owner=owner,
        dedup_by_url=True,
    )
    return len(ids)


async def _insert(
    connection: psycopg.AsyncConnection[Any],
    rows: Sequence[NewJob],
    options: RowOptions,
    *,
    run_at: datetime | None,
    owner: Owner | None,
    dedup_by_url: bool = False,
) -> list[int]:
    unknown = set(options) - RowOptions.__optional_keys__
    if unknown:
        raise TypeError(f"unknown row options: {', '.join(sorted(unknown))}")
    if not rows:
        return []
    payload = options.get("payload")
    parser_type = options.get("parser_type", DEFAULT_PARSER)
    priority = options.get("priority", 0)
    # Refuse what a worker would refuse anyway, while the producer can still be told.
    _require_valid_payload(payload)
    # Sent once: a row that has no payload of its own takes it in the statement (a NULL in
    # `payloads`), so 100,000 rows of one job do not carry 100,000 copies to the server.
    default_payload = Jsonb(payload if payload is not None else {})
    urls: list[str] = []
    parser_types: list[str] = []
    payloads: list[Jsonb | None] = []
    priorities: list[int] = []
    dedup_keys: list[str | None] = []
    host_keys: list[str] = []
    seen_keys: set[str] = set()
    for row in rows:
        url = row.url.strip()
        if not url:
            raise InvalidJob("a job needs a non-empty URL")
        key = row.dedup_key
        if key is None and dedup_by_url:
            key = normalise_url(url)
        if key is not None:
            if key in seen_keys:
                continue
            seen_keys.add(key)
        if row.payload is not None:
            _require_valid_payload(row.payload)
        urls.append(url)
        parser_types.append(row.parser_type or parser_type)
        payloads.append(None if row.payload is None else Jsonb(row.payload))
        priorities.append(priority if row.priority is None else row.priority)
        dedup_keys.append(key)
        host_keys.append(host_key_of(url))
    shared = {
        "payload": default_payload,
        "queue": options.get("queue", DEFAULT_QUEUE),
        "max_retries": options.get("max_retries", DEFAULT_MAX_RETRIES),
        "backoff_seconds": float(options.get("backoff_seconds", DEFAULT_BACKOFF_SECONDS)),
        "run_at": run_at,
        "owner_uid": owner.uid if owner else None,
        "owner_namespace": owner.namespace if owner else None,
        "owner_name": owner.name if owner else None,
        "retain_for": _valid_retention(options.get("retain_for")),
        "notify_finished": bool(options.get("notify_finished", False)),
    }
    ids: list[int] = []
    # One chunk is one statement, atomic on its own: no BEGIN/COMMIT round trips for it.
    atomic = connection.transaction() if len(urls) > INSERT_CHUNK_ROWS else contextlib.nullcontext()
    async with atomic:
        for start in range(0, len(urls), INSERT_CHUNK_ROWS):
            end = start + INSERT_CHUNK_ROWS
            cursor = await connection.execute(
                statements.JOB_INSERT_MANY,
                {
                    **shared,
                    "urls": urls[start:end],
                    "parser_types": parser_types[start:end],
                    "payloads": payloads[start:end],
                    "priorities": priorities[start:end],
                    "dedup_keys": dedup_keys[start:end],
                    "host_keys": host_keys[start:end],
                },
            )
            ids.extend(row[0] for row in await cursor.fetchall())
    return ids


def _require_valid_payload(payload: dict[str, Any] | None) -> None:
    problems = validate_payload(payload)
    if problems:
        raise InvalidJob("invalid payload: " + "; ".join(problems))


@translate_database_errors
async def cancel_owner(connection: psycopg.AsyncConnection[Any], owner_uid: str) -> int:
    """Cancel every pending and in-flight row of one owner; return how many were cancelled.

    A worker still rendering a cancelled row is fenced out: its complete/retry/fail changes
    nothing, and its next renew_leases no longer returns the id.
    """
    async with connection.transaction():
        # In a statement of its own: the cancel's snapshot then includes every batch of
        # followed links or source entries committed before the lock.
        await connection.execute(statements.OWNER_ROWS_LOCK, {"owner_uid": owner_uid})
        cursor = await connection.execute(statements.OWNER_CANCEL, {"owner_uid": owner_uid})
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def cancel_jobs(connection: psycopg.AsyncConnection[Any], job_ids: Sequence[int]) -> int:
    """Cancel the given rows if pending or in flight; return how many were cancelled."""
    if not job_ids:
        return 0
    cursor = await connection.execute(statements.JOBS_CANCEL, {"ids": list(job_ids)})
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


def _valid_retention(retain_for: timedelta | None) -> timedelta | None:
    """`retain_for` itself; InvalidJob when it is negative (the table's CHECK would refuse
    it later, with a less helpful message)."""
    if retain_for is not None and retain_for < timedelta(0):
        raise InvalidJob(f"retain_for must be 0 or more, not {retain_for}")
    return retain_for
