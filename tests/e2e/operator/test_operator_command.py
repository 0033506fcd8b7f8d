"""`scrapeq operator` at start: it migrates the queue schema, or refuses clearly to run on an
old schema when told not to migrate, waits for a database that is still starting, and explains
one it cannot reach.

Real PostgreSQL; these paths end before the operator talks to Kubernetes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
import scrapeq_queue

from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import free_port
from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    run_operator_command,
    run_queue_call,
)
from tests.waiting import eventually_blocking

pytestmark = pytest.mark.postgres


def _run_operator(*arguments: str, database_url: str) -> subprocess.CompletedProcess[str]:
    return run_operator_command(
        *arguments, environment={"DATABASE_URL": database_url, "KUBECONFIG": "/nonexistent"}
    )


def test_without_migrations_the_operator_refuses_an_old_schema(empty_database_url: str) -> None:
    result = _run_operator("--no-migrate", database_url=empty_database_url)
    assert result.returncode == 2
    assert "refusing to start" in result.stderr
    assert "scrapeq migrate" in result.stderr
    assert not run_queue_call(empty_database_url, scrapeq_queue.schema_is_current)


def test_an_unreachable_database_is_explained() -> None:
    unreachable = f"postgresql://scrapeq@127.0.0.1:{free_port()}/postgres?connect_timeout=2"
    result = _run_operator("--database-wait-seconds", "1", database_url=unreachable)
    assert result.returncode == 3
    assert "waiting up to 1 s for the database" in result.stderr
    assert "cannot start" in result.stderr
    assert "database unavailable" in result.stderr


def test_the_operator_waits_for_a_database_that_starts_after_it(
    restartable_postgres: LocalPostgres,
) -> None:
    restartable_postgres.stop_server("fast")
    env = {**os.environ, "DATABASE_URL": restartable_postgres.dsn(), "KUBECONFIG": "/nonexistent"}
    operator = subprocess.Popen(
        [sys.executable, "-m", "scrapeq", "operator", "--database-wait-seconds", "40"],
        cwd=REPOSITORY_ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert operator.stderr is not None
        first_line = operator.stderr.readline()  # blocks until the operator has tried once
        assert "waiting up to 40 s for the database" in first_line
        restartable_postgres.start()
        # Past the wait the operator migrates, then goes on to Kubernetes (none here).

        def migrated() -> bool:
            assert operator.poll() is None, "the operator exited instead of waiting"
            return _schema_is_current(restartable_postgres.dsn())

        eventually_blocking(migrated, within=30, what="the operator to migrate")
    finally:
        operator.kill()
        operator.communicate()


def _schema_is_current(dsn: str) -> bool:
    try:
        return run_queue_call(dsn, scrapeq_queue.schema_is_current)
    except (scrapeq_queue.QueueError, psycopg.Error):
        return False
