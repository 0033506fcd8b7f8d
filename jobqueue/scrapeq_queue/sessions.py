"""The session pool shared by the cluster: which (upstream proxy, cookie jar, user agent) a page
uses, and what its outcome does to the session's health on the site and to the proxy's.

The state lives in PostgreSQL (scrapeq_proxies, scrapeq_sessions, scrapeq_session_sites,
scrapeq_proxy_sites; the functions in sql/sessions.sql), so every worker sees the same
sessions, the same retirements and the same cookie jars (docs/queue.md, "Sessions";
docs/architecture.md, record 15). A proxy is known here only by its id (`proxy_id`): its
address and credentials stay sealed in the row's payload or in the worker pool's settings.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

import psycopg
from psycopg.types.json import Jsonb

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

# The proxy id of pages that use no upstream proxy: the worker connects itself. Such pages
# still get a session (a cookie jar and a user agent) with the same health rules.
DIRECT: Final = "direct"
# The bound of a session's cookie jar as stored (JSON bytes): about 15 cookies at the 4 KiB a
# browser allows each, and far more of the usual size; a jar over it keeps its first cookies.
MAX_SESSION_COOKIE_BYTES: Final = 64 * 1024
# At most this many sessions are recorded as tried on one row (the table's CHECK), so the
# setting of how many sessions a blocked row tries is at most this.
MAX_TRIED_SESSIONS: Final = 10
# A row blocked on this many different sessions fails for good as `blocked`: three sessions
# (three cookie jars, on different proxies while there are enough) say the site refuses the
# page itself, not the session.
DEFAULT_SESSIONS_PER_ROW: Final = 3
# A session blocked this many times in a row on a site is retired there: a block is the site
# marking the (proxy, cookies) pair, and another page with it is most likely blocked too
# (Crawlee retires a session at its first blocked status as well). A pool whose sites serve
# challenges at random raises it.
DEFAULT_BLOCKS_PER_SITE: Final = 1
# A proxy with this many failures (blocked pages, connection failures) in a row through it,
# with no page going well in between, is retired for every worker.
DEFAULT_PROXY_FAILURES_IN_A_ROW: Final = 5
# A proxy failing on this many sites (each with no page going well there since) is retired
# for every worker: a proxy that only one defended site refuses stays in use elsewhere.
DEFAULT_PROXY_FAILED_SITES: Final = 3
# How long a retired proxy stays out of use before pages try it again (Crawlee's sessions
# live about as long by default, 50 uses); a proxy that still fails is retired again at once
# after its next failures.
DEFAULT_PROXY_RETIRE_SECONDS: Final = 300.0

Outcome = Literal["ok", "blocked", "proxy_failed"]

# What a proxy id looks like (the table's CHECK says the same): never an address.
_PROXY_ID: Final = re.compile(r"^(direct|p[0-9a-f]{16})$")


def proxy_id(proxy_url: str | None) -> str:
    """The id by which the cluster knows an upstream proxy: `p` and 16 hex digits of a SHA-256
    of its URL (credentials included, so two accounts on one proxy are two proxies), or
    `direct` for none. The id carries neither the address nor the credentials (a URL with
    credentials cannot be found from it; one without could be by trying addresses, so the id
    is no secret), and is what metric labels, log lines and the database show."""
    if proxy_url is None:
        return DIRECT
    return "p" + hashlib.sha256(proxy_url.strip().encode()).hexdigest()[:16]


def bounded_cookies(cookies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`cookies` cut to the first ones whose JSON fits MAX_SESSION_COOKIE_BYTES (the stored
    bound), in their order."""
    kept: list[dict[str, Any]] = []
    size = 2  # the brackets of the array
    for cookie in cookies:
        length = len(json.dumps(cookie).encode()) + 2  # the cookie and its separator
        if size + length > MAX_SESSION_COOKIE_BYTES:
            break
        kept.append(cookie)
        size += length
    return kept


@dataclass(frozen=True)
class SessionRules:
    """When sessions and proxies are retired, and how many sessions a blocked row tries."""

    sessions_per_row: int = DEFAULT_SESSIONS_PER_ROW
    blocks_per_site: int = DEFAULT_BLOCKS_PER_SITE
    proxy_failures_in_a_row: int = DEFAULT_PROXY_FAILURES_IN_A_ROW
    proxy_failed_sites: int = DEFAULT_PROXY_FAILED_SITES
    proxy_retire_seconds: float = DEFAULT_PROXY_RETIRE_SECONDS

    def __post_init__(self) -> None:
        if not 1 <= self.sessions_per_row <= MAX_TRIED_SESSIONS:
            raise ValueError(
                f"sessions per row must be 1-{MAX_TRIED_SESSIONS}, got {self.sessions_per_row}"
            )
        for name, value in (
            ("blocks per site", self.blocks_per_site),
            ("proxy failures in a row", self.proxy_failures_in_a_row),
            ("proxy failed sites", self.proxy_failed_sites),
        ):
            if not 1 <= value <= 1000:
                raise ValueError(f"{name} must be 1-1000, got {value}")
        if not 0 < self.proxy_retire_seconds <= 86400:
            raise ValueError(
                f"proxy retire seconds must be above 0 and at most 86400, "
                f"got {self.proxy_retire_seconds}"
            )


