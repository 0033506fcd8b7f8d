"""robots.txt: read once per site and time-to-live, obeyed before any page of the site is fetched.

The file is fetched through the plain-HTTP engine (HttpEngine.fetch_text), so it passes the same
network guard as every page, and parsed with protego, Scrapy's parser (Google's rules: longest
match wins, `*` and `$` wildcards, `Crawl-delay`). What an answer means follows Google's
documented handling of robots.txt (docs/worker.md#robotstxt):

- 2xx: the rules apply (a file larger than MAX_ROBOTS_BYTES is read up to that size);
- 4xx (404, 403, ...): there are no rules, everything is allowed;
- 5xx, a timeout or a network error: the site is treated as disallowing everything for
  UNAVAILABLE_TTL_SECONDS; its rows retry later (reason `robots_unavailable`) instead of failing.
  An error of the worker's own (its upstream proxy refused it) is the job's error, as it would
  be for the page.

A URL the rules disallow fails for good with reason `robots_disallowed`. Each worker process keeps
the rules per origin (scheme, host, port: robots.txt belongs to an origin), and the cluster keeps
one copy of each file in the queue database (scrapeq_robots): a process that does not hold an
origin's rules reads that copy, and only when none holds does it take a short lease, fetch the
file and store it, while other workers wait for that copy. So a site's robots.txt is fetched
once per day for the whole cluster, and concurrent jobs of one origin in a process wait for a
single read. Without the database (it is down) a process fetches the file itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from protego import Protego
from scrapeq_queue import RobotsCopy

from .errors import PermanentFailure, RetryLater
from .user_agent import DEFAULT_PRODUCT_TOKEN

logger = logging.getLogger(__name__)

# A day, as Google caches robots.txt (up to 24 hours): a site's new rules apply within a day.
ROBOTS_TTL_SECONDS: Final = 24 * 3600.0
# How long a robots.txt that could not be read (5xx, timeout) counts as "disallow everything"
# before it is fetched again: short, so a site that was briefly down is crawled again soon.
UNAVAILABLE_TTL_SECONDS: Final = 60.0
# Google reads the first 500 KiB of a robots.txt and ignores the rest.
MAX_ROBOTS_BYTES: Final = 500 * 1024
# A robots.txt slower than this is as good as unavailable.
ROBOTS_TIMEOUT_SECONDS: Final = 10.0
# How long a worker may hold the cluster's lease on fetching an origin's robots.txt: the fetch's
# timeout and some margin. A worker that died holding it delays the others no longer than this.
SHARED_LEASE_SECONDS: Final = ROBOTS_TIMEOUT_SECONDS + 5.0
# How often a worker asks again for the copy another worker is fetching, and for how long at
# most (past the lease) before it fetches the file itself.
SHARED_POLL_SECONDS: Final = 0.1
SHARED_WAIT_SECONDS: Final = SHARED_LEASE_SECONDS + 5.0
# The product token robots.txt groups are matched against (User-agent: scrapeq) unless a site
# policy names another User-Agent (user_agent.product_token).
ROBOTS_USER_AGENT: Final = DEFAULT_PRODUCT_TOKEN
DISALLOWED_REASON: Final = "robots_disallowed"
UNAVAILABLE_REASON: Final = "robots_unavailable"

# The problem stored with a lease given back after a failed fetch (a copy that has expired
# already: nobody reads it, and the next row takes the lease).
RELEASED: Final = "the fetch failed before the site answered"
# Errors reading robots.txt that say nothing about the site (the pool's upstream proxy refused
# the worker): the job fails with them as its page would, not as robots_unavailable.
OWN_PROBLEMS: Final = frozenset({"upstream_proxy_error"})

Fetch = Callable[[str], Awaitable[tuple[int, str]]]  # url -> (status, text)


def respects_robots(payload: Mapping[str, Any], pool_default: bool) -> bool:
    """Whether a row obeys robots.txt: its payload's politeness.respectRobotsTxt, else the
    pool's setting."""
    politeness = payload.get("politeness")
    if isinstance(politeness, Mapping) and isinstance(politeness.get("respectRobotsTxt"), bool):
        return bool(politeness["respectRobotsTxt"])
    return pool_default


class SharedRobots(Protocol):
    """The cluster's copies of robots.txt (the worker, through the queue database)."""

    async def robots_copy(self, origin: str, lease_seconds: float) -> RobotsCopy | None:
        """The copy of `origin`'s file, or the lease to fetch it; None: no database."""

    async def store_robots_copy(self, origin: str, read: RobotsRead, ttl_seconds: float) -> None:
        """Store what fetching `origin`'s file gave, for `ttl_seconds` (ends the lease; with
        0, only ends it)."""


@dataclass(frozen=True)
class RobotsRead:
    """What one fetch of a robots.txt gave: the HTTP status (None when none came) and body,
    or the problem that kept it from being read."""

    status: int | None
    body: str | None = None
    problem: str | None = None

    @property
    def readable(self) -> bool:
        return self.status is not None and self.status < 500


@dataclass(frozen=True)
class RobotsVerdict:
    """What robots.txt says about one URL; `crawl_delay_seconds` is None when it sets none.
    `fresh` is True for the job whose check fetched the file (it records the Crawl-delay)."""

    crawl_delay_seconds: float | None
    fresh: bool


@dataclass
class _Entry:
    rules: Protego | None  # None: the file could not be read, everything is disallowed
    expires_at: float
    problem: str = ""


