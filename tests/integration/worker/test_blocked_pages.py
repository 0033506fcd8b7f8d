"""Blocked pages, proved with a real worker, PostgreSQL and a local defended site: once the site
starts refusing (403, or a challenge page matching a block marker, after a few pages), its rows
are `blocked`, retried by their own retry policy (not failed like a 404), and counted per rule;
a page that merely mentions the marker's text outside the marker's selector is not blocked
(docs/worker.md, "Blocked pages")."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
import scrapeq_queue as queue
from scrapeq_queue.payload import BlockMarker
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


CHALLENGE_MARKER = {"selector": "#challenge h1", "text": "Verify you are HUMAN"}


@pytest.mark.parametrize("render", [False, True], ids=["static", "browser"])
async def test_a_challenge_page_matching_a_jobs_marker_is_blocked_and_a_page_mentioning_it_is_not(
    polite_site: PoliteSite, settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    ids = await queue.enqueue_many(
        connection,
        [polite_site.url(SITE, f"/challenged/{n}") for n in range(4)],
        payload={"render": render, "blockMarkers": [CHALLENGE_MARKER]},
        max_retries=3,
    )
    worker = await run_burst(settings)

    rows = [await job_row(connection, job_id) for job_id in ids]
    # The first two pages mention "verify you are human" in a paragraph: not blocked.
    assert [row.status for row in rows[:2]] == ["completed", "completed"]
    assert "block marker" not in json.dumps(rows[0].result)  # the marker fields are not kept
    for row in rows[2:]:
        assert (row.status, row.retry_count, row.last_reason) == ("pending", 1, "blocked")
        assert row.last_error is not None
        assert "block marker" in row.last_error
    counted = worker.metrics.registry.get_sample_value(
        "scrapeq_worker_pages_blocked_total", {"queue": "default", "rule": "marker"}
    )
    assert counted == 2


async def test_a_pools_marker_blocks_the_challenge_page_of_a_job_that_names_none(
    polite_site: PoliteSite, settings: WorkerSettings, connection: Connection
) -> None:
    polite_site.guard_allows = 0
    [job_id] = await queue.enqueue_many(
        connection, [polite_site.url(SITE, "/challenged/0")], payload={"render": False}
    )
    await run_burst(settings, block_markers=(BlockMarker("#challenge"),))
    row = await job_row(connection, job_id)
    assert (row.status, row.last_reason) == ("pending", "blocked")
