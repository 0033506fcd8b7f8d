"""Results for a user with only Kubernetes access: `kubectl exec deploy/<release>-operator --
scrapeq export -n NAMESPACE NAME` runs `scrapeq export` in the operator's pod, with nothing but
the pod's environment (DATABASE_URL from the chart's Secret, no kubeconfig). The real node
test runs it through kubectl exec; here the same command runs with the same environment on the
real parts (kube-apiserver, PostgreSQL, the operator process), after a ScrapeJob succeeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    scrapejob,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]


def _operator_pod_environment(database_url: str) -> dict[str, str]:
    """What the operator's container has: PATH and friends, DATABASE_URL, no kubeconfig."""
    kept = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME", "LANG"}}
    return {**kept, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}


@pytest.mark.timeout(120)
def test_a_succeeded_jobs_results_stream_as_json_lines_from_the_operators_environment(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(database_url)
    urls = ["https://shop.example.com/a", "https://shop.example.com/b"]
    manifest = scrapejob("laptops", urls=urls)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    eventually_blocking(
        lambda: (
            len(work_rows(database_url)) == 0
            and kubectl.get("scrapejob", "laptops", namespace).get("status", {}).get("phase")
            == "Succeeded"
        ),
        within=60,
        what="the job to be worked and Succeeded",
        every=0.5,
    )

    # The documented command, as `kubectl exec deploy/scrapeq-operator -- scrapeq export -n
    # NAMESPACE laptops` runs it (the pod's own namespace is the operator's, so the ScrapeJob's
    # is named), JSON Lines to stdout.
    exported = subprocess.run(
        [sys.executable, "-m", "scrapeq", "export", "-n", namespace, "laptops", "--output", "-"],
        cwd=REPOSITORY_ROOT,
        env=_operator_pod_environment(database_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(line["url"] for line in lines) == urls
    assert all(line["fields"] == {"title": f"page {line['url']}"} for line in lines)
    assert f"exported 2 result(s) of {namespace}/laptops" in exported.stderr