class RobotsRules:
    """The per-process robots.txt cache, in front of the cluster's copies (`shared`, when
    given). `fetch(url)` returns (status, text) and raises the worker's errors
    (HttpEngine.fetch_text with a timeout and size bound)."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        shared: SharedRobots | None = None,
        ttl_seconds: float = ROBOTS_TTL_SECONDS,
        unavailable_ttl_seconds: float = UNAVAILABLE_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._shared = shared
        self._ttl = ttl_seconds
        self._unavailable_ttl = unavailable_ttl_seconds
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._fetching: dict[str, asyncio.Future[_Entry]] = {}
        self.fetches = 0

    async def check(
        self, url: str, fetch: Fetch | None = None, agent: str = ROBOTS_USER_AGENT
    ) -> RobotsVerdict:
        """Raise PermanentFailure(robots_disallowed) when `url` may not be fetched by `agent`
        (a product token), or RetryLater(robots_unavailable) while the site's robots.txt cannot
        be read; otherwise return the verdict. URLs that are not http(s) are not checked (the
        guard refuses them). `fetch`, when given, reads the file if it is not cached (the way
        the job's page would be fetched: its own upstream proxies and User-Agent)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return RobotsVerdict(None, fresh=False)
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}"
        entry, fresh = await self._entry(origin, fetch or self._fetch)
        if entry.rules is None:
            raise RetryLater(
                f"robots.txt of {origin} could not be read ({entry.problem}); the site counts "
                f"as disallowing everything for {self._unavailable_ttl:g}s",
                reason=UNAVAILABLE_REASON,
            )
        if not entry.rules.can_fetch(url, agent):
            raise PermanentFailure(
                f"{url} is disallowed by {origin}/robots.txt", reason=DISALLOWED_REASON
            )
        delay = entry.rules.crawl_delay(agent)
        return RobotsVerdict(None if delay is None else float(delay), fresh=fresh)

    async def _entry(self, origin: str, fetch: Fetch) -> tuple[_Entry, bool]:
        entry = self._entries.get(origin)
        if entry is not None and entry.expires_at > self._clock():
            return entry, False
        pending = self._fetching.get(origin)
        if pending is not None:
            return await asyncio.shield(pending), False
        future: asyncio.Future[_Entry] = asyncio.get_running_loop().create_future()
        self._fetching[origin] = future
        try:
            entry, fetched = await self._read(origin, fetch)
            self._entries[origin] = entry
            future.set_result(entry)
            return entry, fetched
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._fetching[origin]

    async def _read(self, origin: str, fetch: Fetch) -> tuple[_Entry, bool]:
        """The origin's rules, from the cluster's copy when one holds; True when this call
        fetched the file."""
        if self._shared is not None:
            deadline = self._clock() + SHARED_WAIT_SECONDS
            while True:
                copy = await self._shared.robots_copy(origin, SHARED_LEASE_SECONDS)
                if copy is None:
                    break  # no database: read the file for this process alone
                if copy.held:
                    read = RobotsRead(copy.status, copy.body, copy.problem)
                    return self._from_read(read, copy.seconds_left), False
                if copy.leased:
                    read = await self._fetch_leased(origin, fetch, self._shared)
                    ttl = self._ttl if read.readable else self._unavailable_ttl
                    await self._shared.store_robots_copy(origin, read, ttl)
                    return self._from_read(read, ttl), True
                if self._clock() >= deadline:
                    break  # the worker holding the lease never stored a copy
                await asyncio.sleep(SHARED_POLL_SECONDS)
        read = await self._fetch_once(origin, fetch)
        return self._from_read(read, self._ttl if read.readable else self._unavailable_ttl), True

    async def _fetch_leased(self, origin: str, fetch: Fetch, shared: SharedRobots) -> RobotsRead:
        """Fetch the file while holding the cluster's lease on it. A fetch that ends in an
        error of the job's own (the guard refused the target, the worker's upstream proxy
        failed) says nothing about the site: the lease is given back at once, storing nothing
        that lasts, so the next row of the origin fetches instead of waiting out the lease."""
        try:
            return await self._fetch_once(origin, fetch)
        except Exception:
            # Should the database not take it, the lease lapses on its own.
            with contextlib.suppress(Exception):
                await shared.store_robots_copy(origin, RobotsRead(None, problem=RELEASED), 0.0)
            raise

    async def _fetch_once(self, origin: str, fetch: Fetch) -> RobotsRead:
        self.fetches += 1
        try:
            status, text = await fetch(f"{origin}/robots.txt")
        except RetryLater as error:
            if error.reason in OWN_PROBLEMS:
                raise  # the worker's problem, not the site's: the page would hit it too
            logger.warning("robots.txt of %s unavailable: %s", origin, error)
            return RobotsRead(None, problem=error.message)
        if status >= 500:
            return RobotsRead(status, problem=f"HTTP {status}")
        # A NUL byte cannot be stored in the cluster's copy; it means nothing to the rules.
        return RobotsRead(status, text.replace("\x00", "") if 200 <= status < 400 else None)

    def _from_read(self, read: RobotsRead, ttl_seconds: float) -> _Entry:
        expires_at = self._clock() + max(0.0, ttl_seconds)
        if not read.readable:
            return _Entry(None, expires_at, read.problem or f"HTTP {read.status}")
        assert read.status is not None
        if 200 <= read.status < 400:
            return _Entry(Protego.parse(read.body or ""), expires_at)
        return _Entry(Protego.parse(""), expires_at)  # 4xx (or 1xx): no rules


__all__ = [
    "DISALLOWED_REASON",
    "MAX_ROBOTS_BYTES",
    "ROBOTS_TIMEOUT_SECONDS",
    "ROBOTS_TTL_SECONDS",
    "SHARED_LEASE_SECONDS",
    "UNAVAILABLE_REASON",
    "UNAVAILABLE_TTL_SECONDS",
    "RobotsRead",
    "RobotsRules",
    "RobotsVerdict",
    "SharedRobots",
    "respects_robots",
]
