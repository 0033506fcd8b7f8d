"""Per-host politeness: the limits a claim enforces and the pool-wide defaults.

A row's payload may carry `politeness: {maxConcurrentPerHost, delaySeconds, respectRobotsTxt}`
(validated in payload.py); what it leaves out comes from the worker pool's defaults, which the
claim statement binds. The state each host is in lives in the `scrapeq_hosts` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

# Two requests at a time per site. Scrapy allows 8 per domain with no delay and Crawlee none by
# default; both run in one process. scrapeq's limit holds for the whole cluster (10 pods x 4
# slots would otherwise put 40 pages on one site), so it starts low: two pages keep a crawl of
# one site moving while a slow page loads, and a site owner sees a browser's worth of traffic.
DEFAULT_MAX_CONCURRENT_PER_HOST: Final = 2
# No fixed delay by default: the concurrency limit, Retry-After pauses and robots.txt's
# Crawl-delay already pace a site; a delay serialises a host (one request at a time).
DEFAULT_DELAY_SECONDS: Final = 0.0
# robots.txt is read and obeyed unless a job or the pool turns it off.
DEFAULT_RESPECT_ROBOTS_TXT: Final = True
# Bounds of the per-row values (the claim clamps to them too).
MAX_CONCURRENT_PER_HOST_LIMIT: Final = 1000
MAX_DELAY_SECONDS: Final = 3600.0


@dataclass(frozen=True)
class HostPoliteness:
    """The limits for rows whose payload does not set them (a worker pool's defaults)."""

    max_concurrent_per_host: int = DEFAULT_MAX_CONCURRENT_PER_HOST
    delay_seconds: float = DEFAULT_DELAY_SECONDS
    respect_robots_txt: bool = DEFAULT_RESPECT_ROBOTS_TXT

    def __post_init__(self) -> None:
        if not 1 <= self.max_concurrent_per_host <= MAX_CONCURRENT_PER_HOST_LIMIT:
            raise ValueError(
                f"maxConcurrentPerHost must be between 1 and {MAX_CONCURRENT_PER_HOST_LIMIT}"
            )
        if not 0 <= self.delay_seconds <= MAX_DELAY_SECONDS:
            raise ValueError(f"delaySeconds must be between 0 and {MAX_DELAY_SECONDS:g}")


DEFAULT_POLITENESS: Final = HostPoliteness()
# No practical per-host limit and no delay: for tests and benchmarks of the queue itself, whose
# rows all share one made-up host.
NO_HOST_LIMIT: Final = HostPoliteness(max_concurrent_per_host=MAX_CONCURRENT_PER_HOST_LIMIT)


@translate_database_errors
async def set_crawl_delay(
    connection: psycopg.AsyncConnection[Any], host_key: str, crawl_delay_seconds: float
) -> None:
    """Record the Crawl-delay of `host_key`'s robots.txt (0: none), clamped to
    [0, MAX_DELAY_SECONDS]: from then on every claim of the host waits at least that long
    after the previous request and takes one request at a time."""
    await connection.execute(
        statements.HOST_SET_CRAWL_DELAY,
        {
            "host_key": host_key,
            "crawl_delay_seconds": min(MAX_DELAY_SECONDS, max(0.0, float(crawl_delay_seconds))),
        },
    )


@dataclass(frozen=True)
class RobotsCopy:
    """The cluster's copy of an origin's robots.txt (robots_copy).

    With `held`, the copy holds for `seconds_left` more: `status` is the HTTP status of the
    fetch (None when none came: `problem` says why) and `body` the file. Without, `leased` says
    whether the caller now fetches the file and stores it (store_robots_copy); when not, another
    worker is fetching it: ask again in a moment.
    """

    held: bool
    leased: bool
    status: int | None = None
    body: str | None = None
    problem: str | None = None
    seconds_left: float = 0.0


@translate_database_errors
async def robots_copy(
    connection: psycopg.AsyncConnection[Any], origin: str, *, lease_seconds: float
) -> RobotsCopy:
    """The cluster's copy of `origin`'s robots.txt, or the lease to fetch it for
    `lease_seconds` when no copy holds and nobody else is fetching it."""
    cursor = await connection.execute(
        statements.ROBOTS_COPY, {"origin": origin, "lease_seconds": float(lease_seconds)}
    )
    row = await cursor.fetchone()
    assert row is not None
    status, body, problem, seconds_left, leased = row
    if seconds_left is None:
        return RobotsCopy(held=False, leased=bool(leased))
    return RobotsCopy(True, False, status, body, problem, float(seconds_left))


@translate_database_errors
async def store_robots_copy(
    connection: psycopg.AsyncConnection[Any],
    origin: str,
    *,
    status: int | None,
    body: str | None,
    problem: str | None,
    ttl_seconds: float,
) -> None:
    """Store what fetching `origin`'s robots.txt gave, for `ttl_seconds`, ending the lease."""
    await connection.execute(
        statements.ROBOTS_STORE,
        {
            "origin": origin,
            "status": status,
            "body": body,
            "problem": problem,
            "ttl_seconds": float(ttl_seconds),
        },
    )
