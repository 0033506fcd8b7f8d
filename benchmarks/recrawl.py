"""Recurring-crawl benchmark: a second run of a crawl against its first, 1 % of pages changed.

    python -m benchmarks.recrawl                 # 1,000 rendered pages, 10 changed (~2 min)
    python -m benchmarks.recrawl --pages 100     # smaller, for a smoke run

A local site on loopback (127.0.0.2, its own process) serves N JS-rendered pages with ETag and
Last-Modified (a 304 when either matches); `POST /change/<n>` gives a page a new version. The
worker (`Worker`, default settings, burst mode, the site's limit raised to what the worker
holds: its concurrency plus one claim batch) scrapes all N as rendered rows with one `crawlKey`
from a real PostgreSQL queue; then 1 % of the pages change and a second run of the same crawl
(new rows, as a schedule's next run makes) scrapes them again. Printed: each run's wall time,
pages rendered (results with `rendered: true`), 304s and changed results, one JSON object per
run, then the ratio of the two runs' times and the goal (the second run at least 20 times
faster).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import multiprocessing
import os
import sys
import time
import urllib.request
from typing import Any

import psycopg
import scrapeq_queue as queue
from scrapeq_queue import NewJob
from scrapeq_worker.browser import find_chromium
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import free_port, wait_until

SITE_HOST = "127.0.0.2"
PAGES = 1000
CHANGED_SHARE = 0.01
GOAL_SPEED_UP = 20.0

PAGE = """<!doctype html><html><head><title>Item {n}</title></head><body>
<div id="app">loading</div><script>
  setTimeout(function () {{
    document.getElementById('app').innerHTML =
      '<h1 class="name">Item {n}</h1><span class="price">{price}</span>';
  }}, 10);
</script></body></html>"""

PAYLOAD = {
    "render": True,
    "waitFor": ".price",
    "extract": {"name": "h1.name", "price": ".price"},
    "crawlKey": "bench/catalogue",
}


def _serve(port: int) -> None:
    """The site (a child process, so its CPU is not the worker's)."""
    from email.utils import formatdate

    from aiohttp import web

    versions: dict[int, int] = {}

    async def page(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        version = versions.get(number, 1)
        etag = f'"{number}-{version}"'
        modified = formatdate(1_700_000_000 + version * 3600, usegmt=True)
        headers = {"ETag": etag, "Last-Modified": modified, "Cache-Control": "no-cache"}
        asked = request.headers.get("If-None-Match")
        if (
            (asked == etag)
            if asked is not None
            else (request.headers.get("If-Modified-Since") == modified)
        ):
            return web.Response(status=304, headers=headers)
        body = PAGE.format(n=number, price=f"{number}.{version:02d}")
        return web.Response(text=body, content_type="text/html", headers=headers)

    async def change(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        versions[number] = versions.get(number, 1) + 1
        return web.Response(text="changed")

    app = web.Application()
    app.router.add_get("/item/{n}", page)
    app.router.add_post("/change/{n}", change)
    web.run_app(app, host=SITE_HOST, port=port, print=None, access_log=None)


@dataclasses.dataclass(frozen=True)
class Run:
    run: int
    pages: int
    seconds: float
    rendered: int
    not_modified: int
    changed: int
    failed: int

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "seconds": round(self.seconds, 2)}


async def _crawl(dsn: str, base: str, pages: int, run: int, executable: str) -> Run:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        ids = await queue.enqueue_many(
            connection,
            [NewJob(url=f"{base}/item/{n}", dedup_key=f"{n}#{run}") for n in range(pages)],
            payload=PAYLOAD,
            max_retries=0,
        )
    settings = WorkerSettings(
        database_url=dsn,
        burst=True,
        allow_networks=parse_networks(f"{SITE_HOST}/32"),
        chromium=executable,
        metrics_port=0,
        worker_id=f"bench-recrawl-{run}",
        # One site: the worker's work is measured, not politeness (the worker holds its
        # concurrency's pages plus one claim batch waiting for a page slot).
        max_concurrent_per_site=WorkerSettings().concurrency + WorkerSettings().batch_size,
    )
    worker = Worker(settings, install_signal_handlers=False)
    started = time.monotonic()
    await worker.run()
    seconds = time.monotonic() - started
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT count(*) FILTER (WHERE status = 'completed' AND result->'rendered' = 'true'),"
            " count(*) FILTER (WHERE result->'not_modified' = 'true'),"
            " count(*) FILTER (WHERE result->'changed' = 'true'),"
            " count(*) FILTER (WHERE status <> 'completed')"
            " FROM scraping_jobs WHERE id = ANY(%s)",
            (ids,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return Run(run, pages, seconds, *(int(value) for value in row))


async def _main(arguments: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    executable = find_chromium(os.environ.get("SCRAPEQ_CHROMIUM"))
    if executable is None:
        print("benchmark needs Chromium (apt-get install chromium-headless-shell)", file=sys.stderr)
        return 1
    port = free_port()
    base = f"http://{SITE_HOST}:{port}"
    site = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,))
    site.start()
    server: LocalPostgres | None = None
    try:
        wait_until(lambda: _answers(base), timeout=20, what="the benchmark site")
        dsn = os.environ.get("DATABASE_URL")
        if not dsn:
            # Durable like production: a commit costs an fsync.
            server = LocalPostgres(durable=True)
            dsn = server.start()
        await asyncio.to_thread(queue.migrate, dsn)
        first = await _crawl(dsn, base, arguments.pages, 1, executable)
        print(json.dumps(first.as_json()), flush=True)
        changed = max(1, round(arguments.pages * CHANGED_SHARE))
        step = arguments.pages // changed
        for number in range(0, changed * step, step):
            await asyncio.to_thread(_change, base, number)
        second = await _crawl(dsn, base, arguments.pages, 2, executable)
        print(json.dumps(second.as_json()), flush=True)
    finally:
        site.terminate()
        site.join(10)
        if server is not None:
            server.stop()
    speed_up = first.seconds / second.seconds
    print(f"{'run':<8}{'pages':>7}{'seconds':>10}{'rendered':>10}{'304s':>7}{'changed':>9}")
    for run in (first, second):
        print(
            f"{run.run:<8}{run.pages:>7}{run.seconds:>10.2f}{run.rendered:>10}"
            f"{run.not_modified:>7}{run.changed:>9}"
        )
    verdict = "met" if speed_up >= GOAL_SPEED_UP else "NOT met"
    print(
        f"second run: {speed_up:.1f}x less time than the first ({changed} of {arguments.pages} "
        f"pages changed; goal >= {GOAL_SPEED_UP:g}x: {verdict}), {second.rendered} pages "
        f"rendered against {first.rendered}"
    )
    return 0 if first.failed == second.failed == 0 else 1


def _change(base: str, number: int) -> None:
    """Give the site's page `number` a new version."""
    request = urllib.request.Request(f"{base}/change/{number}", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def _answers(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/item/0", timeout=1).close()
    except OSError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=PAGES, help="pages of the crawl")
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
