"""Credentials in real Chromium and in the HTTP engine: gone with their job.

A job with credentials renders in an incognito context of its own (fetches with a cookie jar of
its own), so a session cookie the site sets in return cannot ride along with the next job's
requests; jobs without credentials keep sharing warm tabs and the engine's jar.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from scrapeq_queue.sealed_credentials import Credentials
from scrapeq_worker.browser import BrowserPool, BrowserSettings
from scrapeq_worker.http_engine import HttpEngine
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard, parse_networks

from .site import ALLOW_SITE, SITE_HOST

pytestmark = [pytest.mark.chromium, pytest.mark.timeout(90)]


@contextlib.contextmanager
def cookie_site(host: str = SITE_HOST) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A page that sets a cookie of its own; yields its base URL and (path, Cookie header) of
    every request."""
    seen: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Cookie", "")))
            body = b"<html><body><h1>hello</h1></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Set-Cookie", "refreshed=from-the-site; Path=/")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def test_a_cookie_set_for_a_job_with_credentials_never_reaches_the_next_job(
    chromium_executable: str,
) -> None:
    pool = BrowserPool(
        BrowserSettings(executable=chromium_executable),
        NetworkGuard(allow_networks=parse_networks(ALLOW_SITE)),
    )
    plain = options_from_payload({}, default_timeout_seconds=20)
    with cookie_site() as (url, seen):
        origin = url  # http://127.0.0.2:<port> is already scheme://host:port
        signed_in = replace(
            plain, credentials=Credentials(origins=(origin,), cookies={"session": "s3cr3t"})
        )
        try:
            await pool.render(f"{url}/account", signed_in)
            await pool.render(f"{url}/next-job", plain)
            await pool.render(f"{url}/next-job-again", plain)
        finally:
            await pool.close()
    cookies = dict(seen)
    assert cookies["/account"] == "session=s3cr3t"
    # Neither the credential nor the cookie the site set in return outlived the job...
    assert cookies["/next-job"] == ""
    # ...while a job without credentials keeps its warm tab and its cookies, as before.
    assert cookies["/next-job-again"] == "refreshed=from-the-site"


async def test_the_http_engine_keeps_a_jobs_session_cookie_out_of_its_shared_jar() -> None:
    plain = options_from_payload({"render": False}, default_timeout_seconds=20)
    # A host name, not an address: aiohttp's jar keeps no cookies of IP addresses.
    with cookie_site("127.0.0.1") as (address, seen):
        url = address.replace("127.0.0.1", "localhost")
        signed_in = replace(
            plain,
            credentials=Credentials(origins=(url,), cookies={"session": "s3cr3t"}),
        )
        guard = NetworkGuard(allow_networks=parse_networks("127.0.0.0/8"))
        async with HttpEngine(guard) as engine:
            await engine.fetch(f"{url}/account", signed_in)
            await engine.fetch(f"{url}/next-job", plain)
            await engine.fetch(f"{url}/next-job-again", plain)
    cookies = dict(seen)
    assert cookies["/account"] == "session=s3cr3t"
    assert cookies["/next-job"] == ""
    assert cookies["/next-job-again"] == "refreshed=from-the-site"
