"""The whole path with the real worker: kubectl apply -> operator -> rows -> `scrapeq worker
--burst` scrapes a loopback site -> `kubectl get scrapejobs` shows Succeeded N/N (and Failed
with the worker's error for a page that answers 404).

Real kube-apiserver, PostgreSQL, operator process and worker process. The pages are static
(`render: false`), so no browser is involved; the worker is told to allow loopback addresses,
which its SSRF guard blocks otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    loopback_site,
    owner_progress,
    run_worker_until_idle,
    scrapejob,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

PAGES = {f"/product/{number}": f"Product {number}" for number in range(1, 4)}


def _page(path: str) -> bytes | None:
    title = PAGES.get(path)
    return None if title is None else f"<html><body><h1>{title}</h1></body></html>".encode()


@pytest.fixture
def site() -> Iterator[str]:
    """A static site on 127.0.0.1: three product pages; anything else is a 404."""
    with loopback_site(_page) as url:
        yield url


def _has_rows(database_url: str, uid: str, count: int) -> bool:
    return owner_progress(database_url, uid).total == count


def test_the_real_worker_completes_the_rows_and_kubectl_shows_the_outcome(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
) -> None:
    operator_factory(empty_database_url)
    products = scrapejob(
        "products",
        urls=[site + path for path in PAGES],
        render=False,
        extract={"title": {"selector": "h1"}},
    )
    missing = scrapejob("missing", url=site + "/gone", render=False, retries={"limit": 0})
    for manifest in (products, missing):
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
    uids = [
        kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
        for name in ("products", "missing")
    ]
    for uid, count in zip(uids, (len(PAGES), 1), strict=True):
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, count), within=30, what="rows"
        )

    worker = run_worker_until_idle(empty_database_url)
    assert worker.returncode == 0, worker.stderr[-3000:]

    def phases() -> dict[str, str]:
        listed = kubectl.run(
            "get",
            "scrapejobs",
            "-n",
            namespace,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{'\\n'}{end}",
        ).stdout
        return dict(line.split("=", 1) for line in listed.splitlines() if "=" in line)

    eventually_blocking(
        lambda: phases() == {"products": "Succeeded", "missing": "Failed"},
        within=30,
        what="products Succeeded and missing Failed",
    )
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows["products"][1:4] == ["Succeeded", f"{len(PAGES)}/{len(PAGES)}", "0"]
    assert rows["missing"][1:4] == ["Failed", "1/1", "1"]
    status = kubectl.get("scrapejob", "products", namespace)["status"]
    assert any("Product" in item["result"] for item in status["preview"])
    failed = kubectl.get("scrapejob", "missing", namespace)["status"]
    assert "404" in failed["lastError"]
