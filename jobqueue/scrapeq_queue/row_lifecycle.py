"""The worker side of the queue: claim, heartbeat, complete, retry, fail, release, rescue.

Every function is one short transaction on an autocommit connection: a worker claims, the claim
commits, and only then does it work. Each claim gives the row a new attempt number; every
later write presents (id, attempt) and touches zero rows when the attempt is no longer current
(rescued and re-claimed, or cancelled) — that is the fencing that keeps a stale worker from
overwriting a newer attempt.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import psycopg
from psycopg.types.json import Jsonb

from scrapeq_queue import statements
from scrapeq_queue.crawl_memory import PageWrite, memory_columns, memory_from_columns, write_pages
from scrapeq_queue.errors import InvalidJob, translate_database_errors
from scrapeq_queue.hosts import host_key_of
from scrapeq_queue.payload import claimed_payload_problems, payload_as_options
from scrapeq_queue.politeness import (
    ADAPTIVE_ERROR_BACKOFF,
    ADAPTIVE_FLOOR_DRIFT,
    ADAPTIVE_LATENCY_BACKOFF,
    ADAPTIVE_LATENCY_TOLERANCE,
    ADAPTIVE_LATENCY_WEIGHT,
    BREAKER_MAX_PAUSE_SECONDS,
    BREAKER_PAUSE_SECONDS,
    DEFAULT_POLITENESS,
    SERVER_ERROR_TRIP,
    SERVER_ERROR_WINDOW,
    SERVER_ERROR_WINDOW_MAX_AGE_SECONDS,
    SitePoliteness,
)
from scrapeq_queue.row_loading import load_claimed_rows_safely
from scrapeq_queue.rows import ClaimedJob, Completion, FollowUrl
from scrapeq_queue.urls import BAD_URL_REASON, normalise_url, target_problem

logger = logging.getLogger(__name__)

# What a completion binds into JOB_COMPLETE_MANY for the sites whose limit adapts (docs/queue.md,
# "Adaptive concurrency"), besides its rows.
_COMPLETION_SITE_PARAMS: Final = {
    "window": SERVER_ERROR_WINDOW,
    "latency_weight": ADAPTIVE_LATENCY_WEIGHT,
    "floor_drift": ADAPTIVE_FLOOR_DRIFT,
    "latency_tolerance": ADAPTIVE_LATENCY_TOLERANCE,
    "latency_backoff": ADAPTIVE_LATENCY_BACKOFF,
}


@dataclass(frozen=True)
class RetryPolicy:
    """Every number and rule a retry applies (retry_job binds them into JOB_RETRY, the one
    place the delay is computed): the row's delay, and when a server error pauses its site."""

    # No retry waits longer than an hour, whatever the exponent, the site's Retry-After or its
    # pause says: a longer wait hides a job from everyone watching the queue.
    max_delay_seconds: float = 3600.0
    # The exponential delay (retry_backoff_seconds * 2^retry_count, capped) is multiplied by a
    # factor drawn from this range, so that jobs that failed together (a site went down) do not
    # all come back in the same instant.
    jitter_range: tuple[float, float] = (0.75, 1.0)
    # Retry reasons that speak for the whole site (a server error or a rate limit): they count
    # against the site, and their Retry-After pauses it for every worker.
    site_pausing_reasons: frozenset[str] = frozenset({"http_429", "http_5xx"})
    # The site's server-error breaker (docs/queue.md, "Server errors"; the reasons for each
    # default are in politeness.py): this many server errors among the site's last
    # politeness.SERVER_ERROR_WINDOW responses trip it for `breaker_pause_seconds`, each
    # failed probe doubles the pause up to `breaker_max_pause_seconds`, and a window whose
    # newest response is older than `server_error_window_max_age_seconds` starts again empty.
    server_error_trip: int = SERVER_ERROR_TRIP
    server_error_window_max_age_seconds: float = SERVER_ERROR_WINDOW_MAX_AGE_SECONDS
    breaker_pause_seconds: float = BREAKER_PAUSE_SECONDS
    breaker_max_pause_seconds: float = BREAKER_MAX_PAUSE_SECONDS

    def __post_init__(self) -> None:
        if not 1 <= self.server_error_trip <= SERVER_ERROR_WINDOW:
            raise ValueError(f"server_error_trip must be from 1 to {SERVER_ERROR_WINDOW}")
        if not 0 < self.breaker_pause_seconds <= self.breaker_max_pause_seconds:
            raise ValueError("breaker_pause_seconds must be above 0 and at most the maximum")

    def draw_jitter(self) -> float:
        """A jitter factor from `jitter_range`."""
        return random.uniform(*self.jitter_range)


