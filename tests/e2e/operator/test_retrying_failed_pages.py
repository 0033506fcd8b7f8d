"""Failed rows come back and complete once the cause is fixed — asked for through the ScrapeJob
(`kubectl annotate scrapejob NAME scrapeq.io/retry-failed=...`) or from a shell
(`scrapeq retry --owner NAMESPACE/NAME`).

Real kube-apiserver, PostgreSQL, operator process and `scrapeq worker --burst` scraping a
loopback site whose one broken page answers 500 until the test repairs it. Static pages
(`render: false`), so no browser is involved. One more test stops a PostgreSQL of its own while
the annotation waits (its row is failed through the queue package, as a worker would).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import pytest

from scrapeq.local.postgres import LocalPostgres
from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    PageAnswer,
    loopback_site,
    owner_progress,
    run_worker_until_idle,
    scrapejob,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

RETRY_ANNOTATION = "scrapeq.io/retry-failed"
PAGES = {f"/product/{number}": f"Product {number}" for number in range(1, 4)}
BROKEN_PAGE = "/product/3"


@dataclass
class Site:
    """A loopback site; `BROKEN_PAGE` answers 500 while `broken` is set."""

    url: str
    broken: threading.Event


@pytest.fixture
def site() -> Iterator[Site]:
    broken = threading.Event()
    broken.set()

    def answer(path: str) -> PageAnswer:
        title = PAGES.get(path)
        if title is None:
            return None
        if path == BROKEN_PAGE and broken.is_set():
            return 500
        return f"<html><body><h1>{title}</h1></body></html>".encode()

    with loopback_site(answer) as url:
        yield Site(url, broken)


def run_burst(database_url: str) -> None:
    worker = run_worker_until_idle(database_url)
    assert worker.returncode == 0, worker.stderr[-3000:]


def status_of(kubectl: Kubectl, namespace: str) -> dict[str, object]:
    status: dict[str, object] = kubectl.get("scrapejob", "products", namespace).get("status", {})
    return status


def wait_for_phase(kubectl: Kubectl, namespace: str, phase: str) -> dict[str, object]:
    status: dict[str, object] = eventually_blocking(
        lambda: (lambda status: status if status.get("phase") == phase else None)(
            status_of(kubectl, namespace)
        ),
        within=30,
        what=f"products to be {phase}",
    )
    return status


def a_failed_scrapejob(kubectl: Kubectl, namespace: str, database_url: str, site: Site) -> None:
    """Create `products` (three pages, no retries), scrape it while one page answers 500, see
    it Failed with 1 of 3 failed, then repair the site."""
    manifest = scrapejob(
        "products",
        urls=[site.url + path for path in PAGES],
        render=False,
        extract={"title": {"selector": "h1"}},
        retries={"limit": 0},
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "products", namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == len(PAGES),
        within=30,
        what="rows for products",
    )
    run_burst(database_url)
    failed = wait_for_phase(kubectl, namespace, "Failed")
    assert (failed["succeeded"], failed["failed"]) == (len(PAGES) - 1, 1)
    assert "500" in str(failed["lastError"])
    site.broken.clear()


def events(kubectl: Kubectl, namespace: str, reason: str) -> list[dict[str, object]]:
    listed = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name=products,reason={reason}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, object]] = json.loads(listed)["items"]
    return items


def requeued_events(kubectl: Kubectl, namespace: str) -> list[dict[str, object]]:
    return events(kubectl, namespace, "FailedRowsRequeued")


def has_event(kubectl: Kubectl, namespace: str, reason: str) -> bool:
    return bool(events(kubectl, namespace, reason))


def test_the_retry_failed_annotation_requeues_failed_rows_once_and_they_complete(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: Site,
) -> None:
    operator = operator_factory(empty_database_url)
    a_failed_scrapejob(kubectl, namespace, empty_database_url, site)

    kubectl.run("annotate", "scrapejob", "products", "-n", namespace, f"{RETRY_ANNOTATION}=now")

    def annotation_removed() -> bool:
        annotations = kubectl.get("scrapejob", "products", namespace)["metadata"].get(
            "annotations", {}
        )
        return RETRY_ANNOTATION not in annotations

    eventually_blocking(annotation_removed, within=30, what="the operator to remove the annotation")
    events = eventually_blocking(
        partial(requeued_events, kubectl, namespace), within=30, what="a FailedRowsRequeued event"
    )
    assert len(events) == 1, events
    assert events[0]["type"] == "Normal"
    assert "re-queued 1 failed row(s)" in str(events[0]["message"])
    # The re-queued row is pending again: the job is Running until a worker takes it.
    running = wait_for_phase(kubectl, namespace, "Running")
    assert (running["failed"], running["pending"]) == (0, 1)

    run_burst(empty_database_url)

    succeeded = wait_for_phase(kubectl, namespace, "Succeeded")
    assert (succeeded["succeeded"], succeeded["failed"]) == (len(PAGES), 0)
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    assert table.splitlines()[1].split()[1:4] == ["Succeeded", f"{len(PAGES)}/{len(PAGES)}", "0"]
    # Acted on once: no second event, and the log shows one re-queue.
    assert len(requeued_events(kubectl, namespace)) == 1
    assert operator.log_tail(200_000).count("re-queued 1 failed rows") == 1


def test_scrapeq_retry_by_owner_requeues_failed_rows_and_they_complete(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: Site,
) -> None:
    operator_factory(empty_database_url)
    a_failed_scrapejob(kubectl, namespace, empty_database_url, site)

    retried = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapeq",
            "retry",
            "--database-url",
            empty_database_url,
            "--owner",
            f"{namespace}/products",
        ],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == "re-queued 1 failed job(s)"
    wait_for_phase(kubectl, namespace, "Running")
    run_burst(empty_database_url)
    succeeded = wait_for_phase(kubectl, namespace, "Succeeded")
    assert (succeeded["succeeded"], succeeded["failed"]) == (len(PAGES), 0)


def test_the_annotation_stays_while_the_database_is_down_and_is_acted_on_when_it_is_back(
    kubectl: Kubectl,
    namespace: str,
    restartable_postgres: LocalPostgres,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    database_url = restartable_postgres.dsn()
    operator_factory(database_url)
    manifest = scrapejob("products", urls=["https://a.example.com/1"], retries={"limit": 0})
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "products", namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == 1, within=30, what="rows"
    )
    work_rows(database_url, fail_with="HTTP 500")
    wait_for_phase(kubectl, namespace, "Failed")

    restartable_postgres.stop_server("immediate")
    kubectl.run("annotate", "scrapejob", "products", "-n", namespace, f"{RETRY_ANNOTATION}=now")
    eventually_blocking(
        lambda: has_event(kubectl, namespace, "RetryFailedPending"),
        within=30,
        what="a RetryFailedPending event",
    )
    annotations = kubectl.get("scrapejob", "products", namespace)["metadata"]["annotations"]
    assert RETRY_ANNOTATION in annotations

    restartable_postgres.start()
    eventually_blocking(
        lambda: bool(requeued_events(kubectl, namespace)),
        within=60,
        what="the re-queue once the database is back",
    )
    assert "re-queued 1 failed row(s)" in str(requeued_events(kubectl, namespace)[0]["message"])
    annotations = kubectl.get("scrapejob", "products", namespace)["metadata"].get("annotations", {})
    assert RETRY_ANNOTATION not in annotations
    progress = owner_progress(database_url, uid)
    assert (progress.failed, progress.pending) == (0, 1)
