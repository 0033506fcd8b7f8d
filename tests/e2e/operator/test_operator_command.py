"""`scrapeq operator` at start: it migrates the queue schema, or refuses clearly to run on an
old schema when told not to migrate, and explains a database it cannot reach.

Real PostgreSQL; these paths end before the operator talks to Kubernetes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import scrapeq_queue

from scrapeq.local.processes import free_port
from tests.e2e.operator.operator_parts import REPOSITORY_ROOT, run_queue_call

pytestmark = pytest.mark.postgres


def _run_operator(*arguments: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "KUBECONFIG": "/nonexistent"}
    return subprocess.run(
        [sys.executable, "-m", "scrapeq", "operator", *arguments],
        cwd=REPOSITORY_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_migrations_the_operator_refuses_an_old_schema(empty_database_url: str) -> None:
    result = _run_operator("--no-migrate", database_url=empty_database_url)
    assert result.returncode == 2
    assert "refusing to start" in result.stderr
    assert "scrapeq migrate" in result.stderr
    assert not run_queue_call(empty_database_url, scrapeq_queue.schema_is_current)


def test_an_unreachable_database_is_explained() -> None:
    unreachable = f"postgresql://scrapeq@127.0.0.1:{free_port()}/postgres?connect_timeout=2"
    result = _run_operator(database_url=unreachable)
    assert result.returncode == 3
    assert "cannot start" in result.stderr
    assert "database unavailable" in result.stderr
