"""Opening connections the way the queue functions expect them: autocommit, errors translated."""

from __future__ import annotations

from typing import Any, Final

import psycopg

from scrapeq_queue.errors import DatabaseUnavailable

# Fail fast when the server is down: callers (worker loop, operator, CLI) retry on their own.
CONNECT_TIMEOUT_SECONDS: Final = 10


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