RETRY_POLICY: Final = RetryPolicy()

# A claim that visited hosts but took no row (their heads were stale, or another claim took
# their rows between the walk's snapshot and its locks) claims again, at most this many times:
# an empty answer then means that nothing was claimable.
MAX_STALE_CLAIM_ROUNDS: Final = 10

# Reasons recorded on rows this module fails by itself.
INVALID_PAYLOAD_REASON: Final = "invalid_payload"

RetryOutcome = Literal["retrying", "failed", "fenced"]


def job_from_row(row: Sequence[Any], *, options_checked: bool = False) -> ClaimedJob:
    """The job of a claimed row; `options_checked` when unworkable() passed it."""
    return ClaimedJob(
        id=row[0],
        attempt=row[1],
        url=row[2],
        parser_type=row[3],
        payload=payload_as_options(row[4]),
        queue=row[5],
        priority=row[6],
        retry_count=row[7],
        max_retries=row[8],
        depth=row[9],
        parent_id=row[10],
        owner_uid=row[11],
        owner_namespace=row[12],
        owner_name=row[13],
        run_at=row[14],
        claimed_at=row[15],
        lease_expires_at=row[16],
        host_key=row[17],
        memory=memory_from_columns(*row[18:25]),
        options_checked=options_checked,
    )


def unpack_payload(row: Sequence[Any]) -> tuple[Sequence[Any], bytes]:
    """A claimed row as the claim's cursor read it (row_loading.py: the payload a pair of its
    value and its text's key) as the row with the payload's value, and that key (b"": none)."""
    loaded = row[4]
    if loaded is None:
        return row, b""
    value, key = loaded
    return (*row[:4], value, *row[5:]), key


def unworkable(row: Sequence[Any], payload_key: bytes = b"") -> tuple[str, str] | None:
    """(reason, error) when no worker can run a claimed row: its payload breaks a rule, or its
    URL cannot be fetched by any engine; None when it can be tried. The payload is what the
    claim's cursor loaded (unpack_payload), its bounds already checked; `payload_key` the key of
    its text, under which the verdict on its options is kept."""
    problems = claimed_payload_problems(row[4], payload_key)
    if problems:
        return INVALID_PAYLOAD_REASON, "invalid payload: " + "; ".join(problems)
    url_problem = target_problem(row[2])
    if url_problem is not None:
        return BAD_URL_REASON, f"bad URL: {url_problem}"
    return None


@translate_database_errors
async def claim_jobs(
    connection: psycopg.AsyncConnection[Any],
    *,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    reject_invalid_payloads: bool = True,
    politeness: SitePoliteness = DEFAULT_POLITENESS,
) -> list[ClaimedJob]:
    """Claim up to `limit` due jobs from `queues` for `worker_id`, best first.

    `queues` names each queue once (options.parse_names drops repeats; a repeated name is a
    ValueError, as it would scan and lock the same rows twice).

    Order: priority (highest first), then run_at, then id. One statement; concurrent claimers
    never get the same row. Each claimed row is `processing` with a fresh attempt number and a
    lease of `lease_seconds` that the worker must renew (renew_leases) until it finishes.

    With `reject_invalid_payloads` (the default), rows whose payload fails validate_payload
    are failed at once with reason `invalid_payload` and an error naming the problems, and
    rows whose URL no engine can fetch (urls.target_problem) with reason `bad_url`; neither is
    returned: no worker ever sees a job it cannot run. No value in a claimed row raises,
    however large, deep or malformed (row_loading.py): such a row fails alone and the others of
    the batch are returned. A claim whose rows were all invalid
    claims again, so an empty answer always means that no job was due.

    Per-site politeness holds for every claimer at once: no row is handed out while its host
    (hosts.host_key_of) has as many rows in flight as its limit allows, or before the host's
    delay or pause is over. A host's limits are those its producers gave
    (payload.politeness); `politeness` gives the claiming pool's defaults for hosts whose
    producers said nothing. A host with a delay takes one request at a time. An empty answer
    may also mean that every due row's host is busy.
    """
    if len(set(queues)) != len(queues):
        raise ValueError(f"queues must name each queue once, got {list(queues)}")
    if limit <= 0 or not queues:
        return []
    stale_rounds = 0
    while True:
        # The claim commits before its rows are read: no value in them may raise here.
        async with connection.cursor() as cursor:
            load_claimed_rows_safely(cursor)
            await cursor.execute(
                statements.JOB_CLAIM,
                {
                    "queues": list(queues),
                    "limit": limit,
                    "worker_id": worker_id,
                    "lease_seconds": float(lease_seconds),
                    "max_per_site": politeness.max_concurrent_per_site,
                    "delay_seconds": float(politeness.delay_seconds),
                },
            )
            answer = await cursor.fetchall()
        rows = [row for row in answer if row[0] is not None]
        jobs: list[ClaimedJob] = []
        for row in rows:
            try:
                row, payload_key = unpack_payload(row)
                failure = unworkable(row, payload_key) if reject_invalid_payloads else None
                job = job_from_row(row, options_checked=reject_invalid_payloads)
            except Exception as unreadable:  # no rule foresaw it: the row's failure alone
                logger.exception("job %s: its claimed row could not be read", row[0])
                failure = (
                    INVALID_PAYLOAD_REASON,
                    f"invalid payload: the row could not be read ({type(unreadable).__name__})",
                )
            if failure is not None:
                reason, error = failure
                logger.warning("job %s failed permanently: %s", row[0], error)
                await fail_job(
                    connection,
                    row[0],
                    row[1],
                    error=error,
                    reason=reason,
                    duration_seconds=0.0,
                )
                continue
            jobs.append(job)
        if jobs:
            return jobs
        if rows:
            continue  # every row was invalid and failed for good: this ends
        # The walk visited hosts but took no row (the marker row): their heads were stale and
        # are right now, or another claim took their rows between the walk's snapshot and its
        # locks. Bounded: a producer that keeps moving a head could otherwise keep it stale.
        stale_rounds += 1
        if not answer or stale_rounds > MAX_STALE_CLAIM_ROUNDS:
            return jobs


