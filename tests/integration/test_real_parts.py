"""Each real part the suite relies on, started by the harness and used for real:
PostgreSQL (concurrent SKIP LOCKED claims), Chromium (a JS-rendered page read back through
pyppeteer), Prometheus (a sample scraped from a live target, read back with PromQL) and the S3
server (an object written, read back after a restart, and a badly signed request refused)."""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import obstore
import psycopg
import pytest
from obstore.exceptions import BaseError as ObjectStoreError
from obstore.store import S3Store
from prometheus_client import CollectorRegistry, Counter, start_http_server

from scrapeq.local.prometheus import LocalPrometheus
from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET, missing_part

CHROMIUM_CANDIDATES = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")

JS_PAGE = b"""<!doctype html><html><head><title>rendered</title></head>
<body><div id="target">not yet</div>
<script>
  setTimeout(() => { document.getElementById('target').textContent = 'inserted by script'; }, 50);
</script></body></html>"""


@pytest.mark.postgres
def test_two_concurrent_skip_locked_claimers_never_receive_the_same_row(
    empty_database_url: str,
) -> None:
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE items (id serial PRIMARY KEY, claimed_by text)")
        connection.execute(
            "INSERT INTO items (claimed_by) SELECT NULL FROM generate_series(1, 2000)"
        )

    claimed: dict[str, list[int]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def claimer(name: str) -> None:
        with psycopg.connect(empty_database_url, autocommit=True) as connection:
            barrier.wait()
            while True:
                rows = connection.execute(
                    """UPDATE items SET claimed_by = %s WHERE id IN (
                           SELECT id FROM items WHERE claimed_by IS NULL
                           ORDER BY id LIMIT 5 FOR UPDATE SKIP LOCKED)
                       RETURNING id""",
                    (name,),
                ).fetchall()
                if not rows:
                    return
                claimed[name].extend(row[0] for row in rows)

    threads = [threading.Thread(target=claimer, args=(name,)) for name in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not set(claimed["a"]) & set(claimed["b"])
    assert sorted(claimed["a"] + claimed["b"]) == list(range(1, 2001))
    # Both claimers really ran concurrently: each got a share of the rows.
    assert claimed["a"]
    assert claimed["b"]


class _PageHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(JS_PAGE)))
        self.end_headers()
        self.wfile.write(JS_PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def page_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PageHandler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.fixture
def chromium_binary() -> str:
    executable = next((path for path in CHROMIUM_CANDIDATES if Path(path).exists()), None)
    if executable is None:
        missing_part("Chromium", f"none of {CHROMIUM_CANDIDATES} exists")
    assert executable is not None
    return executable


@pytest.mark.chromium
async def test_chromium_renders_a_page_and_javascript_inserted_text_is_read_back(
    page_server: str, chromium_binary: str
) -> None:
    from pyppeteer import launch

    profile = tempfile.mkdtemp(prefix="scrapeq-chromium-")
    arguments = ["--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={profile}"]  # fmt: skip
    if os.geteuid() == 0:
        arguments.append("--no-sandbox")
    browser = await launch(
        executablePath=chromium_binary,
        args=arguments,
        handleSIGINT=False,
        handleSIGTERM=False,
        handleSIGHUP=False,
        # The test closes the browser itself; pyppeteer's atexit hook would run after the
        # event loop is gone.
        autoClose=False,
    )
    try:
        page = await browser.newPage()
        await page.goto(page_server, waitUntil="load", timeout=30_000)
        await page.waitForFunction(
            "document.getElementById('target').textContent !== 'not yet'", timeout=10_000
        )
        text = await page.evaluate("document.getElementById('target').textContent")
        assert text == "inserted by script"
        assert await page.title() == "rendered"
    finally:
        await asyncio.wait_for(browser.close(), timeout=30)
        # close() asks Chromium to quit but does not reap it; wait so no process outlives us.
        await asyncio.to_thread(browser.process.wait, 30)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.prometheus
def test_prometheus_scrapes_a_target_and_answers_a_promql_query(
    prometheus: LocalPrometheus,
) -> None:
    registry = CollectorRegistry()
    counter = Counter(
        "scrapeq_foundation_probe_total", "Probe counter for the real-parts test.",
        registry=registry,
    )  # fmt: skip
    counter.inc(7)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        prometheus.set_targets([f"127.0.0.1:{server.server_port}"])
        samples = prometheus.wait_for_sample("scrapeq_foundation_probe_total", timeout=30)
        assert float(samples[0]["value"][1]) == 7.0
        assert samples[0]["metric"]["job"] == "scrapeq"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.mark.s3
async def test_the_s3_server_keeps_an_uploaded_object_across_a_restart_on_the_same_port(
    restartable_s3_server: LocalS3Server,
) -> None:
    server = restartable_s3_server
    store = S3Store(
        S3_BUCKET,
        endpoint=server.endpoint,
        region=server.region,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    await obstore.put_async(store, "probe/one.txt", b"kept on disk")
    assert server.object_path(S3_BUCKET, "probe/one.txt").read_bytes() == b"kept on disk"
    port = server.port

    server.stop_server()
    server.start_server()

    assert server.port == port
    got = await obstore.get_async(store, "probe/one.txt")
    assert bytes(await got.bytes_async()) == b"kept on disk"


@pytest.mark.s3
async def test_the_s3_server_refuses_a_request_signed_with_the_wrong_secret(
    s3_server: LocalS3Server,
) -> None:
    store = S3Store(
        S3_BUCKET,
        endpoint=s3_server.endpoint,
        region=s3_server.region,
        access_key_id=s3_server.access_key,
        secret_access_key="not-the-secret",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    with pytest.raises(ObjectStoreError):
        await obstore.put_async(store, "probe/refused.txt", b"no")
    assert not s3_server.object_path(S3_BUCKET, "probe/refused.txt").exists()
