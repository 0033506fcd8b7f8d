"""Sitemap benchmark: how fast workers turn a sitemap index of a million URLs into rows.

    python -m benchmarks.sitemap_sources                       # 20 x 50,000 URLs, 2 expanders
    python -m benchmarks.sitemap_sources --sitemaps 4 --urls 5000 --expanders 1   # a smoke run
    python -m benchmarks.sitemap_sources --source object       # one list of 1,000,000 URLs

A throw-away PostgreSQL (`LocalPostgres(durable=True)`: commits cost what they cost in
production), the migrated queue, and a local site in a process of its own that makes the
sitemaps as it sends them (odd ones gzip-compressed). One source row for the index is queued
for a ScrapeJob owner; `--expanders` tasks in this process claim source rows and expand them
with the worker's own `SourceExpansion` (the plain-HTTP engine, the guard, the reader, fenced
batches of 5,000), each on its own connection, until no source row is left.

`--source object`: the same number of URLs as one gzip-compressed list (one URL per line) in a
local S3 server (versitygw, `make tools`), read by one expansion through the worker's object
store client: the source a ScrapeJob's `urlsFrom.object` makes.

Reports (one JSON line): rows enqueued, the wall time from the index's claim to the last
source's end, rows/s, and the peak RSS of this process (the expanders; the site is not in it),
with the RSS before the run for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import resource
import time
import zlib
from typing import Any

import psycopg
import scrapeq_queue as queue
from aiohttp import web
from scrapeq_queue.payload import OBJECT_SOURCE_URL
from scrapeq_queue.rows import NewJob, Owner
from scrapeq_queue.source_rows import enqueue_expanded, source_progress
from scrapeq_worker.http_engine import HttpEngine
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard, parse_networks
from scrapeq_worker.object_store import ObjectStore
from scrapeq_worker.url_sources import SourceExpansion, is_source_row

from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.s3_server import LocalS3Server

OWNER = Owner(uid="bench-sitemap", namespace="bench", name="million")
PAYLOAD: dict[str, Any] = {"render": False, "timeoutSeconds": 60}
XMLNS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
LIST_BUCKET = "scrapeq"
LIST_KEY = "lists/million.txt.gz"


def _serve(port_out: Any, sitemaps: int, urls: int) -> None:
    """The site (in its own process): /index.xml and /sitemaps/N.xml, made while sent."""

    async def index(request: web.Request) -> web.Response:
        base = f"http://{request.host}"
        entries = "".join(
            f"<sitemap><loc>{base}/sitemaps/{n}.xml</loc></sitemap>" for n in range(sitemaps)
        )
        return web.Response(
            body=f"<sitemapindex {XMLNS}>{entries}</sitemapindex>".encode(),
            content_type="application/xml",
        )

    async def sitemap(request: web.Request) -> web.StreamResponse:
        number = int(request.match_info["number"])
        base = f"http://{request.host}"
        compress = number % 2 == 1
        response = web.StreamResponse(headers={"Content-Type": "application/xml"})
        await response.prepare(request)
        compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        head = f'<?xml version="1.0" encoding="UTF-8"?><urlset {XMLNS}>'.encode()
        await response.write(compressor.compress(head) if compress else head)
        for start in range(0, urls, 2000):
            piece = "".join(
                f"<url><loc>{base}/product/{number}/{page}</loc>"
                f"<lastmod>2026-01-{page % 28 + 1:02d}</lastmod></url>"
                for page in range(start, min(urls, start + 2000))
            ).encode()
            await response.write(compressor.compress(piece) if compress else piece)
        tail = b"</urlset>"
        await response.write(compressor.compress(tail) + compressor.flush() if compress else tail)
        await response.write_eof()
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/index.xml", index)
        app.router.add_get("/sitemaps/{number:\\d+}.xml", sitemap)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port_out.send(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        await asyncio.Event().wait()

    asyncio.run(main())


class _Rows:
    """The queue operations of one expander, on its own connection."""

    # Seconds spent in the inserts, over every expander (the rest is fetching and reading).
    insert_seconds = 0.0

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection

    async def source_progress(self, job: queue.ClaimedJob) -> Any:
        return await source_progress(self.connection, job)

    async def enqueue_expanded(self, job: queue.ClaimedJob, entries: Any, **counts: int) -> Any:
        started = time.monotonic()
        try:
            return await enqueue_expanded(self.connection, job, entries, **counts)
        finally:
            _Rows.insert_seconds += time.monotonic() - started


async def _expander(dsn: str, http: HttpEngine, name: str, store: ObjectStore | None = None) -> int:
    """Claim and expand source rows until none is due; return how many it expanded."""
    options = options_from_payload(PAYLOAD, default_timeout_seconds=60)
    expanded = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        expansion = SourceExpansion(http, _Rows(connection), object_store=store)
        while True:
            claimed = await queue.claim_jobs(
                connection,
                worker_id=name,
                queues=["default"],
                limit=1,
                lease_seconds=300,
                politeness=queue.NO_SITE_LIMIT,
            )
            if not claimed or not is_source_row(claimed[0].payload):
                if claimed:
                    await queue.release_jobs(connection, worker_id=name, jobs=[claimed[0].token])
                return expanded
            job = claimed[0]
            started = time.monotonic()
            scraped = await expansion.expand(job, options)
            await queue.complete_job(
                connection,
                job.id,
                job.attempt,
                result=scraped.result,
                duration_seconds=time.monotonic() - started,
                follow_urls=[],
                follow_limit=None,
            )
            expanded += 1


def _url_list(port: int, sitemaps: int, urls: int) -> bytes:
    """The sitemaps' URLs as one gzip-compressed list, one per line, compressed as it is made
    (the process holds the compressed list, not the text)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [
        compressor.compress(
            "".join(
                f"http://127.0.0.1:{port}/product/{number}/{page}\n" for page in range(urls)
            ).encode()
        )
        for number in range(sitemaps)
    ]
    return b"".join(parts) + compressor.flush()


