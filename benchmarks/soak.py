"""Soak: a million rows with ~10 KB results through the queue, retention running.

    python -m benchmarks.soak                          # 1,000,000 rows, the bundled settings
    python -m benchmarks.soak --rows 200000 --autovacuum both

What a long crawl does to the table, compressed into minutes. A producer keeps a backlog of
`--backlog` due rows over 1,000 sites (rows of one ScrapeJob, enqueued 5,000 at a time) until
`--rows` have been enqueued. `--processes` drainer processes of `--tasks` tasks each claim
`--claim-limit` rows at a time (`claim_jobs`, per-site limits on) and finish them as a worker
would: most complete with a result of about 10 KB of incompressible text (`complete_many`), a
share (`--retry-share`) fail their first attempt with a retryable error and complete on the
next (backoff 1 s), a share (`--fail-share`) fail for good. Retention runs as the operator's
does, every `--retention-every` seconds: completed rows finished more than
`--retention-seconds` ago are deleted, failed ones beyond the newest 1,000 (`prune_finished`).

Every `--sample-every` seconds the benchmark prints one JSON line: rows finished so far and per
second, claim latency p50/p99 over the window (a claim that returned rows), the sizes of
scraping_jobs (heap, TOAST, indexes), scrapeq_attempts and scrapeq_hosts, live and dead tuples
and autovacuum runs of scraping_jobs, and the database's size. At the end: a table of the
samples and the claim latency of the last full window against the first (goal: within 1.5 times).

`--autovacuum` picks the server's autovacuum settings, against a throw-away, durable server
(fsync and synchronous_commit on):
- `bundled` (default): PostgreSQL 15's defaults, which the chart's bundled database (the
  postgres:15 image, no settings of its own) runs with; the tables' own storage parameters
  apply either way (docs/queue.md, "Autovacuum");
- `eager`: autovacuum wakes every 15 s instead of every minute and pauses less often (cost limit
  1000), to compare;
- `both`: `bundled`, then `eager`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from queue import Empty
from typing import Any, Final

import psycopg
import scrapeq_queue as queue
from psycopg import sql

from scrapeq.local.postgres import LocalPostgres

ROWS: Final = 1_000_000
BACKLOG: Final = 20_000
ENQUEUE_BATCH: Final = 5_000
PROCESSES: Final = 2
TASKS: Final = 4
CLAIM_LIMIT: Final = 10
RESULT_BYTES: Final = 10_000
RETRY_SHARE: Final = 0.05
FAIL_SHARE: Final = 0.01
RETENTION_SECONDS: Final = 60.0
RETENTION_EVERY: Final = 10.0
KEEP_FAILED_LAST: Final = 1_000
SAMPLE_EVERY: Final = 15.0
SITES: Final = 1_000
LEASE_SECONDS: Final = 60.0
# A site's limit of 4 never binds with 1,000 sites and 80 rows in flight, as in a broad crawl.
POLITENESS: Final = queue.SitePoliteness(max_concurrent_per_site=4, delay_seconds=0)
OWNER: Final = queue.Owner(
    uid="6f1b7c2e-soak-0000-0000-000000000001", namespace="soak", name="soak"
)
# Goal: the claim's latency at the end within this factor of its latency at the start.
LATENCY_GROWTH_GOAL: Final = 1.5

# A more eager autovacuum than PostgreSQL's defaults, to compare with them.
EAGER_AUTOVACUUM: Final = {
    "autovacuum_naptime": "15s",
    "autovacuum_vacuum_cost_limit": "1000",
}
SETTINGS: Final[dict[str, dict[str, str]]] = {"bundled": {}, "eager": EAGER_AUTOVACUUM}

SIZES: Final = """
SELECT
  pg_relation_size('scraping_jobs'),
  coalesce((SELECT pg_total_relation_size(reltoastrelid) FROM pg_class
            WHERE oid = 'scraping_jobs'::regclass AND reltoastrelid <> 0), 0),
  pg_indexes_size('scraping_jobs'),
  pg_total_relation_size('scrapeq_attempts'),
  pg_total_relation_size('scrapeq_hosts'),
  pg_database_size(current_database()),
  s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count,
  (SELECT count(*) FROM scraping_jobs WHERE status IN ('pending', 'processing'))
