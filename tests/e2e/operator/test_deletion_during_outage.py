"""Deleting a ScrapeJob while PostgreSQL is down: the finalizer holds the object until its
rows are cancelled, unless the user forces the deletion with scrapeq.io/force-delete.

Real kube-apiserver, the operator as a local process, and a PostgreSQL of the test's own that
it stops and starts.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scrapeq.local.postgres import LocalPostgres
from tests.e2e.operator.operator_parts import Kubectl, OperatorProcess, owner_progress, scrapejob
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

URLS = ["https://a.example.com/1", "https://a.example.com/2"]


def _create_queued_job(kubectl: Kubectl, namespace: str, database_url: str, name: str) -> str:
    manifest = scrapejob(name, urls=URLS)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid: str = kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == len(URLS),
        within=30,
        what="rows",
    )
    return uid


def _has_event(kubectl: Kubectl, namespace: str, name: str, reason: str) -> bool:
    found = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name},reason={reason}",
        "-o",
        "name",
    ).stdout
    return bool(found.strip())


def test_the_finalizer_waits_for_the_database_then_cancels_the_rows(
    kubectl: Kubectl,
    namespace: str,
    restartable_postgres: LocalPostgres,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    database_url = restartable_postgres.dsn()
    operator = operator_factory(database_url)
    uid = _create_queued_job(kubectl, namespace, database_url, "patient")

    restartable_postgres.stop_server("immediate")
    kubectl.run("delete", "scrapejob", "patient", "-n", namespace, "--wait=false")
    eventually_blocking(
        lambda: _has_event(kubectl, namespace, "patient", "CancelPending"),
        within=30,
        what="a CancelPending event",
    )

    # Several retries (1 s apart in tests, each counted as a failed cancel) happen while the
    # database stays down; the object must survive all of them.
    def three_failed_cancels_survived() -> bool:
        body = kubectl.get("scrapejob", "patient", namespace)
        assert body["metadata"]["deletionTimestamp"]
        assert "scrapeq.io/cancel-rows" in body["metadata"]["finalizers"]
        failed = operator.metric("scrapeq_operator_reconcile_errors_total", component="cancel")
        return failed >= 3

    eventually_blocking(
        three_failed_cancels_survived, within=30, what="three failed cancel attempts"
    )

    restartable_postgres.start()
    eventually_blocking(
        lambda: not kubectl.exists("scrapejob", "patient", namespace),
        within=60,
        what="the ScrapeJob to go once its rows are cancelled",
    )
    progress = owner_progress(database_url, uid)
    assert progress.cancelled == len(URLS)


def test_the_force_delete_annotation_lets_a_job_go_while_the_database_is_down(
    kubectl: Kubectl,
    namespace: str,
    restartable_postgres: LocalPostgres,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    database_url = restartable_postgres.dsn()
    operator_factory(database_url)
    uid = _create_queued_job(kubectl, namespace, database_url, "abandoned")

    restartable_postgres.stop_server("immediate")
    kubectl.run("delete", "scrapejob", "abandoned", "-n", namespace, "--wait=false")
    eventually_blocking(
        lambda: _has_event(kubectl, namespace, "abandoned", "CancelPending"),
        within=30,
        what="a CancelPending event",
    )
    assert kubectl.exists("scrapejob", "abandoned", namespace)
    kubectl.run(
        "annotate", "scrapejob", "abandoned", "-n", namespace, "scrapeq.io/force-delete=true"
    )
    eventually_blocking(
        lambda: not kubectl.exists("scrapejob", "abandoned", namespace),
        within=30,
        what="the forced deletion",
    )

    restartable_postgres.start()
    # Forced: the rows were never cancelled (the documented price of forcing).
    assert owner_progress(database_url, uid).pending == len(URLS)
