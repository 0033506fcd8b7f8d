"""Page artifacts (payload keep) and results over the row's limit, through a real worker, real
PostgreSQL, real Chromium and a real S3 server (versitygw): what lands in the bucket, what the
row's result says, and what happens while the store is away (docs/worker.md, "Artifacts")."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET
from tests.waiting import eventually

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.s3]

_prefixes = iter(range(1_000_000))


def with_store(
    settings: WorkerSettings, server: LocalS3Server, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Worker setting changes that give it the server's bucket under a prefix of the test's
    own; the credentials come from the environment, as in a pod."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    return {
        "object_store_bucket": S3_BUCKET,
        "object_store_endpoint": server.endpoint,
        "object_store_region": server.region,
        "object_store_prefix": f"artifacts-{next(_prefixes)}",
        "object_store_path_style": True,
    }


def read_object(server: LocalS3Server, reference: dict[str, Any]) -> bytes:
    """The object a result points to, as the server keeps it, checked against its size and
    checksum."""
    data = server.object_path(S3_BUCKET, reference["key"]).read_bytes()
    assert len(data) == reference["bytes"]
    assert hashlib.sha256(data).hexdigest() == reference["sha256"]
    return data


async def enqueue(connection: Connection, url: str, payload: dict[str, Any]) -> int:
    job_id = await queue.enqueue(connection, url, payload=payload, dedup_key=url)
    assert job_id is not None
    return job_id


async def test_a_rendered_page_keeps_html_text_screenshot_and_pdf_in_the_bucket(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes = with_store(worker_settings, s3_server, monkeypatch)
    job_id = await enqueue(
        connection,
        site.url("/js/5"),
        {"waitFor": "h1.name", "keep": ["html", "text", "screenshot", "pdf"]},
    )

    await run_burst(worker_settings, **changes)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    artifacts = row.result["artifacts"]
    prefix = f"{changes['object_store_prefix']}/default/{job_id}"
    assert {name: ref["key"] for name, ref in artifacts.items()} == {
        "html": f"{prefix}/page.html",
        "text": f"{prefix}/page.txt",
        "screenshot": f"{prefix}/screenshot.png",
        "pdf": f"{prefix}/page.pdf",
    }
    html = read_object(s3_server, artifacts["html"]).decode()
    # The rendered DOM, with what the page's script wrote into it.
    assert html.startswith("<!DOCTYPE html>")
    assert '<h1 class="name">Laptop 5</h1>' in html
    # The document's text, normalised as text_sample is: the script's markup has no spaces
    # between its elements, and block elements add none.
    assert read_object(s3_server, artifacts["text"]).decode() == "Laptop 55.99newsalenext"
    assert read_object(s3_server, artifacts["screenshot"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert read_object(s3_server, artifacts["pdf"]).startswith(b"%PDF-")
    # The text sample of a job without extract is still the text's start, in the row.
    assert row.result["text_sample"] == "Laptop 55.99newsalenext"
    assert "html" not in row.result
    assert "text" not in row.result


async def test_a_static_page_keeps_its_fetched_html_and_text_in_the_bucket(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes = with_store(worker_settings, s3_server, monkeypatch)
    job_id = await enqueue(
        connection,
        site.url("/static/4"),
        {"render": False, "keep": ["html", "text"], "extract": {"name": "h1.name"}},
    )

    await run_burst(worker_settings, **changes)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["engine"] == "http"
    assert row.result["fields"] == {"name": "Static 4"}
    assert set(row.result["artifacts"]) == {"html", "text"}
    html = read_object(s3_server, row.result["artifacts"]["html"]).decode()
    assert html == STATIC_HTML_OF_4
    # Normalised as text_sample is: block elements add no space between their texts.
    text = read_object(s3_server, row.result["artifacts"]["text"]).decode()
    assert text == "Static 44.50 ab next"
    # A job with extract has no text sample, whatever it keeps.
    assert "text_sample" not in row.result


STATIC_HTML_OF_4 = """<!doctype html><html><head><title>Static 4</title></head><body>
<h1 class="name">Static 4</h1><p class="price">4.50</p>
<ul><li class="tag">a</li><li class="tag">b</li></ul>
<a class="product" href="/static/5">next</a></body></html>"""


async def test_without_an_object_store_html_and_text_stay_in_the_result_and_a_screenshot_fails(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    kept = await enqueue(
        connection, site.url("/static/2"), {"render": False, "keep": ["html", "text"]}
    )
    screenshot = await enqueue(connection, site.url("/js/3"), {"keep": ["screenshot"]})

    await run_burst(worker_settings)

    row = await job_row(connection, kept)
    assert row.status == "completed", row.last_error
    assert row.result["html"].startswith("<!doctype html><html><head><title>Static 2</title>")
    assert row.result["text"] == "Static 22.50 ab next"
    assert "artifacts" not in row.result
    failed = await job_row(connection, screenshot)
    assert failed.status == "failed"
    assert failed.last_reason == "artifact_needs_object_store"
    assert "object store" in (failed.last_error or "")


async def test_without_an_object_store_a_large_html_is_cut_to_the_row_and_named_truncated(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["big"] = "<!doctype html><title>big</title><p>" + "word " * 100_000 + "</p>"
    job_id = await enqueue(connection, site.url("/page/big"), {"render": False, "keep": ["html"]})

    await run_burst(worker_settings, max_result_bytes=64 * 1024)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert "html" in row.result["truncated"]
    assert row.result["html"].endswith("…[truncated]")
    stored = json.dumps(row.result, ensure_ascii=False, separators=(",", ":")).encode()
    assert len(stored) <= 64 * 1024


async def test_a_result_over_the_rows_limit_goes_to_the_bucket_and_the_row_points_to_it(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = "".join(f"<li class='p'>product number {n:05d}</li>" for n in range(4000))
    site.pages["many"] = f"<!doctype html><title>many</title><ul>{items}</ul>"
    changes = with_store(worker_settings, s3_server, monkeypatch)
    payload = {"render": False, "extract": {"products": {"selector": "li.p", "all": True}}}
    job_id = await enqueue(connection, site.url("/page/many"), payload)

    await run_burst(worker_settings, max_result_bytes=32 * 1024, **changes)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    pointer = row.result
    assert pointer["url"] == site.url("/page/many")
    assert pointer["title"] == "many"
    reference = pointer["result_object"]
    assert reference["key"] == f"{changes['object_store_prefix']}/default/{job_id}/result.json"
    whole = json.loads(read_object(s3_server, reference))
    assert len(whole["fields"]["products"]) == 4000
    assert whole["fields"]["products"][3999] == "product number 03999"
    assert "truncated" not in whole
    assert len(json.dumps(pointer).encode()) < 2048


async def test_rows_whose_store_is_stopped_are_retried_and_complete_once_it_is_back(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    restartable_s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = restartable_s3_server
    changes = with_store(worker_settings, server, monkeypatch)
    ids = [
        await enqueue(connection, site.url(f"/static/{n}"), {"render": False, "keep": ["html"]})
        for n in range(10, 16)
    ]
    server.stop_server()

    await run_burst(worker_settings, **changes)

    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "pending", (job_id, row.status, row.last_error)
        assert row.last_reason == "storage_unavailable"
        assert row.retry_count == 1

    server.start_server()
    await connection.execute("UPDATE scraping_jobs SET run_at = now() WHERE id = ANY(%s)", (ids,))
    await run_burst(worker_settings, **changes)

    for n, job_id in zip(range(10, 16), ids, strict=True):
        row = await job_row(connection, job_id)
        assert row.status == "completed", (job_id, row.last_error)
        html = read_object(server, row.result["artifacts"]["html"]).decode()
        assert f"<title>Static {n}</title>" in html
        assert row.result["artifacts"]["html"]["key"].endswith(f"/default/{job_id}/page.html")


async def test_a_store_stopped_mid_run_loses_and_duplicates_no_row_and_they_complete_later(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    restartable_s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = restartable_s3_server
    changes = with_store(worker_settings, server, monkeypatch)
    # Rendered pages that answer after 0.4 s, two at a time: the run lasts a few seconds.
    ids = [
        await enqueue(connection, site.url(f"/slow/{n}?ms=400"), {"keep": ["html", "screenshot"]})
        for n in range(12)
    ]

    async def completed() -> int:
        cursor = await connection.execute(
            "SELECT count(*) FROM scraping_jobs WHERE status = 'completed' AND id = ANY(%s)",
            (ids,),
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    run = asyncio.create_task(run_burst(worker_settings, concurrency=2, **changes))
    await eventually(completed, until=lambda done: done >= 2, within=60, what="two rows done")
    server.stop_server()
    await run

    rows = {job_id: await job_row(connection, job_id) for job_id in ids}
    waiting = [job_id for job_id, row in rows.items() if row.status == "pending"]
    assert waiting, "the store was stopped after the last row completed"
    for job_id in waiting:
        assert rows[job_id].last_reason == "storage_unavailable"
    assert all(row.status in ("completed", "pending") for row in rows.values())

    server.start_server()
    await connection.execute("UPDATE scraping_jobs SET run_at = now() WHERE id = ANY(%s)", (ids,))
    await run_burst(worker_settings, **changes)

    folder = server.object_path(S3_BUCKET, f"{changes['object_store_prefix']}/default")
    assert sorted(int(path.name) for path in folder.iterdir()) == sorted(ids)
    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "completed", (job_id, row.last_error)
        html = read_object(server, row.result["artifacts"]["html"]).decode()
        assert '<h1 class="name">Laptop' in html
        read_object(server, row.result["artifacts"]["screenshot"])
        # One object per artifact, whatever the attempts: a retry replaced, never added.
        assert sorted(path.name for path in (folder / str(job_id)).iterdir()) == [
            "page.html",
            "screenshot.png",
        ]


async def test_a_screenshot_of_a_page_larger_than_its_cap_is_cut_to_2048_by_16384_pixels(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site.pages["vast"] = (
        "<!doctype html><title>vast</title>"
        "<body style='margin:0'><div style='width:3000px;height:20000px'>vast</div></body>"
    )
    changes = with_store(worker_settings, s3_server, monkeypatch)
    job_id = await enqueue(
        connection, site.url("/page/vast"), {"keep": ["screenshot"], "timeoutSeconds": 60}
    )

    await run_burst(worker_settings, **changes)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    png = read_object(s3_server, row.result["artifacts"]["screenshot"])
    # The PNG header's IHDR chunk: width and height, big-endian, at bytes 16-24.
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (
        2048,
        16384,
    )
