"""A ScrapeJob's life on the real kube-apiserver and a real PostgreSQL, with the operator
running as a local process (`python -m scrapeq operator`).

The worker side is played by the test itself through the queue package's own claim_jobs,
complete_job and fail_job (the same calls the scrapeq worker makes), so that each test decides
exactly when a row finishes and how; no browser is involved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    scrapejob,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

URLS = [f"https://shop.example.com/item/{number}" for number in range(1, 6)]


def _create(kubectl: Kubectl, namespace: str, name: str, **spec: Any) -> str:
    manifest = scrapejob(name, **spec)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid: str = kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
    return uid


def _status(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = kubectl.get("scrapejob", name, namespace).get("status", {})
    return status


def _wait_for_rows(database_url: str, uid: str, count: int) -> None:
    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == count,
        within=30,
        what=f"{count} queue rows",
    )


def _wait_for_phase(kubectl: Kubectl, namespace: str, name: str, phase: str) -> dict[str, Any]:
    status: dict[str, Any] = eventually_blocking(
        lambda: (found := _status(kubectl, namespace, name)).get("phase") == phase and found,
        within=30,
        what=f"phase {phase}",
    )
    return status


def test_an_applied_scrapejob_is_queued_completed_and_shown_succeeded(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url)
    manifest = scrapejob("laptops", urls=URLS, extract={"title": {"selector": "h1"}})
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "laptops", namespace)["metadata"]["uid"]

    _wait_for_rows(empty_database_url, uid, len(URLS))
    assert len(work_rows(empty_database_url, limit=2)) == 2
    running = eventually_blocking(
        lambda: (found := _status(kubectl, namespace, "laptops")).get("succeeded") == 2 and found,
        within=30,
        what="2 succeeded rows in status",
    )
    assert running["phase"] == "Running"
    assert running["progress"] == f"2/{len(URLS)}"

    assert len(work_rows(empty_database_url)) == len(URLS) - 2
    status = _wait_for_phase(kubectl, namespace, "laptops", "Succeeded")
    assert status["progress"] == f"{len(URLS)}/{len(URLS)}"
    assert status["completionTime"] >= status["startTime"]
    assert status["preview"][0]["url"] in URLS
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Complete"]["status"] == "True"

    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    (header, row) = table.splitlines()
    assert header.split() == ["NAME", "PHASE", "DONE", "FAILED", "REASON", "AGE", "MESSAGE"]
    assert row.split()[:4] == ["laptops", "Succeeded", f"{len(URLS)}/{len(URLS)}", "0"]
    wide = kubectl.run("get", "scrapejobs", "-n", namespace, "-o", "wide").stdout
    assert URLS[0] in wide


def test_jobs_finished_as_soon_as_queued_cost_one_status_write_each_none_refused(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    # Each row completes as soon as it is queued, so the first status (written without
    # waiting for kopf's mark) races kopf's PATCH of that mark: neither a refused write nor a
    # second one may come of it. (No Running status is due for a minute, however slowly the
    # rows are worked: the one status write each is the Succeeded one.)
    operator = operator_factory(
        empty_database_url, environment={"SCRAPEQ_OPERATOR_STATUS_MIN_INTERVAL_SECONDS": "60"}
    )
    names = [f"quick-{number}" for number in range(12)]
    manifests = []
    for name in names:
        manifest = scrapejob(name, urls=[f"https://shop.example.com/{name}"])
        manifest["metadata"]["namespace"] = namespace
        manifests.append(manifest)
    kubectl.create({"apiVersion": "v1", "kind": "List", "items": manifests})
    done: list[object] = []
    eventually_blocking(
        lambda: done.extend(work_rows(empty_database_url)) or len(done) == len(names),
        within=60,
        what="every job's row completed",
    )
    for name in names:
        status = _wait_for_phase(kubectl, namespace, name, "Succeeded")
        conditions = {condition["type"]: condition["status"] for condition in status["conditions"]}
        assert conditions == {"Ready": "True", "Complete": "True"}, name
    patches = "scrapeq_operator_status_patches_total"
    assert operator.metric(patches, outcome="applied") == len(names)
    assert operator.metric(patches, outcome="conflict") == 0
    assert operator.metric(patches, outcome="error") == 0


def test_a_failing_url_shows_failed_with_its_error_in_status_and_an_event(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url)
    uid = _create(
        kubectl, namespace, "broken", url="https://broken.example.com/", retries={"limit": 0}
    )
    _wait_for_rows(empty_database_url, uid, 1)
    work_rows(empty_database_url, fail_with="HTTP 500 Internal Server Error")

    status = _wait_for_phase(kubectl, namespace, "broken", "Failed")
    assert status["failed"] == 1
    assert "HTTP 500 Internal Server Error" in status["lastError"]
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert conditions["Failed"]["reason"] == "URLsFailed"
    events = eventually_blocking(
        lambda: kubectl.run(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.name=broken,reason=URLsFailed",
            "-o",
            "name",
        ).stdout.strip(),
        within=30,
        what="a URLsFailed event",
    )
    assert events
    described = kubectl.run("describe", "scrapejob", "broken", "-n", namespace).stdout
    assert "HTTP 500 Internal Server Error" in described


def test_a_retry_pending_keeps_the_job_running(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    import scrapeq_queue

    from tests.e2e.operator.operator_parts import run_queue_call

    operator_factory(empty_database_url)
    uid = _create(
        kubectl,
        namespace,
        "flaky",
        url="https://flaky.example.com/",
        retries={"limit": 2, "backoffSeconds": 3600},
    )
    _wait_for_rows(empty_database_url, uid, 1)
    (job,) = work_rows(empty_database_url, hold=True)
    run_queue_call(
        empty_database_url,
        lambda conn: scrapeq_queue.retry_job(
            conn, job.id, job.attempt, error="timeout", reason="timeout", duration_seconds=1.0
        ),
    )
    status = eventually_blocking(
        lambda: (found := _status(kubectl, namespace, "flaky")).get("retrying") == 1 and found,
        within=30,
        what="a retrying row in status",
    )
    assert status["phase"] == "Running"
    assert "completionTime" not in status


def test_deleting_a_running_scrapejob_cancels_its_rows(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url)
    uid = _create(kubectl, namespace, "doomed", urls=URLS)
    _wait_for_rows(empty_database_url, uid, len(URLS))
    work_rows(empty_database_url, limit=1)
    work_rows(empty_database_url, limit=1, hold=True)

    kubectl.run("delete", "scrapejob", "doomed", "-n", namespace, "--timeout=30s")

    assert not kubectl.exists("scrapejob", "doomed", namespace)
    progress = owner_progress(empty_database_url, uid)
    assert (progress.succeeded, progress.cancelled) == (1, len(URLS) - 1)
    assert progress.pending + progress.processing + progress.retrying == 0


def test_restarting_the_operator_mid_run_creates_no_duplicates_and_status_converges(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    first = operator_factory(empty_database_url)
    uid = _create(kubectl, namespace, "resumed", urls=URLS)
    _wait_for_rows(empty_database_url, uid, len(URLS))
    work_rows(empty_database_url, limit=2)
    first.stop()

    # While no operator runs, the rest of the work finishes.
    work_rows(empty_database_url)
    operator_factory(empty_database_url)

    status = _wait_for_phase(kubectl, namespace, "resumed", "Succeeded")
    assert status["progress"] == f"{len(URLS)}/{len(URLS)}"
    assert owner_progress(empty_database_url, uid).total == len(URLS)


def test_a_job_whose_configmap_is_missing_is_not_ready_until_it_appears(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url)
    uid = _create(
        kubectl,
        namespace,
        "listed",
        urlsFrom={"configMapKeyRef": {"name": "url-list", "key": "urls.txt"}},
    )
    status = eventually_blocking(
        lambda: (found := _status(kubectl, namespace, "listed")).get("conditions") and found,
        within=30,
        what="a Ready condition",
    )
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == (
        "Ready",
        "False",
        "ConfigMapNotFound",
    )
    assert "url-list" in ready["message"]
    eventually_blocking(
        lambda: kubectl.run(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.name=listed,reason=ConfigMapNotFound",
            "-o",
            "name",
        ).stdout.strip(),
        within=30,
        what="a ConfigMapNotFound event",
    )

    kubectl.run(
        "create",
        "configmap",
        "url-list",
        "-n",
        namespace,
        "--from-literal=urls.txt=" + "\n".join(["# shop", *URLS, ""]),
    )
    _wait_for_rows(empty_database_url, uid, len(URLS))
    ready_again = eventually_blocking(
        lambda: any(
            condition["type"] == "Ready" and condition["status"] == "True"
            for condition in _status(kubectl, namespace, "listed").get("conditions", [])
        ),
        within=30,
        what="Ready=True",
    )
    assert ready_again
