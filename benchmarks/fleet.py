"""Fleet benchmark: N simulated worker pods on one PostgreSQL, directly and through PgBouncer.

    python -m benchmarks.fleet                       # 500 pods, 1 s pages, 60 s per mode
    python -m benchmarks.fleet --pods 100 --seconds 30 --page-seconds 0.5

Each simulated pod does what a worker process does to the database, with no browser: it holds
the worker's connections (one for claims, one for writes, one LISTEN session), claims one row
(`claim_jobs`, per-site limits on), "renders" it for `--page-seconds` (a sleep) while renewing
its lease every third of `--lease-seconds`, and completes it with a result of about 10 KB
(`complete_many`), then claims again; an empty claim waits `--poll-seconds`. The pods run as
asyncio tasks spread over `--processes` processes on this machine.

Both modes run in the same invocation against the same throw-away PostgreSQL (durable: fsync
and synchronous_commit at their defaults), each in a database of its own filled with the same
rows over 1,000 sites:
- direct: every connection goes to PostgreSQL;
- direct-unprepared (only when named in `--modes`): direct, with prepared statements off as in
  pooled mode, which separates what pooled mode costs PostgreSQL from what the pooler does;
- pgbouncer: the claim and write connections go through a local PgBouncer 1.18 in transaction
  mode (`--pool-size` server connections) in pooled mode (no prepared statements); the LISTEN
  sessions go to PostgreSQL directly, as docs/queue.md, "Through a pooler", says.

Reported per mode, over the measured window (after `--warmup` seconds): claim latency p50/p99
(a claim that returned a row), rows completed per second, server connections (the most client
backends of the mode's database in pg_stat_activity, sampled every second), PostgreSQL CPU per
1,000 rows (utime + stime of every postgres process, from /proc; PgBouncer's own CPU apart),
and the pods one PostgreSQL core carries at the measured cost (see docs/benchmarks.md, "Fleet").

Output: one JSON line per mode, then a table.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
import scrapeq_queue as queue
from psycopg import sql

from scrapeq.local.pgbouncer import LocalPgBouncer
from scrapeq.local.postgres import LocalPostgres

PODS = 500
PROCESSES = 4
SECONDS = 60.0
WARMUP_SECONDS = 10.0
PAGE_SECONDS = 1.0
LEASE_SECONDS = 30.0
POLL_SECONDS = 1.0
POOL_SIZE = 10
SITES = 1_000
RESULT_BYTES = 10_000
# Connections each pod holds: claims, writes, LISTEN (docs/queue.md, the connection budget).
CONNECTIONS_PER_POD = 3
# Pods hold one row each: a site's limit of 4 never binds with 1,000 sites, as in a broad crawl.
POLITENESS = queue.SitePoliteness(max_concurrent_per_site=4, delay_seconds=0)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class PodPlan:
    """What one process of simulated pods is told to do."""

    mode: str
    url: str
    listen_url: str
    pooled: bool
    first_pod: int
    pods: int
    start_at: float
    stop_at: float
    page_seconds: float
    lease_seconds: float
    poll_seconds: float


@dataclass
class PodRecord:
    """What one process saw: (time, seconds) per claim that returned a row, completion times."""

    claims: list[tuple[float, float]]
    completions: list[float]
    empty_claims: int = 0
    errors: int = 0


def result_text() -> str:
    # Random text: a result PostgreSQL's TOAST compression cannot shrink to nothing.
    return base64.b64encode(os.urandom(RESULT_BYTES * 3 // 4)).decode()


async def one_pod(number: int, plan: PodPlan, record: PodRecord, text: str) -> None:
    """One simulated worker pod until `plan.stop_at`."""
    worker_id = f"fleet-{plan.mode}-{number}"
    name = f"scrapeq-fleet {worker_id}"
    claims = await queue.connect(
        plan.url, application_name=name, prepared_statements=not plan.pooled
    )
    writes = await queue.connect(
        plan.url, application_name=name, prepared_statements=not plan.pooled
    )
    listener = await queue.connect(plan.listen_url, application_name=name)
    await queue.listen(listener)
    try:
        await asyncio.sleep(max(0.0, plan.start_at - time.time()))
        while time.time() < plan.stop_at:
            started = time.monotonic()
            try:
                jobs = await queue.claim_jobs(
                    claims,
                    worker_id=worker_id,
                    queues=["default"],
                    limit=1,
                    lease_seconds=plan.lease_seconds,
                    politeness=POLITENESS,
                )
            except queue.QueueError:
                record.errors += 1
                await asyncio.sleep(plan.poll_seconds)
                continue
            if not jobs:
                record.empty_claims += 1
                await asyncio.sleep(plan.poll_seconds)
                continue
            record.claims.append((time.time(), time.monotonic() - started))
            held = [(job.id, job.attempt) for job in jobs]
            page_end = time.monotonic() + plan.page_seconds
            while (left := page_end - time.monotonic()) > 0:
                await asyncio.sleep(min(left, plan.lease_seconds / 3))
                if page_end - time.monotonic() > 0:
                    await queue.renew_leases(
                        writes, worker_id=worker_id, jobs=held, lease_seconds=plan.lease_seconds
                    )
            done = await queue.complete_many(
                writes,
                [
                    queue.Completion(job.id, job.attempt, {"data": {"text": text}}, 0.0)
                    for job in jobs
                ],
            )
            record.completions.extend(time.time() for _ in done)
    finally:
        for connection in (claims, writes, listener):
            with contextlib.suppress(Exception):
                await connection.close()


async def run_pods(plan: PodPlan) -> PodRecord:
    record = PodRecord(claims=[], completions=[])
    text = result_text()
    # Pods connect a few at a time, as a Deployment's pods start, not all in one instant.
    tasks = []
    for number in range(plan.first_pod, plan.first_pod + plan.pods):
        tasks.append(asyncio.create_task(one_pod(number, plan, record, text)))
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    record.errors += sum(1 for result in results if isinstance(result, BaseException))
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        print(f"fleet: {len(failures)} pods failed, first: {failures[0]!r}", file=sys.stderr)
    return record


def pod_process(plan: PodPlan, answers: Any) -> None:
    answers.put(asdict(asyncio.run(run_pods(plan))))


def postgres_cpu_seconds(postmaster_pid: int) -> dict[int, float]:
    """utime + stime of the postmaster and each of its children, by pid, and under pid 0 that
    of the children it has reaped (backends of connections closed since the server started)."""
    seconds: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, parent = int(entry.name), int(fields[1])
        if pid == postmaster_pid or parent == postmaster_pid:
            seconds[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if pid == postmaster_pid:
            seconds[0] = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return seconds


def process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    # A process that started in between counts whole; one that ended in between counts whole
    # too, in its reaped parent's share (pid 0), the part before `before` included.
    return sum(value - before.get(pid, 0.0) for pid, value in after.items())


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def fill(dsn: str, rows: int) -> None:
    async def enqueue() -> None:
        async with await queue.connect(dsn) as connection:
            batch = 5_000
            for first in range(0, rows, batch):
                await queue.enqueue_many(
                    connection,
                    [
                        f"https://site{n % SITES}.test/page{n}"
                        for n in range(first, min(rows, first + batch))
                    ],
                    payload={"render": False},
                )

    asyncio.run(enqueue())


def measure(
    mode: str,
    server: LocalPostgres,
    pooler: LocalPgBouncer | None,
    pooler_pid: int | None,
    arguments: argparse.Namespace,
) -> dict[str, Any]:
    """Run the fleet once in `mode` in a fresh database; return its figures."""
    database = f"scrapeq_fleet_{mode.replace('-', '_')}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    direct = server.dsn(database)
    queue.migrate(direct)
    expected = arguments.pods * (arguments.seconds + arguments.warmup) / arguments.page_seconds
    fill(direct, int(expected * 1.5) + 1_000)
    url = pooler.pooled(direct) if pooler is not None else direct
    start_at = time.time() + 5.0 + arguments.pods * 0.01 / arguments.processes
    measured_from = start_at + arguments.warmup
    stop_at = measured_from + arguments.seconds
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    share, extra = divmod(arguments.pods, arguments.processes)
    workers = []
    first = 0
    for index in range(arguments.processes):
        count = share + (1 if index < extra else 0)
        plan = PodPlan(
            mode=mode,
            url=url,
            listen_url=direct,
            pooled=mode != "direct",
            first_pod=first,
            pods=count,
            start_at=start_at,
            stop_at=stop_at,
            page_seconds=arguments.page_seconds,
            lease_seconds=arguments.lease_seconds,
            poll_seconds=arguments.poll_seconds,
        )
        first += count
        process = context.Process(target=pod_process, args=(plan, answers))
        process.start()
        workers.append(process)
    postmaster = server.postmaster_pid()
    assert postmaster is not None, "the server runs"
    connections: list[int] = []
    cpu_before: dict[int, float] | None = None
    pooler_before = 0.0
    cpu_after: dict[int, float] = {}
    pooler_after = 0.0
    with psycopg.connect(server.dsn(), autocommit=True) as probe:
        while time.time() < stop_at:
            now = time.time()
            if cpu_before is None and now >= measured_from:
                cpu_before = postgres_cpu_seconds(postmaster)
                pooler_before = process_cpu_seconds(pooler_pid) if pooler_pid else 0.0
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = %s AND backend_type = 'client backend'",
                (database,),
            ).fetchone()
            connections.append(int(row[0]) if row else 0)
            time.sleep(min(1.0, max(0.0, stop_at - time.time())))
        cpu_after = postgres_cpu_seconds(postmaster)
        pooler_after = process_cpu_seconds(pooler_pid) if pooler_pid else 0.0
    records = [answers.get(timeout=arguments.seconds + 300) for _ in workers]
    for process in workers:
        process.join(timeout=60)
    latencies = [
        seconds for record in records for at, seconds in record["claims"] if at >= measured_from
    ]
    completed = sum(
        1 for record in records for at in record["completions"] if measured_from <= at < stop_at
    )
    cpu = cpu_between(cpu_before or {}, cpu_after)
    cpu_per_thousand = cpu / completed * 1000 if completed else float("nan")
    rows_per_second = completed / arguments.seconds
    pages_per_pod = 1 / arguments.page_seconds
    return {
        "mode": mode,
        "pods": arguments.pods,
        "processes": arguments.processes,
        "page_seconds": arguments.page_seconds,
        "seconds": arguments.seconds,
        "pool_size": arguments.pool_size if pooler is not None else None,
        "claims": len(latencies),
        "claim_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "claim_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "rows_per_second": round(rows_per_second, 1),
        "target_rows_per_second": round(arguments.pods * pages_per_pod, 1),
        "server_connections_max": max(connections, default=0),
        "postgres_cpu_seconds": round(cpu, 2),
        "postgres_cpu_seconds_per_1000_rows": round(cpu_per_thousand, 3),
        "pgbouncer_cpu_seconds_per_1000_rows": (
            round((pooler_after - pooler_before) / completed * 1000, 3)
            if pooler is not None and completed
            else None
        ),
        # One core's seconds cover 1000 / cost rows per second; a pod asks 1 / page_seconds.
        "rows_per_second_per_postgres_core": round(1000 / cpu_per_thousand, 0)
        if completed and cpu
        else None,
        "pods_per_postgres_core": round(1000 / cpu_per_thousand / pages_per_pod, 0)
        if completed and cpu
        else None,
        "empty_claims": sum(record["empty_claims"] for record in records),
        "errors": sum(record["errors"] for record in records),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=PODS)
    parser.add_argument("--processes", type=int, default=PROCESSES)
    parser.add_argument("--seconds", type=float, default=SECONDS, help="Measured window.")
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS)
    parser.add_argument("--page-seconds", type=float, default=PAGE_SECONDS)
    parser.add_argument("--lease-seconds", type=float, default=LEASE_SECONDS)
    parser.add_argument("--poll-seconds", type=float, default=POLL_SECONDS)
    parser.add_argument("--pool-size", type=int, default=POOL_SIZE, help="PgBouncer's pool.")
    parser.add_argument("--modes", default="direct,pgbouncer")
    arguments = parser.parse_args(argv)
    modes = [mode.strip() for mode in arguments.modes.split(",") if mode.strip()]
    unknown = set(modes) - {"direct", "direct-unprepared", "pgbouncer"}
    if unknown or arguments.pods < 1 or arguments.processes < 1:
        parser.error(
            f"modes are direct, direct-unprepared and pgbouncer (got {sorted(unknown)}); "
            "pods and processes >= 1"
        )
    server = LocalPostgres(
        durable=True,
        settings={"max_connections": str(arguments.pods * CONNECTIONS_PER_POD + 50)},
    )
    server.start()
    results = []
    try:
        for mode in modes:
            if mode == "pgbouncer":
                pooler = LocalPgBouncer(
                    server.dsn(),
                    pool_size=arguments.pool_size,
                    max_client_connections=arguments.pods * 2 + 50,
                )
                pooler.start()
                try:
                    results.append(measure(mode, server, pooler, pooler.server_pid(), arguments))
                finally:
                    pooler.stop()
            else:
                results.append(measure(mode, server, None, None, arguments))
            print(json.dumps(results[-1]), flush=True)
    finally:
        server.stop()
    print()
    header = ("mode", "rows/s", "claim p50 ms", "p99 ms", "conns", "pg cpu s/1k", "pods/core")
    keys = (
        "mode",
        "rows_per_second",
        "claim_p50_ms",
        "claim_p99_ms",
        "server_connections_max",
        "postgres_cpu_seconds_per_1000_rows",
        "pods_per_postgres_core",
    )
    print("  ".join(f"{title:>12}" for title in header))
    for result in results:
        print("  ".join(f"{result[key]!s:>12}" for key in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
