"""Recurring crawls on the real parts: kube-apiserver (the CRD's spec.recrawl and
status.recrawl), PostgreSQL, the operator process and a real `scrapeq worker` scraping a static
loopback site. A schedule's runs share one crawl memory: the second run's pages say unchanged
and are counted in its status; deleting the schedule forgets the memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import scrapeq_queue

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    WorkerProcesses,
    loopback_site,
    run_queue_call,
    scrapejob,
)
from tests.e2e.operator.test_schedules import apply_in, phase_of, runs
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(180)]


def _page(path: str) -> bytes:
    return f"<html><body><h1>Item {path}</h1></body></html>".encode()


@pytest.fixture
def site() -> Iterator[str]:
    with loopback_site(_page) as url:
        yield url


@pytest.fixture
def operator(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> Iterator[OperatorProcess]:
    process = operator_factory(empty_database_url)
    yield process
    kubectl.run("delete", "scrapejobs", "--all", "-n", namespace, "--timeout=60s", check=False)


def remembered(database_url: str, key: str, url: str) -> bool:
    memory = run_queue_call(
        database_url, lambda conn: scrapeq_queue.read_page_memory(conn, key, url)
    )
    return memory is not None


def test_a_schedules_second_run_finds_its_pages_unchanged_and_its_memory_goes_with_it(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
    workers: WorkerProcesses,
    site: str,
) -> None:
    workers.start(empty_database_url)
    urls = [f"{site}/item/1", f"{site}/item/2"]
    parent_uid = apply_in(
        kubectl,
        namespace,
        scrapejob(
            "catalogue",
            urls=urls,
            render=False,
            extract={"name": {"selector": "h1"}},
            schedule="@every 5s",
            concurrencyPolicy="Forbid",
        ),
    )

    def two_runs_succeeded() -> list[dict[str, Any]] | None:
        done = [
            item for item in runs(kubectl, namespace, "catalogue") if phase_of(item) == "Succeeded"
        ]
        return done[:2] if len(done) >= 2 else None

    first, second = eventually_blocking(
        two_runs_succeeded, within=90, every=0.5, what="two runs to succeed"
    )
    assert first["status"]["recrawl"] == {
        "changed": 2,
        "unchanged": 0,
        "withoutValidators": 2,
        "skipped": 0,
    }, operator.log_tail()
    assert second["status"]["recrawl"] == {
        "changed": 0,
        "unchanged": 2,
        "withoutValidators": 2,
        "skipped": 0,
    }
    assert '"changed":false' in second["status"]["preview"][0]["result"]

    key = scrapeq_queue.schedule_crawl_key(namespace, "catalogue", parent_uid)
    assert all(remembered(empty_database_url, key, url) for url in urls)

    kubectl.run("delete", "scrapejob", "catalogue", "-n", namespace, "--timeout=60s")
    eventually_blocking(
        lambda: not any(remembered(empty_database_url, key, url) for url in urls),
        within=30,
        what="the crawl memory to go with its schedule",
    )


def test_a_job_naming_a_crawl_key_skips_what_that_crawl_fetched_recently(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
    workers: WorkerProcesses,
    site: str,
) -> None:
    workers.start(empty_database_url)
    recrawl = {"key": "shop/catalogue", "after": "1h"}
    for name in ("monday", "tuesday"):
        apply_in(
            kubectl,
            namespace,
            scrapejob(name, urls=[f"{site}/item/9"], render=False, recrawl=recrawl),
        )
        status = eventually_blocking(
            lambda name=name: (
                (s := kubectl.get("scrapejob", name, namespace).get("status", {})).get("phase")
                == "Succeeded"
                and s
            ),
            within=60,
            what=f"{name} to succeed",
        )
    assert status["recrawl"]["skipped"] == 1, operator.log_tail()
    assert status["recrawl"]["unchanged"] == 1


@pytest.mark.parametrize(
    ("recrawl", "message"),
    [
        ({"key": "catalogue", "after": "six hours"}, "spec.recrawl.after"),
        ({"key": "", "after": "1h"}, "spec.recrawl.key"),
    ],
)
def test_an_invalid_recrawl_is_rejected_by_the_crd(
    kubectl: Kubectl, namespace: str, recrawl: dict[str, Any], message: str
) -> None:
    manifest = scrapejob("invalid", url="https://a.example.com/", recrawl=recrawl)
    result = kubectl.create(
        {**manifest, "metadata": {"name": "invalid", "namespace": namespace}}, check=False
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_recrawl_after_without_a_crawl_makes_the_job_not_ready(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    apply_in(
        kubectl,
        namespace,
        scrapejob("lonely", url="https://a.example.com/", recrawl={"after": "1h"}),
    )

    def not_ready() -> dict[str, Any] | None:
        status = kubectl.get("scrapejob", "lonely", namespace).get("status", {})
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return ready if ready.get("status") == "False" else None

    ready = eventually_blocking(not_ready, within=30, what="Ready=False")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.recrawl.after needs a crawl" in ready["message"]