def _list_store(s3: LocalS3Server) -> ObjectStore:
    return ObjectStore(s3.store_config(LIST_BUCKET))


async def _run(sitemaps: int, urls: int, expanders: int, source: str) -> dict[str, Any]:
    receive, send = multiprocessing.Pipe(duplex=False)
    site = multiprocessing.Process(target=_serve, args=(send, sitemaps, urls), daemon=True)
    site.start()
    port = receive.recv()
    s3: LocalS3Server | None = None
    store: ObjectStore | None = None
    try:
        if source == "object":
            s3 = LocalS3Server(buckets=(LIST_BUCKET,))
            s3.start()
            store = _list_store(s3)
            await store.put(LIST_KEY, _url_list(port, sitemaps, urls), content_type="text/plain")
        with LocalPostgres(durable=True) as server:
            dsn = server.dsn()
            await asyncio.to_thread(queue.migrate, dsn)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
                if source == "object":
                    first_url = OBJECT_SOURCE_URL + LIST_KEY
                    source_option = {"kind": "object", "key": LIST_KEY, "format": "lines"}
                else:
                    first_url = f"http://127.0.0.1:{port}/index.xml"
                    source_option = {"kind": "sitemap"}
                await queue.enqueue_many(
                    connection,
                    [NewJob(url=first_url, dedup_key=f"sitemap:{first_url}")],
                    owner=OWNER,
                    payload={**PAYLOAD, "source": source_option},
                )
                rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                guard = NetworkGuard(allow_networks=parse_networks("127.0.0.1/32"))
                async with HttpEngine(guard) as http:
                    started = time.monotonic()
                    # The index first (its sitemaps are the others' work), then all at once.
                    first = await _expander(dsn, http, "expander-0", store)
                    counts = await asyncio.gather(
                        *(_expander(dsn, http, f"expander-{n}", store) for n in range(expanders))
                    )
                    seconds = time.monotonic() - started
                cursor = await connection.execute(
                    "SELECT count(*) FILTER (WHERE NOT payload ? 'source'),"
                    " count(DISTINCT url_to_scrape) FILTER (WHERE NOT payload ? 'source')"
                    " FROM scraping_jobs WHERE owner_uid = %s",
                    (OWNER.uid,),
                )
                row = await cursor.fetchone()
                assert row is not None
                rows, distinct = int(row[0]), int(row[1])
    finally:
        site.kill()
        site.join(10)
        if s3 is not None:
            s3.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "benchmark": "sitemap_sources",
        "source": source,
        "sitemaps": sitemaps,
        "urls_per_sitemap": urls,
        "expanders": expanders,
        "sources_expanded": first + sum(counts),
        "rows": rows,
        "distinct_urls": distinct,
        "seconds": round(seconds, 2),
        "insert_seconds": round(_Rows.insert_seconds, 2),
        "rows_per_second": round(rows / seconds),
        "peak_rss_mb": round(peak / 1024, 1),
        "rss_before_mb": round(rss_before / 1024, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sitemaps", type=int, default=20)
    parser.add_argument("--urls", type=int, default=50_000, help="URLs per sitemap")
    parser.add_argument("--expanders", type=int, default=2)
    parser.add_argument(
        "--source",
        choices=("sitemap", "object"),
        default="sitemap",
        help="a sitemap index (sitemaps x urls) or one URL list of as many in object storage",
    )
    arguments = parser.parse_args()
    print(
        json.dumps(
            asyncio.run(
                _run(arguments.sitemaps, arguments.urls, arguments.expanders, arguments.source)
            )
        )
    )


if __name__ == "__main__":
    main()
