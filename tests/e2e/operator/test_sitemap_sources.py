"""A ScrapeJob whose URLs come from a sitemap index, through the operator and the real worker:
the operator queues one source row, the worker reads the index and its sitemaps (one of them
gzip-compressed, all served as text/html) and queues their pages, and `kubectl get
scrapejobs` counts the rows as they arrive (`n/N+` while a source expands, `n/N` once every
source ended) and ends Succeeded with every row done."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import scrapeq_queue
from scrapeq_queue.source_rows import ExpandedEntry, enqueue_expanded

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    loopback_site,
    owner_progress,
    run_queue_call,
    run_worker_until_idle,
    scrapejob,
    wait_for_status,
    work_rows,
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


def done_column(kubectl: Kubectl, namespace: str, name: str) -> str:
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    listed = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    return listed[name][2]


def test_the_done_column_says_rows_so_far_with_a_plus_while_a_source_expands_and_n_of_n_after(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
) -> None:
    operator_factory(empty_database_url)
    manifest = scrapejob("listing", urlsFrom={"sitemap": site + "/sitemaps/0.xml"}, render=False)
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    wait_for_status(
        kubectl,
        namespace,
        "listing",
        lambda status: status.get("progress") == "0/1+" and status.get("expanding") == 1,
        what="the source row alone, its size unknown",
    )

    # A worker holds the source and has queued the first batch of its entries; the rest of
    # the document is still to come.
    async def first_batch(connection: Any) -> scrapeq_queue.ClaimedJob:
        (source,) = await scrapeq_queue.claim_jobs(
            connection,
            worker_id="expander",
            queues=["default"],
            limit=1,
            lease_seconds=300,
            politeness=scrapeq_queue.NO_SITE_LIMIT,
        )
        entries = [ExpandedEntry(f"{site}/page/0/{page}") for page in range(3)]
        assert await enqueue_expanded(connection, source, entries, entries_done=3) is not None
        return source

    source = run_queue_call(empty_database_url, first_batch)
    status = wait_for_status(
        kubectl,
        namespace,
        "listing",
        lambda status: status.get("progress") == "0/4+",
        what="the rows queued so far",
    )
    assert (status["phase"], status["total"], status["expanding"]) == ("Running", 4, 1)
    assert done_column(kubectl, namespace, "listing") == "0/4+"

    # The source ends: the job's size is known.
    run_queue_call(
        empty_database_url,
        lambda connection: scrapeq_queue.complete_job(
            connection,
            source.id,
            source.attempt,
            result={"source": {"entries": 3, "enqueued": 3}},
            duration_seconds=1.0,
        ),
    )
    status = wait_for_status(
        kubectl,
        namespace,
        "listing",
        lambda status: status.get("progress") == "1/4",
        what="the job's size, known",
    )
    assert "expanding" not in status
    assert done_column(kubectl, namespace, "listing") == "1/4"

    assert len(work_rows(empty_database_url)) == 3
    wait_for_status(
        kubectl,
        namespace,
        "listing",
        lambda status: (status.get("phase"), status.get("progress")) == ("Succeeded", "4/4"),
        what="listing Succeeded",
    )
