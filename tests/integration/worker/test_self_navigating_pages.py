"""A page that navigates itself while the worker extracts it (a script redirect right after
load, or during a waitFor) ends its row with an outcome at once — never `processing` until the
lease expires (docs/worker.md, "What happens when — the documented end states")."""

from __future__ import annotations

import time

import pytest
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .site import HostileSite
from .test_page_semantics import insert_classic_row

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(90)]

FINAL_PAGE = (
    "<html><head><title>Final</title></head><body>"
    "<h1 class='name arrived'>Arrived</h1></body></html>"
)


def redirecting_page(target: str, delay_ms: int) -> str:
    return (
        "<html><head><title>Leaving</title></head><body><h1 class='name'>Leaving</h1>"
        f"<script>setTimeout(function () {{ location.href = '{target}'; }}, {delay_ms});"
        "</script></body></html>"
    )


@pytest.mark.parametrize(
    ("delay_ms", "wait_for"),
    [(0, None), (50, None), (300, None), (200, ".arrived"), (600, ".arrived")],
    ids=["at-once", "50ms", "300ms", "during-waitFor-200ms", "during-waitFor-600ms"],
)
async def test_a_page_that_redirects_itself_is_extracted_from_where_it_lands(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    delay_ms: int,
    wait_for: str | None,
) -> None:
    # With waitFor, what the job waits for exists only on the page it lands on: the
    # navigation comes while the extraction waits.
    site.pages["final"] = FINAL_PAGE
    site.pages["leaving"] = redirecting_page("/page/final", delay_ms)
    payload: dict[str, object] = {"extract": {"name": "h1.name"}, "timeoutSeconds": 20}
    if wait_for is not None:
        payload["waitFor"] = wait_for
    job_id = await insert_classic_row(connection, site.url("/page/leaving"), payload)
    bystander_id = await insert_classic_row(connection, site.url("/static/1"))

    started = time.monotonic()
    await run_burst(worker_settings, lease_seconds=60)
    elapsed = time.monotonic() - started

    row = await job_row(connection, job_id)
    assert (await job_row(connection, bystander_id)).status == "completed"
    assert elapsed < 30, f"the run took {elapsed:.1f}s"
    assert row.status == "completed", (row.status, row.last_error, row.last_reason)
    assert row.result["fields"] == {"name": "Arrived"}
    assert row.result["final_url"] == site.url("/page/final")


async def test_a_page_that_keeps_navigating_itself_is_retried_with_a_clear_reason(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    # It reloads itself 100 ms after every load, and what the job waits for never appears.
    site.pages["restless"] = redirecting_page("/page/restless", 100)
    payload = {"extract": {"name": "h1.name"}, "waitFor": ".never", "timeoutSeconds": 20}
    job_id = await insert_classic_row(connection, site.url("/page/restless"), payload)
    bystander_id = await insert_classic_row(connection, site.url("/static/1"))

    started = time.monotonic()
    await run_burst(worker_settings, lease_seconds=60)
    elapsed = time.monotonic() - started

    row = await job_row(connection, job_id)
    assert row.status == "pending", (row.status, row.last_error)
    assert row.last_reason == "navigated_during_extraction"
    assert row.last_error is not None
    assert "kept navigating itself" in row.last_error
    assert (await job_row(connection, bystander_id)).status == "completed"
    # Well before the job's 20 s timeout, let alone the lease.
    assert elapsed < 15, f"the run took {elapsed:.1f}s"