FROM pg_stat_user_tables s WHERE s.relname = 'scraping_jobs'
"""


@dataclass(frozen=True)
class DrainerPlan:
    """What one drainer process is told."""

    dsn: str
    number: int
    tasks: int
    claim_limit: int
    retry_share: float
    fail_share: float


def result_text() -> str:
    # Random text: a result PostgreSQL's TOAST compression cannot shrink to nothing.
    return base64.b64encode(os.urandom(RESULT_BYTES * 3 // 4)).decode()


def share_of(job_id: int) -> float:
    """A fixed number in [0, 1) per row id, spread evenly: which rows retry or fail."""
    return (job_id * 2654435761 % 2**32) / 2**32


async def drain_task(plan: DrainerPlan, number: int, stop: Any, reports: Any, text: str) -> None:
    worker_id = f"soak-{plan.number}-{number}"
    claims = await queue.connect(plan.dsn, application_name=worker_id)
    writes = await queue.connect(plan.dsn, application_name=worker_id)
    latencies: list[tuple[float, float]] = []
    finished = 0
    sent = time.monotonic()
    try:
        while not stop.is_set():
            started = time.monotonic()
            jobs = await queue.claim_jobs(
                claims,
                worker_id=worker_id,
                queues=["default"],
                limit=plan.claim_limit,
                lease_seconds=LEASE_SECONDS,
                politeness=POLITENESS,
            )
            if not jobs:
                await asyncio.sleep(0.1)
            else:
                latencies.append((time.time(), time.monotonic() - started))
                completions = []
                for job in jobs:
                    share = share_of(job.id)
                    if share < plan.fail_share:
                        await queue.fail_job(
                            writes,
                            job.id,
                            job.attempt,
                            error="soak: a permanent failure",
                            reason="http_404",
                            duration_seconds=0.0,
                        )
                        finished += 1
                    elif share < plan.fail_share + plan.retry_share and job.retry_count == 0:
                        await queue.retry_job(
                            writes,
                            job.id,
                            job.attempt,
                            error="soak: a temporary failure",
                            reason="timeout",
                            duration_seconds=0.0,
                        )
                    else:
                        completions.append(
                            queue.Completion(job.id, job.attempt, {"data": {"text": text}}, 0.0)
                        )
                if completions:
                    finished += len(await queue.complete_many(writes, completions))
            if time.monotonic() - sent >= 1.0:
                reports.put((latencies, finished))
                latencies, finished, sent = [], 0, time.monotonic()
    finally:
        reports.put((latencies, finished))
        for connection in (claims, writes):
            with contextlib.suppress(Exception):
                await connection.close()


def drainer_process(plan: DrainerPlan, stop: Any, reports: Any) -> None:
    async def run() -> None:
        text = result_text()
        await asyncio.gather(
            *(drain_task(plan, number, stop, reports, text) for number in range(plan.tasks))
        )

    asyncio.run(run())


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Soak:
    """One run against one server."""

    def __init__(self, dsn: str, arguments: argparse.Namespace, mode: str) -> None:
        self.dsn = dsn
        self.arguments = arguments
        self.mode = mode
        self.enqueued = 0
        self.finished = 0
        self.pruned = 0
        self.window: list[float] = []
        self.samples: list[dict[str, Any]] = []
        self.done = asyncio.Event()

    async def produce(self) -> None:
        """Keep `--backlog` rows due until `--rows` were enqueued."""
        arguments = self.arguments
        async with await queue.connect(self.dsn, application_name="soak-producer") as connection:
            while self.enqueued < arguments.rows:
                cursor = await connection.execute(
                    "SELECT count(*) FROM scraping_jobs WHERE status = 'pending'"
                )
                row = await cursor.fetchone()
                assert row is not None
                if row[0] >= arguments.backlog:
                    await asyncio.sleep(0.5)
                    continue
                count = min(ENQUEUE_BATCH, arguments.rows - self.enqueued)
                first = self.enqueued
                await queue.enqueue_many(
                    connection,
                    [f"https://site{n % SITES}.test/page{n}" for n in range(first, first + count)],
                    owner=OWNER,
                    payload={"render": False},
                    backoff_seconds=1.0,
                    max_retries=3,
                )
                self.enqueued += count

    async def retain(self) -> None:
        """The operator's retention loop, with a short TTL."""
        async with await queue.connect(self.dsn, application_name="soak-retention") as connection:
            while not self.done.is_set():
                self.pruned += await queue.prune_finished(
                    connection,
                    completed_older_than=timedelta(seconds=self.arguments.retention_seconds),
                    keep_failed_last=KEEP_FAILED_LAST,
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.arguments.retention_every):
                        await self.done.wait()

    async def sample(self, started: float) -> dict[str, Any]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            cursor = await connection.execute(SIZES)
            row = await cursor.fetchone()
        assert row is not None
        heap, toast, indexes, attempts, hosts, database, live, dead, vacuums, analyzes, open_ = row
        latencies, self.window = self.window, []
        sample = {
            "mode": self.mode,
            "seconds": round(time.monotonic() - started, 1),
            "enqueued": self.enqueued,
            "finished": self.finished,
            "open_rows": open_,
            "pruned": self.pruned,
            "claims": len(latencies),
            "claim_p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
            "claim_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            "jobs_heap_mb": round(heap / 2**20, 1),
            "jobs_toast_mb": round(toast / 2**20, 1),
            "jobs_indexes_mb": round(indexes / 2**20, 1),
            "attempts_mb": round(attempts / 2**20, 1),
            "hosts_mb": round(hosts / 2**20, 2),
            "database_mb": round(database / 2**20, 1),
            "live_tuples": live,
            "dead_tuples": dead,
            "autovacuums": vacuums,
            "autoanalyzes": analyzes,
        }
        return sample

    async def run(self) -> list[dict[str, Any]]:
        arguments = self.arguments
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        reports = context.Queue()
        drainers = [
            context.Process(
                target=drainer_process,
                args=(
                    DrainerPlan(
                        dsn=self.dsn,
                        number=number,
                        tasks=arguments.tasks,
                        claim_limit=arguments.claim_limit,
                        retry_share=arguments.retry_share,
                        fail_share=arguments.fail_share,
                    ),
                    stop,
                    reports,
                ),
                daemon=True,
            )
            for number in range(arguments.processes)
        ]
        started = time.monotonic()
        producer = asyncio.create_task(self.produce())
        retention = asyncio.create_task(self.retain())
        for drainer in drainers:
            drainer.start()
        last_sample = time.monotonic()
        last_finished = 0
        try:
            while True:
                await asyncio.sleep(0.5)
                while True:
                    try:
                        latencies, finished = reports.get_nowait()
                    except Empty:
                        break
                    self.window.extend(latency for _, latency in latencies)
                    self.finished += finished
                if producer.done() and producer.exception() is not None:
                    raise RuntimeError("the producer failed") from producer.exception()
                all_done = self.finished >= arguments.rows
                if time.monotonic() - last_sample >= arguments.sample_every or all_done:
                    sample = await self.sample(started)
                    elapsed = time.monotonic() - last_sample
                    sample["rows_per_s"] = round((self.finished - last_finished) / elapsed, 1)
                    last_sample, last_finished = time.monotonic(), self.finished
                    self.samples.append(sample)
                    print(json.dumps(sample), flush=True)
                if all_done:
                    break
                if not any(drainer.is_alive() for drainer in drainers):
                    raise RuntimeError("every drainer process ended before the rows were done")
        finally:
            stop.set()
            self.done.set()
            producer.cancel()
            await asyncio.gather(producer, retention, return_exceptions=True)
            for drainer in drainers:
                drainer.join(timeout=30)
                if drainer.is_alive():
                    drainer.kill()
        return self.samples


