"""Opening connections the way the queue functions expect them: autocommit, errors translated."""

from __future__ import annotations

import random
from typing import Any, Final

import psycopg

from scrapeq_queue.errors import DatabaseUnavailable

# Fail fast when the server is down: callers (worker loop, operator, CLI) retry on their own.
CONNECT_TIMEOUT_SECONDS: Final = 10

# Reconnect attempts after a lost database: the first after a quarter second, doubling up to
# one second, never longer. A client that tries at least once a second is back at work within
# about a second of the server, however long the outage was (a longer cap makes a long outage
# cost up to the cap again once the server is back). A refused connection costs the server
# nothing; the jitter keeps a hundred workers from arriving in the same instant.
RECONNECT_FIRST_SECONDS: Final = 0.25
RECONNECT_MAX_SECONDS: Final = 1.0


async def connect(
    conninfo: str, *, application_name: str = "scrapeq"
) -> psycopg.AsyncConnection[Any]:
    """Open an autocommit async connection; DatabaseUnavailable when the server is unreachable."""
    try:
        return await psycopg.AsyncConnection.connect(
            conninfo,
            autocommit=True,
            application_name=application_name,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
    except psycopg.OperationalError as error:
        raise DatabaseUnavailable(
            f"cannot connect to {describe_conninfo(conninfo)}: {error}".strip()
        ) from error


def reconnect_delay(failures: int) -> float:
    """Seconds to wait before the next attempt after `failures` consecutive failures (1 for
    the first): RECONNECT_FIRST_SECONDS doubling up to RECONNECT_MAX_SECONDS, times a jitter
    factor between 0.5 and 1."""
    exponent = min(max(0, failures - 1), 8)
    ceiling = min(RECONNECT_FIRST_SECONDS * 2.0**exponent, RECONNECT_MAX_SECONDS)
    return ceiling * random.uniform(0.5, 1.0)


def describe_conninfo(conninfo: str) -> str:
    """host:port/dbname of a connection string, without the password, for error messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "the database (unparsable connection string)"
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    dbname = params.get("dbname") or params.get("user") or ""
    return f"{host}:{port}/{dbname}"