@translate_database_errors
async def renew_leases(
    connection: psycopg.AsyncConnection[Any],
    *,
    worker_id: str,
    jobs: Sequence[tuple[int, int]],
    lease_seconds: float,
) -> set[int]:
    """Extend the leases of the (id, attempt) pairs `worker_id` holds; return the ids renewed.

    An id missing from the answer is no longer this worker's (cancelled, or rescued after its
    lease expired): stop working on it, its result would be fenced out anyway.
    """
    if not jobs:
        return set()
    jobs = sorted(jobs)  # id order, as every multi-row write here locks
    cursor = await connection.execute(
        statements.JOB_RENEW_LEASES,
        {
            "worker_id": worker_id,
            "ids": [job_id for job_id, _ in jobs],
            "attempts": [attempt for _, attempt in jobs],
            "lease_seconds": float(lease_seconds),
        },
    )
    return {row[0] for row in await cursor.fetchall()}


@translate_database_errors
async def complete_many(
    connection: psycopg.AsyncConnection[Any], completions: Sequence[Completion]
) -> set[int]:
    """Complete several attempts in one statement; return the ids that were still current.

    The batched form of complete_job (without followed links), for workers that finish many
    small jobs: one commit for the whole batch.
    """
    if not completions:
        return set()
    # Id order: the lock order of every multi-row write here (no deadlock with a cancel).
    completions = sorted(completions, key=lambda completion: completion.job_id)
    params = {
        "ids": [completion.job_id for completion in completions],
        "attempts": [completion.attempt for completion in completions],
        "results": Jsonb([completion.result for completion in completions]),
        "durations": [float(completion.duration_seconds) for completion in completions],
        **_COMPLETION_SITE_PARAMS,
    }
    writes = [
        (completion.job_id, completion.memory)
        for completion in completions
        if completion.memory is not None
    ]
    if writes:
        # The crawl memory of the current completions is written by the same statement: one
        # commit for the batch still, and no memory of a fetch whose result was not stored.
        params["memory_ids"] = [job_id for job_id, _ in writes]
        params.update(memory_columns([memory for _, memory in writes]))
    cursor = await connection.execute(
        statements.JOB_COMPLETE_MANY_REMEMBERING if writes else statements.JOB_COMPLETE_MANY,
        params,
    )
    done = {row[0] for row in await cursor.fetchall()}
    for completion in completions:
        if completion.job_id not in done:
            logger.info(
                "completion of job %s attempt %s fenced out (no longer the current attempt)",
                completion.job_id,
                completion.attempt,
            )
    return done


