"""Blocked pages, proved with a real worker, PostgreSQL and a local defended site: once the site
starts refusing (403 after a few pages), its rows are `blocked`, retried by their own retry
policy (not failed like a 404), and counted per rule (docs/worker.md, "Blocked pages")."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import scrapeq_queue as queue
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .polite_site import ALLOW_HOSTS, PoliteSite, running_polite_site

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

SITE = "127.0.0.5"


@pytest.fixture
def polite_site() -> Iterator[PoliteSite]:
    yield from running_polite_site()


@pytest.fixture
def settings(worker_settings: WorkerSettings) -> WorkerSettings:
    return dataclasses.replace(
        worker_settings, allow_networks=parse_networks(ALLOW_HOSTS), max_concurrent_per_site=1
    )


@pytest.mark.parametrize("render", [False, True], ids=["static", "browser"])
async def test_pages_a_site_refuses_after_a_few_requests_are_blocked_and_retried(
    polite_site: PoliteSite, settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    ids = await queue.enqueue_many(
        connection,
        [polite_site.url(SITE, f"/guarded/{n}") for n in range(4)],
        payload={"render": render},
        max_retries=3,
    )
    worker = await run_burst(settings)

    rows = [await job_row(connection, job_id) for job_id in ids]
    assert [row.status for row in rows[:2]] == ["completed", "completed"]
    for row in rows[2:]:
        assert (row.status, row.retry_count, row.last_reason) == ("pending", 1, "blocked")
        assert row.last_error is not None
        assert "HTTP 403" in row.last_error
    counted = worker.metrics.registry.get_sample_value(
        "scrapeq_worker_pages_blocked_total", {"queue": "default", "rule": "status"}
    )
    assert counted == 2
