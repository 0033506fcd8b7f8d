"""The queue's contracts run twice where it matters: on a direct connection, and on one through
PgBouncer in transaction mode, as pods behind a pooler use the queue (docs/queue.md, "Through a
pooler").

The modules in POOLED_MODULES get `async_connection` in both modes; their other connections
(`database_url`: producers, listeners, checks) stay direct. Through the pooler the connection
is made as the worker and the operator make theirs in pooled mode: `prepared_statements=False`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import psycopg
import pytest
from scrapeq_queue import connect

from scrapeq.local.pgbouncer import LocalPgBouncer

# The claim, completion, lease, retry and per-site contracts. The rest of the suite (exports,
# migrations, retention, restarts) runs direct only: it keeps the suite's time in bounds, and
# none of it runs in a worker's or the operator's hot path.
POOLED_MODULES: Final = frozenset(
    {
        "test_job_lifecycle",
        "test_backoff_schedule",
        "test_host_politeness",
        "test_dead_jobs",
        "test_idle_hosts",
    }
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "async_connection" not in metafunc.fixturenames:
        return
    if metafunc.module.__name__.rsplit(".", 1)[-1] in POOLED_MODULES:
        metafunc.parametrize("connection_mode", ["direct", "pgbouncer"], indirect=True)


@pytest.fixture
def connection_mode(request: pytest.FixtureRequest) -> str:
    """How `async_connection` reaches PostgreSQL: `direct`, or `pgbouncer` (transaction mode)."""
    mode: str = getattr(request, "param", "direct")
    return mode


@pytest.fixture
async def async_connection(
    database_url: str, connection_mode: str, request: pytest.FixtureRequest
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit async connection to `database_url`, directly or through PgBouncer."""
    if connection_mode == "pgbouncer":
        pooler: LocalPgBouncer = request.getfixturevalue("pgbouncer")
        connection = await connect(pooler.pooled(database_url), prepared_statements=False)
    else:
        connection = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()
