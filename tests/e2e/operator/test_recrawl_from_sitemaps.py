"""A recurring crawl of a sitemap on the real parts: kube-apiserver, PostgreSQL, the operator
process with a real S3 server, and real `scrapeq worker` processes fetching a loopback catalogue
of 1,000 pages with validators and a sitemap with `lastmod`. The first scheduled run fetches
every page; ten pages change; the second run reads the sitemap, queues only what changed since
the first run (`changedSincePreviousRun`), fetches those ten alone, and its `changesOnly` output
holds exactly them (docs/scrapejob.md, "Recurring crawls")."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET
from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    WorkerProcesses,
    scrapejob,
)
from tests.e2e.operator.test_output import _store_environment
from tests.e2e.operator.test_schedules import apply_in, phase_of, runs
from tests.integration.worker.recrawl_site import RecrawlSite, running_recrawl_site
from tests.waiting import eventually_blocking

pytestmark = [
    pytest.mark.controlplane,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.timeout(420),
]

PAGES = 1000
CHANGED = tuple(range(0, PAGES, PAGES // 10))  # ten pages spread over the catalogue


@pytest.fixture
def site() -> Iterator[RecrawlSite]:
    yield from running_recrawl_site(sitemap_pages=PAGES)


def _output_lines(s3_server: LocalS3Server, status: dict[str, Any]) -> list[dict[str, Any]]:
    manifest = json.loads(
        s3_server.object_path(S3_BUCKET, status["output"]["manifest"]).read_text()
    )
    return [
        json.loads(line)
        for batch in manifest["batches"]
        for line in s3_server.object_path(S3_BUCKET, batch["key"]).read_text().splitlines()
    ]


def test_the_second_run_of_a_sitemap_crawl_fetches_and_outputs_only_the_ten_pages_that_changed(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    workers: WorkerProcesses,
    s3_server: LocalS3Server,
    site: RecrawlSite,
) -> None:
    operator = operator_factory(
        empty_database_url, environment=_store_environment(s3_server, namespace)
    )
    workers.start(empty_database_url, "--concurrency", "8")
    # The first run fetches every page; once it has, the site changes ten of them (with their
    # lastmod), before any second run can start.
    site.change_once_served(PAGES, CHANGED)
    apply_in(
        kubectl,
        namespace,
        scrapejob(
            "catalogue",
            urlsFrom={"sitemap": site.url("/sitemap.xml"), "changedSincePreviousRun": True},
            render=False,
            extract={"price": {"selector": ".price"}},
            politeness={"maxConcurrentPerSite": 8},
            output={"changesOnly": True, "batchSeconds": 1},
            schedule="@every 10s",
            concurrencyPolicy="Forbid",
            successfulRunsHistoryLimit=2,
        ),
    )

    def two_runs_with_output() -> list[dict[str, Any]] | None:
        done = [
            item["status"]
            for item in runs(kubectl, namespace, "catalogue")
            if phase_of(item) == "Succeeded" and "manifest" in item["status"].get("output", {})
        ]
        return done[:2] if len(done) >= 2 else None

    first, second = eventually_blocking(
        two_runs_with_output, within=360, every=1.0, what="two runs with their output"
    )

    # The first run fetched the catalogue once; the second fetched the ten changed pages alone
    # (the others were not queued: the sitemap said they had not changed since the first run).
    assert site.full_pages("/v/") == PAGES + len(CHANGED), operator.log_tail()
    assert site.answered_304("/v/") == 0
    assert first["recrawl"]["changed"] == PAGES
    assert second["recrawl"] == {
        "changed": len(CHANGED),
        "unchanged": 0,
        "withoutValidators": 0,
        "skipped": 0,
    }
    changed_urls = sorted(site.url(f"/v/{number}") for number in CHANGED)
    lines = _output_lines(s3_server, second)
    assert sorted(line["url"] for line in lines) == changed_urls
    assert all(line["result"]["changed"] is True for line in lines)
    assert {line["result"]["fields"]["price"] for line in lines} == {
        f"{number}.02" for number in CHANGED
    }
    # The first run's output holds every page once (each was new to the crawl).
    assert len({line["url"] for line in _output_lines(s3_server, first)}) == PAGES