def run_mode(mode: str, arguments: argparse.Namespace) -> list[dict[str, Any]]:
    server = LocalPostgres(durable=True, settings={"max_connections": "100", **SETTINGS[mode]})
    server.start()
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("soak")))
        dsn = server.dsn("soak")
        queue.migrate(dsn)
        return asyncio.run(Soak(dsn, arguments, mode).run())
    finally:
        server.stop()


def summary(mode: str, samples: list[dict[str, Any]]) -> tuple[float, float]:
    """Print the samples as a table; return the first and last full windows' claim p50 (ms)."""
    print(f"\n{mode}:")
    columns = (
        "seconds",
        "finished",
        "rows_per_s",
        "claim_p50_ms",
        "claim_p99_ms",
        "jobs_heap_mb",
        "jobs_toast_mb",
        "jobs_indexes_mb",
        "attempts_mb",
        "hosts_mb",
        "dead_tuples",
        "autovacuums",
        "database_mb",
    )
    print("  ".join(f"{column:>15}" for column in columns))
    for sample in samples:
        print("  ".join(f"{sample[column]!s:>15}" for column in columns))
    # The first window includes the start (connections, the first backlog); the last one may
    # be the short tail of the drain. Compare the second with the second to last.
    full = [sample for sample in samples if sample["claims"] >= 100]
    if len(full) < 4:
        return float("nan"), float("nan")
    return full[1]["claim_p50_ms"], full[-2]["claim_p50_ms"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--backlog", type=int, default=BACKLOG)
    parser.add_argument("--processes", type=int, default=PROCESSES)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--claim-limit", type=int, default=CLAIM_LIMIT)
    parser.add_argument("--retry-share", type=float, default=RETRY_SHARE)
    parser.add_argument("--fail-share", type=float, default=FAIL_SHARE)
    parser.add_argument("--retention-seconds", type=float, default=RETENTION_SECONDS)
    parser.add_argument("--retention-every", type=float, default=RETENTION_EVERY)
    parser.add_argument("--sample-every", type=float, default=SAMPLE_EVERY)
    parser.add_argument(
        "--autovacuum", choices=("both", *SETTINGS), default="bundled", help="see the module doc"
    )
    arguments = parser.parse_args(argv)
    modes = list(SETTINGS) if arguments.autovacuum == "both" else [arguments.autovacuum]
    verdicts = []
    for mode in modes:
        samples = run_mode(mode, arguments)
        first, last = summary(mode, samples)
        verdicts.append((mode, first, last))
    print()
    for mode, first, last in verdicts:
        if not (first > 0 and last > 0):
            print(f"{mode}: too few windows of 100 claims or more to compare (a longer run)")
            continue
        growth = last / first
        met = "met" if growth <= LATENCY_GROWTH_GOAL else "MISSED"
        print(
            f"{mode}: claim p50 {first:.2f} ms at the start, {last:.2f} ms at the end: "
            f"{growth:.2f}x (goal <= {LATENCY_GROWTH_GOAL}x: {met})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
