"""The autoscaler on the real kube-apiserver: a worker Deployment's replicas follow its queue's
backlog up, down and to zero, and hold while PostgreSQL is down.

There is no kubelet, so the Deployment never gets pods; the test reads spec.replicas (what the
operator asked for through the scale subresource). The backlog is made with the queue package
(enqueue_many) and drained by the test acting as the worker (claim_jobs + complete_job). The
test starts its own PostgreSQL so that it can stop it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import scrapeq_queue

from scrapeq.local.postgres import LocalPostgres
from tests.e2e.operator.operator_parts import Kubectl, OperatorProcess, run_queue_call, work_rows
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

QUEUE = "autoscaled"
AUTOSCALER_ERRORS = "scrapeq_operator_reconcile_errors_total"
JOBS_PER_REPLICA = 2
# Short windows so the test sees every step in seconds; a scale to zero needs the cool-down
# to pass after the last work, which is longer than the window, so "down to 1" is observable.
POLICY_ANNOTATIONS = {
    "scrapeq.io/queue": QUEUE,
    "scrapeq.io/jobs-per-replica": str(JOBS_PER_REPLICA),
    "scrapeq.io/max-replicas": "4",
    "scrapeq.io/scale-down-stabilization-seconds": "1",
    "scrapeq.io/scale-to-zero-cooldown-seconds": "4",
}


def _worker_deployment(namespace: str, name: str = "scrapers") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"scrapeq.io/worker-pool": name},
            "annotations": POLICY_ANNOTATIONS,
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "worker", "image": "scrapeq-worker:test"}]},
            },
        },
    }


def _replicas(kubectl: Kubectl, namespace: str, name: str = "scrapers") -> int:
    return int(kubectl.get("deployment", name, namespace)["spec"]["replicas"])


def _decision(kubectl: Kubectl, namespace: str, name: str = "scrapers") -> dict[str, Any]:
    annotations = kubectl.get("deployment", name, namespace)["metadata"]["annotations"]
    raw = annotations.get("scrapeq.io/autoscaler-decision")
    return json.loads(raw) if raw else {}


def _wait_for_replicas(
    kubectl: Kubectl, namespace: str, count: int, name: str = "scrapers"
) -> None:
    eventually_blocking(
        lambda: _replicas(kubectl, namespace, name) == count,
        within=30,
        what=f"{count} replicas of {name}",
        every=0.1,
    )


def _enqueue(database_url: str, count: int, tag: str) -> None:
    """`count` rows, each of a site of its own (per-site limits hold none of them back)."""
    urls = [f"https://site{number}.test/{tag}" for number in range(count)]
    run_queue_call(database_url, lambda conn: scrapeq_queue.enqueue_many(conn, urls, queue=QUEUE))


def test_replicas_follow_the_backlog_up_down_to_zero_and_hold_during_an_outage(
    kubectl: Kubectl,
    namespace: str,
    restartable_postgres: LocalPostgres,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    database_url = restartable_postgres.dsn()
    kubectl.create(_worker_deployment(namespace))
    operator = operator_factory(database_url)

    _enqueue(database_url, 5, "first")
    _wait_for_replicas(kubectl, namespace, 3)
    assert _decision(kubectl, namespace)["reason"] == "ScaleUp"

    while work_rows(database_url, queue=QUEUE):
        pass
    _wait_for_replicas(kubectl, namespace, 1)
    assert _decision(kubectl, namespace)["reason"] == "ScaleDown"
    _wait_for_replicas(kubectl, namespace, 0)
    assert _decision(kubectl, namespace)["reason"] == "ScaleToZero"

    _enqueue(database_url, 4, "second")
    _wait_for_replicas(kubectl, namespace, 2)
    metrics = operator.metrics()
    pool = f'deployment="scrapers",namespace="{namespace}"'
    assert f"scrapeq_operator_pool_desired_replicas{{{pool}}} 2.0" in metrics
    # Each row is of a site of its own: all four are startable, none throttled, and the states
    # add up to the live rows.
    assert (
        f'scrapeq_operator_queue_backlog_jobs{{queue="{QUEUE}",state="startable"}} 4.0' in metrics
    )
    assert (
        f'scrapeq_operator_queue_backlog_jobs{{queue="{QUEUE}",state="throttled"}} 0.0' in metrics
    )

    restartable_postgres.stop_server("immediate")
    eventually_blocking(
        lambda: _decision(kubectl, namespace).get("reason") == "HoldDatabaseUnavailable",
        within=30,
        what="the autoscaler to hold",
    )
    # Observe the hold across three more autoscaler rounds (each one that cannot read the
    # backlog counts an error): replicas never move.
    failed_rounds = operator.metric(AUTOSCALER_ERRORS, component="autoscaler")

    def three_more_rounds_held() -> bool:
        assert _replicas(kubectl, namespace) == 2
        return operator.metric(AUTOSCALER_ERRORS, component="autoscaler") >= failed_rounds + 3

    eventually_blocking(
        three_more_rounds_held, within=30, what="three autoscaler rounds during the outage"
    )
    events = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        "involvedObject.name=scrapers,reason=HoldDatabaseUnavailable",
        "-o",
        "name",
    ).stdout
    assert events.strip()

    restartable_postgres.start()
    eventually_blocking(
        lambda: _decision(kubectl, namespace).get("reason") != "HoldDatabaseUnavailable",
        within=30,
        what="the autoscaler to resume after the outage",
    )
    assert _replicas(kubectl, namespace) == 2
    while work_rows(database_url, queue=QUEUE):
        pass
    _wait_for_replicas(kubectl, namespace, 0)


def _pod(namespace: str, name: str) -> dict[str, Any]:
    """A Pod of the pool, created directly: without a kubelet it stays Pending, but it exists
    for the ReplicaSet's deletion order, which is what the annotation is for."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "scrapers"}},
        "spec": {"containers": [{"name": "worker", "image": "scrapeq-worker:test"}]},
    }