@translate_database_errors
async def complete_job(
    connection: psycopg.AsyncConnection[Any],
    job_id: int,
    attempt: int,
    *,
    result: dict[str, Any],
    duration_seconds: float,
    follow_urls: Sequence[FollowUrl] = (),
    follow_limit: int | None = None,
    memory: PageWrite | None = None,
) -> bool:
    """Store `result` and mark the job completed; False when the attempt was fenced out.

    `memory` (a row with a crawl key) is written to the crawl memory in the same transaction.

    `follow_urls` become child rows (parent_id = job_id, depth + 1, the parent's queue,
    priority, retries and owner) in the same transaction, deduplicated per owner by normalised
    URL, so a crash can never leave a completed parent without its children or vice versa.
    `follow_limit` caps the followed rows (depth > 0) of the parent's owner as a whole: links
    past it are dropped, in the order given, and the stored result says how many
    (`follow_dropped.max_pages`). For rows without an owner it caps this call; the worker
    carries such a crawl's budget in the followed rows' payloads. A `next_page` link (the next
    page of a pagination chain) becomes a row of the parent's depth that `follow_limit` does
    not count or cap (at depth 0 it has no parent_id: the table gives one to deeper rows only);
    it is deduplicated per owner like the others.
    """
    completion = Completion(job_id, attempt, result, duration_seconds)
    async with connection.transaction():
        cursor = await connection.execute(
            statements.JOB_COMPLETE_MANY,
            {
                "ids": [job_id],
                "attempts": [attempt],
                "results": Jsonb([completion.result]),
                "durations": [float(duration_seconds)],
                **_COMPLETION_SITE_PARAMS,
            },
        )
        if await cursor.fetchone() is None:
            logger.info("completion of job %s attempt %s fenced out", job_id, attempt)
            return False
        followed = [follow for follow in follow_urls if not follow.next_page]
        if followed:
            await _insert_children(connection, job_id, followed, follow_limit)
        chained = [follow for follow in follow_urls if follow.next_page]
        if chained:
            await _insert_children(connection, job_id, chained, None, depth_step=0)
        if memory is not None:
            await write_pages(connection, [memory])
    return True


async def _insert_children(
    connection: psycopg.AsyncConnection[Any],
    parent_id: int,
    follow_urls: Sequence[FollowUrl],
    follow_limit: int | None,
    *,
    depth_step: int = 1,
) -> None:
    seen: set[str] = set()
    urls: list[str] = []
    parser_types: list[str | None] = []
    payloads: list[Jsonb | None] = []
    dedup_keys: list[str] = []
    for follow in follow_urls:
        try:
            key = normalise_url(follow.url)
        except InvalidJob:
            logger.info("job %s: skipping followed link %r (not a URL)", parent_id, follow.url)
            continue
        if key in seen:
            continue
        seen.add(key)
        urls.append(follow.url.strip())
        parser_types.append(follow.parser_type)
        payloads.append(None if follow.payload is None else Jsonb(follow.payload))
        dedup_keys.append(key)
    if not urls:
        return
    limit: int | None = None
    if follow_limit is not None:
        # The lock comes first, in a statement of its own: under READ COMMITTED the count
        # below then takes a snapshot that includes every child committed before the lock.
        await connection.execute(statements.JOB_FOLLOW_LOCK, {"parent_id": parent_id})
        cursor = await connection.execute(statements.JOB_FOLLOWED_COUNT, {"parent_id": parent_id})
        row = await cursor.fetchone()
        limit = max(0, follow_limit - (int(row[0]) if row else 0))
    inserted = 0
    if limit != 0:
        cursor = await connection.execute(
            statements.JOB_INSERT_CHILDREN,
            {
                "parent_id": parent_id,
                "urls": urls,
                "parser_types": parser_types,
                "payloads": payloads,
                "dedup_keys": dedup_keys,
                "host_keys": [host_key_of(url) for url in urls],
                "limit": limit,
                "depth_step": depth_step,
            },
        )
        inserted = len(await cursor.fetchall())
    if limit is not None and inserted == limit and limit < len(urls):
        # The owner's maxPages stopped the insert: the result says how many links it dropped.
        logger.info(
            "job %s: followed links dropped, the job's limit of %d followed pages is reached",
            parent_id,
            follow_limit,
        )
        await connection.execute(
            statements.JOB_FOLLOW_DROPPED, {"parent_id": parent_id, "dedup_keys": dedup_keys}
        )


