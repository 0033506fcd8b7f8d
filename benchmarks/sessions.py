"""Sessions benchmark: pages of a defended site completed with the cluster's session pool and
without it, the same job on the same proxies.

    python -m benchmarks.sessions                 # 60 pages, 3 proxies, 5 pages per pair
    python -m benchmarks.sessions --pages 30 --allows 3

A local defended site (scrapeq.local.defended_site, on 127.0.0.2) blocks a (proxy address,
cookie) pair after `--allows` pages and a proxy address after `--allows` cookie-less visitors,
with a 403. Three real tinyproxies (Debian's), each leaving from its own loopback address, and
a dead proxy (a port that refuses) carry one ScrapeJob-like job of `--pages` static pages (its
proxies sealed into the rows as the operator seals spec.proxy). The job runs twice on a fresh
database each time, interleaved for --rounds rounds: `sessions` (the worker's default) and
`no-sessions` (`--no-sessions`: the proxies in turn, no jar kept). Each row may be retried 8
times without backoff, so what ends a row is the site, not the retry policy.

Output: one JSON object per mode and round on its own line — pages completed and failed
(`blocked`), pages the site refused, the proxies retired, wall seconds — then a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import scrapeq_queue as queue
from psycopg import sql
from scrapeq_queue import sessions
from scrapeq_queue.sealed_credentials import SEALING_KEY_ENV, Credentials, SealingKeys
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.defended_site import DefendedSite
from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import free_port, spawn_logged, wait_until

PROXY_ADDRESSES = ("127.0.0.3", "127.0.0.4", "127.0.0.5")
DEAD_PROXY = "http://127.0.0.1:9"
USER = "bench"
PASSWORD = "bench-proxy-pw"


def _tinyproxy(directory: Path, bind: str, stack: ExitStack) -> str:
    """A tinyproxy on a free loopback port whose connections leave from `bind`; its URL."""
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "tinyproxy.conf"
    config.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 60\nLogLevel Warning\nMaxClients 100\n"
        f"Allow 127.0.0.1\nBasicAuth {USER} {PASSWORD}\nBind {bind}\n"
    )
    process = spawn_logged(["tinyproxy", "-d", "-c", str(config)], directory / "log")

    def stop() -> None:
        process.terminate()
        process.wait(timeout=10)

    stack.callback(stop)
    wait_until(lambda: _listening(port), timeout=10, what=f"tinyproxy on {port}")
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{port}"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


async def _run(
    mode: str,
    admin_dsn: str,
    site: DefendedSite,
    proxies: tuple[str, ...],
    pages: int,
    settings: WorkerSettings,
) -> dict[str, Any]:
    """One run of the job on a fresh database: what the site and the queue say afterwards."""
    name = f"scrapeq_bench_sessions_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        await asyncio.to_thread(queue.migrate, dsn)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            sealed = SealingKeys.from_text(os.environ[SEALING_KEY_ENV]).seal(
                Credentials(origins=(), proxies=proxies)
            )
            round_tag = uuid.uuid4().hex[:6]
            ids = await queue.enqueue_many(
                connection,
                [site.url(f"/item/{round_tag}-{n}") for n in range(pages)],
                payload={"render": False, "extract": {"name": "h1"}, "sealed": sealed},
                max_retries=8,
                backoff_seconds=0,
            )
            refused_before = sum(site.refused.values())
            worker = Worker(
                dataclasses.replace(settings, database_url=dsn, worker_id=f"bench-{mode}"),
                install_signal_handlers=False,
            )
            started = time.monotonic()
            await worker.run()
            wall = time.monotonic() - started
            cursor = await connection.execute(
                "SELECT status::text, count(*) FROM scraping_jobs WHERE id = ANY(%s) GROUP BY 1",
                (ids,),
            )
            counts = {status: count for status, count in await cursor.fetchall()}
            retired = await sessions.retired_proxies(
                connection, [sessions.proxy_id(url) for url in (*proxies,)]
            )
    finally:
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
            await admin.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )
    return {
        "mode": mode,
        "pages": pages,
        "completed": counts.get("completed", 0),
        "failed": counts.get("failed", 0),
        "pending": counts.get("pending", 0),
        "refused_by_site": sum(site.refused.values()) - refused_before,
        "proxies_retired": len(retired),
        "wall_seconds": round(wall, 2),
    }


async def _main(arguments: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.ERROR)
    if shutil.which("tinyproxy") is None:
        print("benchmark needs tinyproxy (apt-get install tinyproxy)", file=sys.stderr)
        return 1
    os.environ.setdefault(SEALING_KEY_ENV, SealingKeys.generate())
    server: LocalPostgres | None = None
    results: list[dict[str, Any]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        admin_dsn = os.environ.get("DATABASE_URL")
        if not admin_dsn:
            server = LocalPostgres(durable=True)
            admin_dsn = server.start()
            stack.callback(server.stop)
        assert admin_dsn
        live = tuple(
            _tinyproxy(Path(scratch) / address, address, stack) for address in PROXY_ADDRESSES
        )
        proxies = (*live, DEAD_PROXY)
        settings = WorkerSettings(
            database_url="",
            burst=True,
            allow_networks=parse_networks("127.0.0.2/32"),
            metrics_port=0,
            poll_seconds=0.5,
        )
        for round_number in range(arguments.rounds):
            for mode, enabled in (("sessions", True), ("no-sessions", False)):
                # A fresh site per run: it remembers every (proxy, cookie) pair it has seen.
                site = DefendedSite(allows=arguments.allows)
                site.start()
                try:
                    result = await _run(
                        mode,
                        admin_dsn,
                        site,
                        proxies,
                        arguments.pages,
                        dataclasses.replace(settings, sessions=enabled),
                    )
                finally:
                    site.stop()
                result["round"] = round_number + 1
                results.append(result)
                print(json.dumps(result), flush=True)
    summary = {
        mode: max(r["completed"] for r in results if r["mode"] == mode)
        for mode in ("sessions", "no-sessions")
    }
    print(
        json.dumps(
            {
                "summary": f"pages completed of {arguments.pages} (best round)",
                **summary,
                "allows_per_pair": arguments.allows,
                "proxies": len(PROXY_ADDRESSES),
                "dead_proxies": 1,
            }
        )
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--allows", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