DEFAULT_SESSION_RULES: Final = SessionRules()


@dataclass(frozen=True)
class Session:
    """The session one page uses: its proxy's id, the user agent it speaks with (None: the
    worker's) and the cookie jar saved after its last page (a list of cookies as
    `{"name", "value", "domain", "path", "expires", "secure", "httpOnly"}`)."""

    session_id: int
    proxy_id: str
    user_agent: str | None
    cookies: tuple[dict[str, Any], ...]
    # How many sessions the row was blocked on before this one (its tried_sessions).
    tried: int = 0


@dataclass(frozen=True)
class SessionRecord:
    """What recording a page's outcome retired: the session on the site, the proxy everywhere."""

    session_retired: bool
    proxy_retired: bool


@translate_database_errors
async def choose_session(
    connection: psycopg.AsyncConnection[Any],
    *,
    job_id: int,
    attempt: int,
    host_key: str,
    proxy_ids: list[str],
    user_agent: str | None = None,
) -> Session | None:
    """The session for the next page of row (`job_id`, `attempt`) on site `host_key`, among the
    sessions of `proxy_ids` (the row's upstream proxies, [DIRECT] when it has none): the row's
    own session while it and its proxy are usable and it was not blocked on it, otherwise the
    healthiest for the site on a proxy the row was not blocked through (fewest blocks there,
    then least recently taken: taking counts as a use), a new session (with
    `user_agent`) where a usable proxy has none left. The choice is written to the row, and
    `Session.tried` says how many sessions the row was blocked on so far. None:
    every proxy of the row is retired (try the row again later). ValueError for an id that
    proxy_id did not make."""
    for given in proxy_ids:
        if not _PROXY_ID.match(given):
            raise ValueError(f"{given[:40]!r} is not a proxy id (p and 16 hex digits, or direct)")
    cursor = await connection.execute(
        statements.SESSION_CHOOSE,
        {
            "job_id": job_id,
            "attempt": attempt,
            "host_key": host_key,
            "proxy_ids": list(dict.fromkeys(proxy_ids)),
            "user_agent": user_agent,
        },
    )
    row = await cursor.fetchone()
    if row is None:
        return None
    session_id, chosen_proxy, chosen_agent, cookies, tried = row
    return Session(
        int(session_id), chosen_proxy, chosen_agent, tuple(cookies or ()), int(tried or 0)
    )


@translate_database_errors
async def record_session(
    connection: psycopg.AsyncConnection[Any],
    *,
    job_id: int,
    attempt: int,
    session_id: int,
    host_key: str,
    outcome: Outcome,
    cookies: list[dict[str, Any]] | None = None,
    rules: SessionRules = DEFAULT_SESSION_RULES,
) -> SessionRecord:
    """Record how a page of row (`job_id`, `attempt`) went on `session_id` at `host_key`: save
    its jar (`cookies`, cut to the stored bound; None leaves the jar as it is), count a block
    against the session on the site (and add the session to the row's tried sessions), count a
    block or a proxy failure against the proxy, and retire either at `rules`' thresholds."""
    cursor = await connection.execute(
        statements.SESSION_RECORD,
        {
            "job_id": job_id,
            "attempt": attempt,
            "session_id": session_id,
            "host_key": host_key,
            "outcome": outcome,
            "cookies": None if cookies is None else Jsonb(bounded_cookies(cookies)),
            "blocks_per_site": rules.blocks_per_site,
            "failures_in_a_row": rules.proxy_failures_in_a_row,
            "failed_sites": rules.proxy_failed_sites,
            "retire_seconds": float(rules.proxy_retire_seconds),
        },
    )
    row = await cursor.fetchone()
    assert row is not None
    return SessionRecord(bool(row[0]), bool(row[1]))


@translate_database_errors
async def retired_proxies(
    connection: psycopg.AsyncConnection[Any], proxy_ids: list[str]
) -> list[str]:
    """Which of `proxy_ids` the cluster has retired now."""
    cursor = await connection.execute(statements.PROXIES_RETIRED, {"proxy_ids": proxy_ids})
    return [row[0] for row in await cursor.fetchall()]


__all__ = [
    "DEFAULT_BLOCKS_PER_SITE",
    "DEFAULT_PROXY_FAILED_SITES",
    "DEFAULT_PROXY_FAILURES_IN_A_ROW",
    "DEFAULT_PROXY_RETIRE_SECONDS",
    "DEFAULT_SESSIONS_PER_ROW",
    "DEFAULT_SESSION_RULES",
    "DIRECT",
    "MAX_SESSION_COOKIE_BYTES",
    "MAX_TRIED_SESSIONS",
    "Session",
    "SessionRecord",
    "SessionRules",
    "bounded_cookies",
    "choose_session",
    "proxy_id",
    "record_session",
    "retired_proxies",
]