@translate_database_errors
async def retry_job(
    connection: psycopg.AsyncConnection[Any],
    job_id: int,
    attempt: int,
    *,
    error: str,
    reason: str,
    duration_seconds: float,
    retry_after_seconds: float | None = None,
    jitter: float | None = None,
    pause_site_seconds: float | None = None,
    server_error: bool | None = None,
    host_key: str | None = None,
    policy: RetryPolicy = RETRY_POLICY,
) -> RetryOutcome:
    """Record a failed attempt that deserves another try.

    Returns "retrying" (back to pending after the backoff delay, retry_count + 1), "failed"
    (no retries left: failed for good with this error) or "fenced" (the attempt is no longer
    current; nothing changed). The delay is retry_backoff_seconds * 2^retry_count times a
    jitter factor from `policy.jitter_range`, or `retry_after_seconds` when the site sent
    Retry-After, never more than `policy.max_delay_seconds`. `jitter` fixes the factor (tests).

    `pause_site_seconds` (a 429 or 503 with Retry-After) pauses the whole site: no claimer gets
    a row of it for that long (capped like the delay). `server_error` records a server error
    in the site's window of recent responses (default: whether `reason` is one of
    `policy.site_pausing_reasons`): `policy.server_error_trip` of them among the window trip
    the site's breaker, which pauses it for `policy.breaker_pause_seconds`, then lets one
    request through (the probe); a server error after the pause trips it again for twice as
    long (at most `policy.breaker_max_pause_seconds`), a completion closes it. Both need the
    job's `host_key` (ClaimedJob.host_key).
    """
    factor = policy.draw_jitter() if jitter is None else jitter
    if server_error is None:
        server_error = reason in policy.site_pausing_reasons
    cursor = await connection.execute(
        statements.JOB_RETRY,
        {
            "id": job_id,
            "attempt": attempt,
            "error": error,
            "reason": reason,
            "duration_seconds": float(duration_seconds),
            "retry_after_seconds": retry_after_seconds,
            "jitter": factor,
            "cap_seconds": policy.max_delay_seconds,
            "host_pause_seconds": (
                None
                if pause_site_seconds is None
                else min(policy.max_delay_seconds, max(0.0, float(pause_site_seconds)))
            ),
            "server_error": server_error and host_key is not None,
            "host_key": host_key,
            "window": SERVER_ERROR_WINDOW,
            "window_max_age_seconds": policy.server_error_window_max_age_seconds,
            "trip_errors": policy.server_error_trip,
            "pause_seconds": policy.breaker_pause_seconds,
            "max_pause_seconds": min(policy.breaker_max_pause_seconds, policy.max_delay_seconds),
            "error_backoff": ADAPTIVE_ERROR_BACKOFF,
        },
    )
    row = await cursor.fetchone()
    if row is None:
        logger.info("retry of job %s attempt %s fenced out", job_id, attempt)
        return "fenced"
    return "failed" if row[0] == "failed" else "retrying"


@translate_database_errors
async def fail_job(
    connection: psycopg.AsyncConnection[Any],
    job_id: int,
    attempt: int,
    *,
    error: str,
    reason: str,
    duration_seconds: float,
) -> bool:
    """Fail the job for good (a permanent error); False when the attempt was fenced out."""
    cursor = await connection.execute(
        statements.JOB_FAIL,
        {
            "id": job_id,
            "attempt": attempt,
            "error": error,
            "reason": reason,
            "duration_seconds": float(duration_seconds),
        },
    )
    if await cursor.fetchone() is None:
        logger.info("failure of job %s attempt %s fenced out", job_id, attempt)
        return False
    return True


@translate_database_errors
async def release_jobs(
    connection: psycopg.AsyncConnection[Any],
    *,
    worker_id: str,
    jobs: Sequence[tuple[int, int]],
) -> int:
    """Give held jobs back (graceful drain): pending and due now, not counted as a retry.

    Returns how many were released; wakes other workers with one NOTIFY.
    """
    if not jobs:
        return 0
    jobs = sorted(jobs)  # id order, as every multi-row write here locks
    cursor = await connection.execute(
        statements.JOB_RELEASE,
        {
            "worker_id": worker_id,
            "ids": [job_id for job_id, _ in jobs],
            "attempts": [attempt for _, attempt in jobs],
        },
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def rescue_expired_leases(connection: psycopg.AsyncConnection[Any]) -> int:
    """Return jobs whose lease expired to pending (or fail them when out of retries).

    A lost attempt counts as a retry; its attempt row is logged as `expired`. Safe to run from
    every worker and the operator at once. Returns how many rows were rescued.
    """
    # Bound (empty) parameters so that the %% escapes in the statement are interpreted.
    cursor = await connection.execute(statements.JOB_RESCUE_EXPIRED, {})
    row = await cursor.fetchone()
    rescued = int(row[0]) if row else 0
    if rescued:
        logger.warning("rescued %d job(s) whose lease expired", rescued)
    return rescued
