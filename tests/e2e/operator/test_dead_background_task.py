"""A background loop of the operator that dies (a bug its own error handling did not catch)
stops the operator with exit status 1, so that its pod restarts, instead of leaving it running
without that loop.

The fault is injected into a real `scrapeq operator` process through a `sitecustomize` module:
the retention loop raises as it starts. Real kube-apiserver and PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.operator.operator_parts import (
    FAST_OPERATOR_ENVIRONMENT,
    Kubectl,
    run_operator_command,
)

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(120)]

FAULT = """
import scrapeq_operator.retention as retention


async def broken_run(self):
    raise RuntimeError("injected: the retention loop died")


retention.Retention.run = broken_run
"""


def test_a_background_loop_that_dies_stops_the_operator_with_status_1(
    kubectl: Kubectl, namespace: str, database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(FAULT)
    result = run_operator_command(
        "--namespace",
        namespace,
        environment={
            **FAST_OPERATOR_ENVIRONMENT,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
            "KUBECONFIG": str(kubectl.kubeconfig),
            "DATABASE_URL": database_url,
        },
        timeout=90,
    )

    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    assert "background task retention died" in output
    assert "injected: the retention loop died" in output
    assert "scrapeq operator: stopped: background task retention died" in result.stderr
