"""A ScrapeJob whose URLs come from a sitemap index, through the operator and the real worker:
the operator queues one source row, the worker reads the index and its sitemaps (one of them
gzip-compressed, all served as text/html) and queues their pages, and `kubectl get
scrapejobs` counts the rows as they arrive and ends Succeeded with every row done."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator

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

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(240)]

PAGES_PER_SITEMAP = 4
SITEMAPS = 2


@pytest.fixture
def site() -> Iterator[str]:
    base: list[str] = []

    def answer(path: str) -> bytes | None:
        if path == "/sitemap_index.xml":
            entries = "".join(
                f"<sitemap><loc>{base[0]}/sitemaps/{n}.xml</loc></sitemap>" for n in range(SITEMAPS)
            )
            return f"<sitemapindex>{entries}</sitemapindex>".encode()
        if path.startswith("/sitemaps/"):
            number = int(path.removeprefix("/sitemaps/").removesuffix(".xml"))
            entries = "".join(
                f"<url><loc>{base[0]}/page/{number}/{page}</loc></url>"
                for page in range(PAGES_PER_SITEMAP)
            )
            document = f"<urlset>{entries}</urlset>".encode()
            return gzip.compress(document) if number % 2 else document
        if path.startswith("/page/"):
            return b"<html><body><h1>a page</h1></body></html>"
        return None

    with loopback_site(answer) as url:
        base.append(url)
        yield url


def test_a_sitemap_scrapejob_queues_one_source_row_and_the_worker_queues_and_scrapes_its_pages(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
) -> None:
    operator_factory(empty_database_url)
    manifest = scrapejob(
        "catalogue", urlsFrom={"sitemap": site + "/sitemap_index.xml"}, render=False
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "catalogue", namespace)["metadata"]["uid"]
    # The operator queues the source row only: the worker reads the sitemap.
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 1, within=30, what="source row"
    )

    worker = run_worker_until_idle(empty_database_url)
    assert worker.returncode == 0, worker.stderr[-3000:]

    rows = 1 + SITEMAPS + SITEMAPS * PAGES_PER_SITEMAP
    assert owner_progress(empty_database_url, uid).total == rows

    def phase() -> str | None:
        status = kubectl.get("scrapejob", "catalogue", namespace).get("status") or {}
        return status.get("phase")

    eventually_blocking(lambda: phase() == "Succeeded", within=30, what="catalogue Succeeded")
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    listed = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert listed["catalogue"][1:4] == ["Succeeded", f"{rows}/{rows}", "0"]
    status = kubectl.get("scrapejob", "catalogue", namespace)["status"]
    assert status["firstURL"] == site + "/sitemap_index.xml"


def test_deleting_a_sitemap_scrapejob_cancels_its_source_row_and_what_it_queued(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
) -> None:
    operator_factory(empty_database_url)
    manifest = scrapejob("doomed", urlsFrom={"robots": site}, render=False)
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "doomed", namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 1,
        within=30,
        what="source row",
    )

    kubectl.run("delete", "scrapejob", "doomed", "-n", namespace, "--wait=true")

    progress = owner_progress(empty_database_url, uid)
    assert (progress.total, progress.cancelled) == (1, 1)
