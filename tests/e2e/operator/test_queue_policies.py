"""QueuePolicies on the real parts (kube-apiserver, PostgreSQL, the operator process): a ScrapeJob
whose namespace no policy grants its queue, or its priority, queues nothing, says Admitted=False
with the reason and an Event naming the namespace, the queue and the policies consulted, and
starts by itself once the admin grants it (docs/operator.md, "Queue access")."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import scrapeq_queue

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    run_queue_call,
    scrapejob,
    wait_for_status,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(150)]


@pytest.fixture
def queue_policies(kubectl: Kubectl, namespace: str) -> Iterator[Callable[..., None]]:
    """Apply QueuePolicies (cluster-scoped, named after this test's namespace); every one is
    deleted afterwards, so that later tests run with none."""
    applied: list[str] = []

    def apply(name: str, namespaces: list[str], queues: list[str], **spec: Any) -> None:
        full_name = f"{namespace}-{name}"
        kubectl.apply(
            {
                "apiVersion": "scrapeq.io/v1alpha1",
                "kind": "QueuePolicy",
                "metadata": {"name": full_name},
                "spec": {"namespaces": namespaces, "queues": queues, **spec},
            }
        )
        if full_name not in applied:
            applied.append(full_name)

    yield apply
    for name in applied:
        kubectl.run("delete", "queuepolicy", name, "--ignore-not-found", check=False)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def create(kubectl: Kubectl, namespace: str, name: str, **spec: Any) -> str:
    manifest = scrapejob(name, **spec)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid: str = kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
    return uid


def events(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    listed = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name},reason={reason}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def test_a_queue_no_policy_grants_is_refused_and_starts_once_a_policy_grants_it(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    queue_policies: Callable[..., None],
) -> None:
    queue_policies("others", ["someone-else"], ["*"])
    operator_factory(database_url)

    plain = create(kubectl, namespace, "plain", url="https://shop.example.com/p/1", queue="bulk")
    urgent = create(
        kubectl,
        namespace,
        "urgent",
        url="https://shop.example.com/p/2",
        queue="bulk",
        priority=50,
    )

    for name in ("plain", "urgent"):
        status = wait_for_status(
            kubectl,
            namespace,
            name,
            lambda status: status.get("reason") == "QueueNotAllowed",
            what="the QueueNotAllowed reason",
        )
        admitted = condition(status, "Admitted")
        assert admitted is not None
        assert (admitted["status"], admitted["reason"]) == ("False", "QueueNotAllowed")
        assert f"namespace {namespace} may not use queue bulk" in admitted["message"]
        assert f"QueuePolicies consulted: {namespace}-others" in admitted["message"]
        ready = condition(status, "Ready")
        assert ready is not None
        assert ready["status"] == "False"
        assert status["phase"] == "Pending"
        [event] = eventually_blocking(
            lambda name=name: events(kubectl, namespace, name, "QueueNotAllowed"),
            within=15,
            what="a QueueNotAllowed Event",
        )
        assert event["type"] == "Warning"
        assert namespace in event["message"]
        assert "queue bulk" in event["message"]
        assert f"{namespace}-others" in event["message"]
    assert owner_progress(database_url, plain).total == 0
    assert owner_progress(database_url, urgent).total == 0

    # The admin grants the queue up to priority 10: the plain job starts by itself, the
    # urgent one is now refused for its priority.
    queue_policies("bulk", [namespace], ["bulk"], maxPriority=10)

    eventually_blocking(
        lambda: owner_progress(database_url, plain).total == 1,
        within=30,
        what="the plain job's row to be queued once a policy grants the queue",
    )
    status = wait_for_status(
        kubectl,
        namespace,
        "plain",
        lambda status: (condition(status, "Admitted") or {}).get("status") == "True",
        what="Admitted=True",
    )
    admitted = condition(status, "Admitted")
    assert admitted is not None
    assert admitted["reason"] == "QueueAllowed"
    assert f"granted by {namespace}-bulk" in admitted["message"]
    status = wait_for_status(
        kubectl,
        namespace,
        "urgent",
        lambda status: status.get("reason") == "PriorityNotAllowed",
        what="the PriorityNotAllowed reason",
    )
    assert "may use queue bulk up to priority 10, not 50" in status["message"]
    eventually_blocking(
        lambda: events(kubectl, namespace, "urgent", "PriorityNotAllowed"),
        within=15,
        what="a PriorityNotAllowed Event",
    )
    assert owner_progress(database_url, urgent).total == 0

    queue_policies("bulk", [namespace], ["bulk"], maxPriority=100)

    eventually_blocking(
        lambda: owner_progress(database_url, urgent).total == 1,
        within=30,
        what="the urgent job's row to be queued once a policy grants its priority",
    )
    wait_for_status(
        kubectl,
        namespace,
        "urgent",
        lambda status: status.get("reason") not in ("PriorityNotAllowed", "QueueNotAllowed"),
        what="the refusal to clear",
    )


def test_a_wildcard_policy_admits_every_namespace_and_queue(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    queue_policies: Callable[..., None],
) -> None:
    queue_policies("default", ["*"], ["*"])
    operator_factory(database_url)

    uid = create(
        kubectl,
        namespace,
        "anything",
        url="https://shop.example.com/p/3",
        queue="anything",
        priority=1000,
    )

    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == 1,
        within=30,
        what="the row to be queued",
    )
    status = kubectl.get("scrapejob", "anything", namespace).get("status") or {}
    # Admitted from the start: no condition is written for it (no extra API write).
    assert condition(status, "Admitted") is None


def test_the_policies_caps_on_rows_in_flight_are_written_to_the_queue_and_follow_changes(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    queue_policies: Callable[..., None],
) -> None:
    queue_policies("everyone", ["*"], ["*"], maxRowsInFlightPerNamespace=100)
    queue_policies("team", [namespace], ["bulk"], maxRowsInFlightPerNamespace=5)
    operator_factory(database_url)

    def caps() -> dict[str, int]:
        found: dict[str, int] = run_queue_call(database_url, scrapeq_queue.namespace_limits)
        return found

    eventually_blocking(
        lambda: caps() == {"*": 100, namespace: 5},
        within=30,
        what="the caps of the QueuePolicies in the queue",
    )

    queue_policies("team", [namespace], ["bulk"], maxRowsInFlightPerNamespace=500)

    eventually_blocking(
        lambda: caps() == {"*": 100, namespace: 100},
        within=30,
        what="the lowest cap (everyone's) to hold once the team's is raised above it",
    )
