"""The worker against real Chromium and real PostgreSQL: what ends up in the queue for good
pages and for pages that attack or break the browser (docs/worker.md, "What happens when")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker
from websockets.client import connect as websocket_connect

from tests.waiting import eventually

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

EXTRACT = {
    "name": "h1.name",
    "price": {"selector": ".price"},
    "tags": {"selector": "li.tag", "all": True},
    "next": {"selector": "a.product", "attribute": "href"},
}


async def enqueue_pages(
    connection: Connection, urls: list[str], payload: dict[str, Any], **options: Any
) -> list[int]:
    ids = [
        await queue.enqueue(connection, url, payload=payload, dedup_key=url, **options)
        for url in urls
    ]
    assert all(job_id is not None for job_id in ids)
    return [job_id for job_id in ids if job_id is not None]


async def test_extraction_returns_the_values_the_page_script_rendered(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [job_id] = await enqueue_pages(
        connection, [site.url("/js/7")], {"waitFor": "h1.name", "extract": EXTRACT}
    )

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    result = row.result
    assert result["fields"] == {
        "name": "Laptop 7",
        "price": "7.99",
        "tags": ["new", "sale"],
        "next": "/js/8",
    }
    assert result["title"] == "Product 7"
    assert result["status"] == 200
    assert result["url"] == site.url("/js/7")
    assert result["final_url"] == site.url("/js/7")
    assert result["engine"] == "browser"
    assert site.url("/js/8") in result["links"]
    assert result["timing_ms"]["total_ms"] > 0


async def test_static_pages_are_extracted_without_a_browser(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [job_id] = await enqueue_pages(
        connection, [site.url("/static/3")], {"render": False, "extract": EXTRACT}
    )

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["engine"] == "http"
    assert row.result["fields"] == {
        "name": "Static 3",
        "price": "3.50",
        "tags": ["a", "b"],
        "next": "/static/4",
    }
    assert row.result["title"] == "Static 3"


# (path, payload, final status, attempt reason, words the error must contain)
HOSTILE_CASES = [
    pytest.param(
        "/loop",
        {"timeoutSeconds": 3},
        "failed",
        "script_hang",
        "Runtime.terminateExecution",
        id="infinite-js-loop",
    ),
    pytest.param(
        "/never-loads",
        {"timeoutSeconds": 3},
        "failed",
        "timeout",
        "the job's 3s timeout ran out",
        id="never-finishes-loading",
    ),
    pytest.param(
        "/stall",
        {"timeoutSeconds": 3},
        "failed",
        "timeout",
        "the job's 3s timeout ran out",
        # A server that never answers the document is slow, not a page whose script hangs.
        id="server-never-answers",
    ),
    pytest.param(
        "/huge",
        {"timeoutSeconds": 30},
        "failed",
        "response_too_large",
        "byte page limit",
        id="50-MB-page",
    ),
    pytest.param(
        "/to-metadata",
        {},
        "failed",
        "blocked_address",
        "169.254.169.254 is a link-local",
        id="redirect-to-cloud-metadata",
    ),
    pytest.param(
        "/to-metadata",
        {"render": False},
        "failed",
        "blocked_address",
        "169.254.169.254 is a link-local",
        id="redirect-to-cloud-metadata-plain-http",
    ),
    pytest.param(
        "/missing",
        {},
        "failed",
        "http_4xx",
        "HTTP 404",
        id="not-found-is-permanent",
    ),
]


@pytest.mark.parametrize(("path", "payload", "status", "reason", "words"), HOSTILE_CASES)
async def test_a_hostile_page_ends_in_its_documented_state_while_other_jobs_complete(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    path: str,
    payload: dict[str, Any],
    status: str,
    reason: str,
    words: str,
) -> None:
    [hostile] = await enqueue_pages(connection, [site.url(path)], payload, max_retries=0)
    good = await enqueue_pages(
        connection,
        [site.url(f"/js/{n}") for n in range(4)],
        {"waitFor": "h1.name", "extract": EXTRACT},
    )

    await run_burst(worker_settings)

    row = await job_row(connection, hostile)
    assert row.status == status
    assert row.last_reason == reason
    assert row.last_error is not None
    assert words in row.last_error
    for job_id in good:
        other = await job_row(connection, job_id)
        assert other.status == "completed", other.last_error


@pytest.mark.parametrize("render", [True, False], ids=["browser", "plain-http"])
async def test_a_file_url_is_refused_before_anything_is_read(
    worker_settings: WorkerSettings, connection: Connection, render: bool
) -> None:
    [job_id] = await enqueue_pages(connection, ["file:///etc/passwd"], {"render": render})

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "failed"
    assert row.last_reason == "blocked_scheme"
    assert row.last_error is not None
    assert "scheme 'file' is not allowed" in row.last_error
    assert row.result is None


async def test_an_image_on_a_forbidden_address_is_blocked_and_reported(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [job_id] = await enqueue_pages(
        connection, [site.url("/loopback-image")], {"extract": {"name": "h1.name"}}
    )

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"name": "Picture"}
    [blocked] = row.result["blocked_requests"]
    assert blocked["url"] == site.bystander_url("/pixel.png")
    assert blocked["reason"] == "blocked_address"
    assert "127.0.0.1 is a loopback address" in blocked["error"]
    assert site.bystander_hits == 0


async def test_a_429_is_retried_after_the_delay_the_site_asked_for(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [job_id] = await enqueue_pages(connection, [site.url("/too-many")], {})

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "pending"
    assert row.retry_count == 1
    assert row.last_reason == "blocked"
    assert row.last_error is not None
    assert "retry after 120s" in row.last_error
    cursor = await connection.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM scraping_jobs WHERE id = %s", (job_id,)
    )
    [[delay]] = await cursor.fetchall()
    assert 100 < float(delay) <= 120
    assert site.hits["/too-many"] == 1


async def test_a_non_html_document_is_recorded_not_rendered(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [browser_job] = await enqueue_pages(connection, [site.url("/document.pdf")], {})

    await run_burst(worker_settings)

    row = await job_row(connection, browser_job)
    assert row.status == "completed", row.last_error
    assert row.result["content_type"] == "application/pdf"
    assert row.result["rendered"] is False
    assert row.result["fields"] == {}


async def crash_renderer_showing(endpoint: str, url_part: str) -> None:
    """Crash the renderer of the tab whose URL contains `url_part`, from outside the worker,
    through the browser's DevTools endpoint (CDP Page.crash), and return once Chromium reports
    the crash (`Target.targetCrashed`): a request sent and not waited for may never be handled
    before this connection closes."""
    async with websocket_connect(endpoint, max_size=None) as cdp:

        async def call(method: str, params: dict[str, Any], session: str | None = None) -> Any:
            request_id = next(ids)
            message: dict[str, Any] = {"id": request_id, "method": method, "params": params}
            if session is not None:
                message["sessionId"] = session
            await cdp.send(json.dumps(message))
            if method == "Page.crash":
                return None  # the renderer dies instead of answering
            while True:
                answer = json.loads(await cdp.recv())
                if answer.get("id") == request_id:
                    assert "error" not in answer, answer
                    return answer["result"]
                events.append(answer)

        ids = iter(range(1, 1000))
        events: list[dict[str, Any]] = []
        # Crash events for every target from here on (setDiscoverTargets reports them).
        await call("Target.setDiscoverTargets", {"discover": True})
        targets = (await call("Target.getTargets", {}))["targetInfos"]
        [target] = [t for t in targets if t["type"] == "page" and url_part in t["url"]]
        attached = await call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        await call("Page.crash", {}, session=attached["sessionId"])

        def crashed(event: dict[str, Any]) -> bool:
            return (
                event.get("method") == "Target.targetCrashed"
                and event["params"]["targetId"] == target["targetId"]
            )

        async with asyncio.timeout(30):
            while not any(crashed(event) for event in events):
                events.append(json.loads(await cdp.recv()))


async def test_a_renderer_crash_fails_only_its_own_job(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    [victim] = await enqueue_pages(
        connection, [site.url("/never-loads")], {"timeoutSeconds": 60}, max_retries=0
    )
    good = await enqueue_pages(
        connection, [site.url(f"/js/{n}") for n in range(3)], {"waitFor": "h1.name"}
    )
    worker = Worker(worker_settings, install_signal_handlers=False)
    run = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: site.hits["/stall"] > 0, within=30, what="the victim page to start loading"
        )
        endpoint = worker.browser.debugging_endpoint
        assert endpoint is not None
        await crash_renderer_showing(endpoint, "/never-loads")
        assert await asyncio.wait_for(run, 60) == 0
    finally:
        worker.request_stop()
        if not run.done():
            await asyncio.wait_for(run, 30)

    row = await job_row(connection, victim)
    assert row.status == "failed"
    assert row.last_reason == "renderer_crash"
    assert row.last_error is not None
    assert "renderer crashed" in row.last_error
    for job_id in good:
        other = await job_row(connection, job_id)
        assert other.status == "completed", other.last_error


@pytest.mark.parametrize(
    "changes",
    [{"isolate_pages": True}, {"tab_reuse_pages": 1}],
    ids=["incognito-context-per-job", "new-tab-per-job"],
)
async def test_the_isolation_modes_extract_the_same_values(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    changes: dict[str, Any],
) -> None:
    ids = await enqueue_pages(
        connection,
        [site.url(f"/js/{n}") for n in range(3)],
        {"waitFor": "h1.name", "extract": EXTRACT},
    )

    await run_burst(worker_settings, **changes)

    for n, job_id in enumerate(ids):
        row = await job_row(connection, job_id)
        assert row.status == "completed", row.last_error
        assert row.result["fields"]["name"] == f"Laptop {n}"


async def test_followed_links_become_child_jobs_down_to_the_maximum_depth(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    payload = {
        "waitFor": "h1.name",
        "extract": {"name": "h1.name"},
        "follow": {"selector": "a.product", "maxDepth": 2},
    }
    await enqueue_pages(connection, [site.url("/js/1")], payload)

    await run_burst(worker_settings)

    cursor = await connection.execute(
        "SELECT url_to_scrape, depth, status::text, result -> 'fields' ->> 'name'"
        " FROM scraping_jobs ORDER BY depth"
    )
    rows = await cursor.fetchall()
    assert rows == [
        (site.url("/js/1"), 0, "completed", "Laptop 1"),
        (site.url("/js/2"), 1, "completed", "Laptop 2"),
        (site.url("/js/3"), 2, "completed", "Laptop 3"),
    ]
    assert site.hits["/js/4"] == 0


@pytest.mark.parametrize("limit", [1, 2])
async def test_a_worker_with_free_slots_loads_no_more_pages_of_one_site_than_its_limit(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, limit: int
) -> None:
    ids = await enqueue_pages(
        connection, [site.url(f"/slow/{n}?ms=300") for n in range(6)], {"render": False}
    )

    await run_burst(worker_settings, concurrency=4, max_concurrent_per_site=limit)

    assert site.slow_in_flight_max == limit
    for job_id in ids:
        assert (await job_row(connection, job_id)).status == "completed"
