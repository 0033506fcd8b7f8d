"""Opening connections the way the queue functions expect them: autocommit, errors translated.

The queue package is the only one that opens database connections: a single connection
(`connect`, `current_schema_connection`), a pool shared by many short calls (`ConnectionPool`),
and the LISTEN session (notifications.py). Every failure to reach the database surfaces as
`DatabaseUnavailable`, so callers catch one type.

Nothing the queue functions run keeps state in the database session between two statements:
advisory locks are transaction-scoped, settings are function- or transaction-local, a named
cursor lives inside its transaction. So any statement may run on any server connection, which
is what a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) does. The one
exception is a protocol-level prepared statement, which psycopg makes on its own after a
statement ran `prepare_threshold` times on a connection: `prepared_statements=False` turns them
off for a connection that goes through such a pooler (docs/queue.md, "Through a pooler").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any, Final, TypeAlias

import psycopg
import psycopg_pool

from scrapeq_queue.errors import DatabaseUnavailable, database_errors_translated
from scrapeq_queue.migrations import require_current_schema

# What every queue function takes: an autocommit async connection.
Connection: TypeAlias = psycopg.AsyncConnection[Any]

# Fail fast when the server is down: callers (worker loop, operator, CLI) retry on their own.
CONNECT_TIMEOUT_SECONDS: Final = 10

# Reconnect attempts after a lost database: the first after a quarter second, doubling up to
# one second, never longer. A client that tries at least once a second is back at work within
# about a second of the server, however long the outage was (a longer cap makes a long outage
# cost up to the cap again once the server is back). A refused connection costs the server
# nothing; the jitter keeps a hundred workers from arriving in the same instant.
RECONNECT_FIRST_SECONDS: Final = 0.25
RECONNECT_MAX_SECONDS: Final = 1.0


def prepare_threshold(prepared_statements: bool) -> int | None:
    """psycopg's `prepare_threshold` for a connection: its default (prepare a statement after
    it ran 5 times) when prepared statements are allowed, None (never) through a pooler."""
    return PSYCOPG_PREPARE_THRESHOLD if prepared_statements else None


# psycopg's own default, kept for direct connections: repeated statements skip parsing.
PSYCOPG_PREPARE_THRESHOLD: Final = 5


async def connect(
    conninfo: str, *, application_name: str = "scrapeq", prepared_statements: bool = True
) -> Connection:
    """Open an autocommit async connection; DatabaseUnavailable when the server is unreachable.

    `prepared_statements=False`: the connection never prepares a statement on the server (a
    connection through a pooler in transaction mode)."""
    try:
        return await psycopg.AsyncConnection.connect(
            conninfo,
            autocommit=True,
            application_name=application_name,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            prepare_threshold=prepare_threshold(prepared_statements),
        )
    except psycopg.OperationalError as error:
        raise DatabaseUnavailable(
            f"cannot connect to {describe_conninfo(conninfo)}: {error}".strip()
        ) from error


@contextlib.asynccontextmanager
async def current_schema_connection(
    conninfo: str, *, application_name: str = "scrapeq", prepared_statements: bool = True
) -> AsyncIterator[Connection]:
    """A connection (closed on exit) to a database whose schema is current: DatabaseUnavailable
    when it cannot be reached, SchemaOutOfDate when `scrapeq migrate` has not run."""
    connection = await connect(
        conninfo, application_name=application_name, prepared_statements=prepared_statements
    )
    async with connection:
        await require_current_schema(connection)
        yield connection


# psycopg_pool waits for a connection with asyncio.wait_for. On Python 3.11 a cancel that lands
# as that wait completes is lost: wait_for returns the connection and the task runs on as if
# nobody had cancelled it, though its `cancelling()` count says otherwise (Python 3.12 rebuilt
# wait_for on asyncio.timeout, which delivers it). A loop stopped that way would never stop,
# so `connection` delivers the cancel itself and gives the connection back.
SWALLOWED_CANCEL: Final = "cancelled while the pool handed over a connection"


class ConnectionPool:
    """Autocommit connections shared by many short calls (the operator's handlers and loops).

    Callers first queue for one of `max_size` slots, without a deadline: a thousand callers at
    once wait their turn instead of timing out in the pool, and the pool's `timeout` then only
    measures whether PostgreSQL answers. Opening does not wait for the database: a server that
    is down at start must not stop a process from starting. `prepared_statements=False` for a
    pool behind a pooler in transaction mode (see `connect`).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        max_size: int,
        timeout: float,
        name: str,
        prepared_statements: bool = True,
    ) -> None:
        self._pool: psycopg_pool.AsyncConnectionPool[Connection] = psycopg_pool.AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "application_name": name,
                "prepare_threshold": prepare_threshold(prepared_statements),
            },
            timeout=timeout,
            check=psycopg_pool.AsyncConnectionPool.check_connection,
            open=False,
            name=name,
        )
        self._slots = asyncio.Semaphore(max_size)

    async def open(self) -> None:
        await self._pool.open(wait=False)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; DatabaseUnavailable when none can be had in `timeout` or the
        database fails while it is used."""
        async with self._slots:
            task = asyncio.current_task()
            cancels_before = task.cancelling() if task is not None else 0
            try:
                async with self._pool.connection() as connection:
                    if task is not None and task.cancelling() > cancels_before:
                        raise asyncio.CancelledError(SWALLOWED_CANCEL)
                    with database_errors_translated():
                        yield connection
            except psycopg_pool.PoolTimeout as error:
                raise DatabaseUnavailable(f"no database connection: {error}") from error

    async def close(self) -> None:
        await self._pool.close()


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


def conninfo_without_password(conninfo: str) -> str:
    """A connection string as `key=value` pairs without the password, for logs."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(unparsable)"
    params.pop("password", None)
    return " ".join(f"{key}={value}" for key, value in params.items())