def test_before_scaling_down_idle_pods_are_marked_cheaper_to_delete_than_busy_ones(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    deployment = _worker_deployment(namespace)
    deployment["metadata"]["annotations"] = {
        **POLICY_ANNOTATIONS,
        "scrapeq.io/jobs-per-replica": "1",
        "scrapeq.io/scale-to-zero-cooldown-seconds": "600",
    }
    kubectl.create(deployment)
    for name in ("scrapers-busy", "scrapers-idle"):
        kubectl.create(_pod(namespace, name))
    operator_factory(empty_database_url)

    _enqueue(empty_database_url, 3, "pods")
    _wait_for_replicas(kubectl, namespace, 3)
    # The busy pod's worker process (id <pod name>-<pid>) holds one row; the rest finish.
    work_rows(empty_database_url, queue=QUEUE, limit=1, hold=True, worker_id="scrapers-busy-7")
    work_rows(empty_database_url, queue=QUEUE, worker_id="scrapers-idle-9")
    _wait_for_replicas(kubectl, namespace, 1)

    def cost(pod: str) -> str | None:
        annotations = kubectl.get("pod", pod, namespace)["metadata"].get("annotations") or {}
        value = annotations.get("controller.kubernetes.io/pod-deletion-cost")
        return str(value) if value is not None else None

    assert cost("scrapers-idle") == "-1"
    assert cost("scrapers-busy") == "1"


def test_a_backlog_on_one_site_asks_only_for_the_replicas_its_per_site_limit_keeps_busy(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    deployment = _worker_deployment(namespace)
    deployment["metadata"]["annotations"] = {
        **POLICY_ANNOTATIONS,
        "scrapeq.io/jobs-per-replica": "1",
        "scrapeq.io/max-replicas": "10",
    }
    kubectl.create(deployment)
    operator_factory(empty_database_url)

    # 20 due pages of one site, 2 at a time per site (the default limit), and one page of
    # another site: 3 can start, so 3 replicas at one row each, not the pool's maximum.
    urls = [f"https://one-site.test/page/{number}" for number in range(20)]
    urls.append("https://other-site.test/")
    run_queue_call(
        empty_database_url, lambda conn: scrapeq_queue.enqueue_many(conn, urls, queue=QUEUE)
    )
    _wait_for_replicas(kubectl, namespace, 3)
    decision = _decision(kubectl, namespace)
    assert decision["work"] == 3, decision

    # A pool whose workers allow 5 pages per site counts 5 of the site's rows.
    wider = _worker_deployment(namespace, "wide-scrapers")
    wider["metadata"]["annotations"] = {
        **deployment["metadata"]["annotations"],
        "scrapeq.io/max-concurrent-per-site": "5",
    }
    kubectl.create(wider)
    _wait_for_replicas(kubectl, namespace, 6, "wide-scrapers")
    assert _decision(kubectl, namespace, "wide-scrapers")["work"] == 6
    assert _replicas(kubectl, namespace) == 3
