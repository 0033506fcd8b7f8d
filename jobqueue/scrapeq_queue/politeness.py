"""Per-site politeness: the limits a claim enforces and the pool-wide defaults.

A row's payload may carry `politeness: {maxConcurrentPerSite, delaySeconds, respectRobotsTxt}`
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
DEFAULT_MAX_CONCURRENT_PER_SITE: Final = 2
# No fixed delay by default: the concurrency limit, Retry-After pauses and robots.txt's
# Crawl-delay already pace a site; a delay serialises a host (one request at a time).
DEFAULT_DELAY_SECONDS: Final = 0.0
# robots.txt is read and obeyed unless a job or the pool turns it off.
DEFAULT_RESPECT_ROBOTS_TXT: Final = True
# Bounds of a site's limit and delay: the one source. Every check in Python calls
# site_limit_problem / site_delay_problem; the migration runner writes them into the database's
# clamp (sql/payload_limits.sql, migrations.PLACEHOLDERS); the copies a user meets first (the
# CRD's and the chart's schemas) are tested against these constants.
MAX_CONCURRENT_PER_SITE_LIMIT: Final = 1000
MAX_DELAY_SECONDS: Final = 3600.0

# Server errors by rate (docs/queue.md, "Server errors"): each site keeps its last
# SERVER_ERROR_WINDOW responses as bits (1: a server error) in its state row. The window is
# short so that a site that starts failing is noticed within a few pages, and a fixed number
# of bits so that the state row never grows; the database's CHECK on the bits is written from
# this constant (migrations.PLACEHOLDERS).
SERVER_ERROR_WINDOW: Final = 20
# SERVER_ERROR_TRIP server errors among the window's responses trip the site's breaker: half
# the window. A site where a few pages answer 500 (removed products) keeps its pace; a site
# where every other page fails is treated as failing. A new site's window starts as
# successes, so the first trip needs this many server errors.
SERVER_ERROR_TRIP: Final = 10
# A window whose newest response is older than this starts again empty: errors of yesterday's
# crawl say nothing about the site today.
SERVER_ERROR_WINDOW_MAX_AGE_SECONDS: Final = 600.0
# The first trip pauses the site this long, and a failed probe pauses it as long again while
# some of its recent responses still succeed: a site that answers some pages (removed products
# answering 500 among live ones) loses a second per failed probe, never minutes, and while
# its breaker is tripped sees about one request a second from the whole cluster. Once all
# SERVER_ERROR_WINDOW responses failed, each failed probe that was a row's first attempt (the
# site looks down: pages never tried fail too) doubles the pause, up to
# BREAKER_MAX_PAUSE_SECONDS; a retry failing again speaks for its own row and keeps the pause
# as it is. Half a minute between probes keeps a site that is down from seeing more than two
# requests a minute from the whole cluster, and bounds what each row of a site that answers
# nothing but 500 costs (docs/queue.md, "Server errors", gives the worst case).
BREAKER_PAUSE_SECONDS: Final = 1.0
BREAKER_MAX_PAUSE_SECONDS: Final = 30.0

# Adaptive concurrency (docs/queue.md, "Adaptive concurrency"; off unless a site policy turns
# it on): a site's limit follows the latency and the server errors of its responses, for the
# whole cluster, between 1 and the policy's limit. It starts at ADAPTIVE_START_LIMIT (the
# pool's own default) and grows by one per round of completions (a round: as many completions
# as the limit) while the site's latency stays within ADAPTIVE_LATENCY_TOLERANCE times its
# floor; a latency above that takes a quarter off (ADAPTIVE_LATENCY_BACKOFF), a server error
# half (ADAPTIVE_ERROR_BACKOFF), each at most once per latency, so that the responses of the
# requests in flight when the limit fell do not lower it again.
ADAPTIVE_START_LIMIT: Final = DEFAULT_MAX_CONCURRENT_PER_SITE
# The latency is a moving average: each completion's duration weighs this much in it.
ADAPTIVE_LATENCY_WEIGHT: Final = 0.3
# The floor is the fastest completion seen, rising this share of the way to the average with
# each completion: a site that became slower for good is not held to yesterday's speed.
ADAPTIVE_FLOOR_DRIFT: Final = 0.05
ADAPTIVE_LATENCY_TOLERANCE: Final = 2.0
ADAPTIVE_LATENCY_BACKOFF: Final = 0.75
ADAPTIVE_ERROR_BACKOFF: Final = 0.5


def site_limit_problem(value: object) -> str | None:
    """Why `value` cannot be a site's limit (pages in flight at once), or None when it can."""
    if not isinstance(value, bool) and isinstance(value, int):
        return None if 1 <= value <= MAX_CONCURRENT_PER_SITE_LIMIT else _limit_bounds()
    return _limit_bounds()


def _limit_bounds() -> str:
    return f"must be an integer from 1 to {MAX_CONCURRENT_PER_SITE_LIMIT}"


def site_delay_problem(value: object) -> str | None:
    """Why `value` cannot be a site's delay in seconds, or None when it can."""
    if not isinstance(value, bool) and isinstance(value, int | float):
        return None if 0 <= value <= MAX_DELAY_SECONDS else _delay_bounds()
    return _delay_bounds()


def _delay_bounds() -> str:
    return f"must be a number from 0 to {MAX_DELAY_SECONDS:g}"


def parse_site_limit(text: str) -> int:
    """A site's limit from a flag, variable or annotation; ValueError saying the bounds."""
    try:
        value: object = int(text)
    except ValueError:
        value = text
    if problem := site_limit_problem(value):
        raise ValueError(f"{problem}, got {text!r}")
    return int(text)


def parse_site_delay(text: str) -> float:
    """A site's delay in seconds from a flag or variable; ValueError saying the bounds."""
    try:
        value: object = float(text)
    except ValueError:
        value = text
    if problem := site_delay_problem(value):
        raise ValueError(f"{problem}, got {text!r}")
    return float(text)


@dataclass(frozen=True)
class SitePoliteness:
    """The limits for rows whose payload does not set them (a worker pool's defaults)."""

    max_concurrent_per_site: int = DEFAULT_MAX_CONCURRENT_PER_SITE
    delay_seconds: float = DEFAULT_DELAY_SECONDS
    respect_robots_txt: bool = DEFAULT_RESPECT_ROBOTS_TXT

    def __post_init__(self) -> None:
        if problem := site_limit_problem(self.max_concurrent_per_site):
            raise ValueError(f"maxConcurrentPerSite {problem}")
        if problem := site_delay_problem(self.delay_seconds):
            raise ValueError(f"delaySeconds {problem}")


DEFAULT_POLITENESS: Final = SitePoliteness()
# No practical per-site limit and no delay: for tests and benchmarks of the queue itself, whose
# rows all share one made-up host.
NO_SITE_LIMIT: Final = SitePoliteness(max_concurrent_per_site=MAX_CONCURRENT_PER_SITE_LIMIT)


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
