"""A ScrapeJob on a queue that no worker pool serves is visible everywhere, on the real parts
(kube-apiserver, PostgreSQL, the operator process): a Stalled condition (NoWorkerPool) naming
the queue, the REASON and MESSAGE columns of `kubectl get`, a Warning Event, backlog metrics
for that queue, a line in the operator's log; and it all clears when a pool appears.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.operator.operator_parts import Kubectl, OperatorProcess, scrapejob, wait_for_status
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]


def _stalled(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Stalled"), None)


def _worker_pool(namespace: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{queue}-workers",
            "namespace": namespace,
            "labels": {"scrapeq.io/worker-pool": queue},
            "annotations": {"scrapeq.io/queue": f"default,{queue}"},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "workers"}},
            "template": {
                "metadata": {"labels": {"app": "workers"}},
                "spec": {"containers": [{"name": "worker", "image": "scrapeq-worker:test"}]},
            },
        },
    }


def _metric(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


@pytest.mark.timeout(120)
def test_a_job_on_a_queue_no_pool_serves_is_reported_until_a_pool_appears(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator = operator_factory(
        database_url, environment={"SCRAPEQ_OPERATOR_UNSERVED_QUEUE_GRACE_SECONDS": "0"}
    )
    manifest = scrapejob("laptops", url="https://shop.example.com/laptops", queue="shop")
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)

    status = wait_for_status(
        kubectl,
        namespace,
        "laptops",
        lambda status: status.get("reason") == "NoWorkerPool",
        what="the job to be reported as waiting for a worker pool",
    )
    stalled = _stalled(status)
    assert stalled is not None
    assert stalled["status"] == "True"
    assert "no worker pool serves queue shop" in stalled["message"]
    assert status["phase"] == "Pending"
    assert status["message"].startswith("no worker pool serves queue shop")

    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "PHASE", "DONE", "FAILED", "REASON", "AGE"]
    assert "MESSAGE" in header
    assert row.split()[:5] == ["laptops", "Pending", "0/1", "0", "NoWorkerPool"]
    assert "no worker pool serves queue shop" in row

    events = eventually_blocking(
        lambda: json.loads(
            kubectl.run(
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                "involvedObject.name=laptops,reason=NoWorkerPool",
                "-o",
                "json",
            ).stdout
        )["items"],
        within=15,
        what="a NoWorkerPool Event",
    )
    assert events[0]["type"] == "Warning"
    assert "queue shop" in events[0]["message"]

    metrics = operator.metrics()
    backlog = "scrapeq_operator_queue_backlog_jobs"
    assert _metric(metrics, backlog, queue="shop", state="startable") == 1
    assert _metric(metrics, backlog, queue="shop", state="throttled") == 0
    assert _metric(metrics, "scrapeq_operator_queue_worker_pools", queue="shop") == 0
    assert "queue shop has 1 due rows and no worker pool serves it" in operator.log_tail(50_000)

    kubectl.apply(_worker_pool(namespace, "shop"))
    cleared = wait_for_status(
        kubectl,
        namespace,
        "laptops",
        lambda status: _stalled(status) is None,
        what="the Stalled condition to clear once a pool serves the queue",
    )
    assert "reason" not in cleared
    assert "message" not in cleared
    eventually_blocking(
        lambda: (
            _metric(operator.metrics(), "scrapeq_operator_queue_worker_pools", queue="shop") == 1
        ),
        within=10,
        what="the pool to be counted for queue shop",
    )
    assert "queue shop is served again" in operator.log_tail(50_000)
