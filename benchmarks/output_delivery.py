"""Output benchmark: how long a finished row waits before it is in an uploaded output batch, and
what a finished row whose result is in the bucket costs PostgreSQL.

    python -m benchmarks.output_delivery                  # defaults below (~1-2 min)
    python -m benchmarks.output_delivery --rows 2000 --rate 200 --trickle-rows 60

A throw-away PostgreSQL (durable: fsync and synchronous_commit at their defaults) and a real S3
server (versitygw) are started here. The operator's output uploader (`OutputUploader`, the
loop `scrapeq operator` runs, with its default poll) writes the batches while a producer task
completes a ScrapeJob's rows at a steady rate, in small groups as workers do
(`complete_many`), each result a pointer to an object in the bucket (`result_object`,
`artifacts`) as the worker writes it when the page's data went to the store. Two scenarios,
each with the ScrapeJob's default output (`batchRows` 1000, `batchSeconds` 5):

- steady: `--rows` rows at `--rate` rows/s (batches cut by rows);
- trickle: `--trickle-rows` rows at `--trickle-rate` rows/s (batches cut by time).

Delivery lag of a row: from its `finished_at` to the commit that marked its batch uploaded
(both PostgreSQL clocks). PostgreSQL bytes per row: the total size of `scraping_jobs`,
`scrapeq_attempts` and the output tables (with indexes and TOAST) after VACUUM, divided by the
rows. Prints one JSON line per scenario, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, cast

import psycopg
import scrapeq_queue as queue
from psycopg import sql
from scrapeq_operator.output_encoding import output_prefix
from scrapeq_operator.output_store import OutputStore
from scrapeq_operator.output_uploader import OutputUploader
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_queue import output_batches as outputs
from scrapeq_queue.output_batches import OutputSettings
from scrapeq_queue.rows import Completion

from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.s3_server import LocalS3Server

BUCKET = "scrapeq-bench"
STEADY_ROWS = 10_000
STEADY_RATE = 300.0
TRICKLE_ROWS = 200
TRICKLE_RATE = 10.0
# Rows a simulated worker completes at once (the worker's group commit is of this order).
GROUP = 10


class QuietCluster:
    """The Kubernetes API the uploader would patch status.output and post Events to."""

    async def patch_scrapejob_status(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def announce(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None


def pointer_result(url: str, job_id: int) -> dict[str, Any]:
    """A result as the worker stores it when the page's data and artifacts are in the bucket."""
    digest = hashlib.sha256(url.encode()).hexdigest()
    key = f"scrapeq/default/{job_id}"
    return {
        "url": url,
        "status": 200,
        "title": "Product",
        "result_object": {"key": f"{key}/result.json", "bytes": 48_213, "sha256": digest},
        "artifacts": {
            "html": {"key": f"{key}/page.html", "bytes": 182_344, "sha256": digest},
            "screenshot": {"key": f"{key}/screenshot.png", "bytes": 611_020, "sha256": digest},
        },
    }


async def produce(dsn: str, owner_uid: str, rows: int, rate: float) -> None:
    """Complete the owner's rows at `rate` rows/s, GROUP at a time."""
    async with await queue.connect(dsn) as connection:
        started = time.monotonic()
        done = 0
        while done < rows:
            claimed = await queue.claim_jobs(
                connection, worker_id="bench", queues=[owner_uid], limit=GROUP, lease_seconds=60
            )
            if not claimed:
                await asyncio.sleep(0.01)
                continue
            await queue.complete_many(
                connection,
                [
                    Completion(job.id, job.attempt, pointer_result(job.url, job.id), 0.5)
                    for job in claimed
                ],
            )
            done += len(claimed)
            # Hold the rate: the next group is due when the rows so far would be at it.
            ahead = done / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)


async def scenario(
    dsn: str, server: LocalS3Server, name: str, rows: int, rate: float
) -> dict[str, Any]:
    owner_uid = f"bench-{name}"
    settings = OperatorSettings(
        database_url=dsn,
        object_store_bucket=BUCKET,
        object_store_endpoint=server.endpoint,
        object_store_region=server.region,
        object_store_path_style=True,
    )
    async with await queue.connect(dsn) as connection:
        await outputs.register_output(
            connection,
            owner_uid=owner_uid,
            owner_namespace="bench",
            owner_name=name,
            settings=OutputSettings(
                key_prefix=output_prefix(
                    settings.object_store_prefix, "output", "bench", name, owner_uid
                )
            ),
        )
        await queue.enqueue_for_owner(
            connection,
            queue.Owner(owner_uid, "bench", name),
            # One site per row: politeness does not pace the simulated workers.
            [f"https://shop{number}.{name}.test/item" for number in range(rows)],
            queue=owner_uid,
        )
    runtime = OperatorRuntime(settings, cast(Any, QuietCluster()))
    await runtime.open()
    uploader = OutputUploader(settings, runtime, OutputStore(settings))
    runtime.spawn("output", uploader.run())
    started = time.monotonic()
    try:
        await produce(dsn, owner_uid, rows, rate)
        produced = time.monotonic() - started
        async with await queue.connect(dsn) as connection:
            await outputs.mark_output_ended(connection, owner_uid)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = await outputs.output_state(connection, owner_uid)
                if state is not None and state.finished_at is not None:
                    break
                await asyncio.sleep(0.1)
            cursor = await connection.execute(
                "SELECT extract(epoch FROM batches.uploaded_at - jobs.finished_at)"
                " FROM scrapeq_output_batches AS batches"
                " JOIN scraping_jobs AS jobs ON jobs.id = ANY(batches.row_ids)"
                " WHERE batches.owner_uid = %s AND batches.state = 'uploaded'",
                (owner_uid,),
            )
            lags = sorted(float(row[0]) for row in await cursor.fetchall())
            cursor = await connection.execute(
                "SELECT count(*), count(DISTINCT sequence) FROM scrapeq_output_batches,"
                " unnest(row_ids) WHERE owner_uid = %s",
                (owner_uid,),
            )
            in_batches, batches = await cursor.fetchone() or (0, 0)
    finally:
        await runtime.close()
    return {
        "measure": "output-delivery",
        "scenario": name,
        "rows": rows,
        "rate_rows_per_s": rate,
        "achieved_rows_per_s": round(rows / produced, 1),
        "rows_in_batches": int(in_batches),
        "batches": int(batches),
        "lag_p50_s": round(statistics.median(lags), 2) if lags else None,
        "lag_p99_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 2) if lags else None,
        "lag_max_s": round(lags[-1], 2) if lags else None,
    }


async def bytes_per_row(dsn: str) -> dict[str, Any]:
    async with await queue.connect(dsn) as connection:
        await connection.execute("VACUUM ANALYZE")
        cursor = await connection.execute(
            "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class"
            " WHERE relname IN ('scraping_jobs', 'scrapeq_attempts', 'scrapeq_outputs',"
            " 'scrapeq_output_batches')"
        )
        sizes = {name: int(size) for name, size in await cursor.fetchall()}
        cursor = await connection.execute(
            "SELECT count(*), avg(pg_column_size(result)) FROM scraping_jobs"
            " WHERE status = 'completed'"
        )
        completed, result_bytes = await cursor.fetchone() or (0, 0)
    completed = int(completed)
    return {
        "measure": "postgres-bytes-per-row",
        "completed_rows": completed,
        "bytes_per_row_total": round(sum(sizes.values()) / completed) if completed else None,
        "bytes_per_row_by_table": {
            name: round(size / completed) for name, size in sorted(sizes.items())
        }
        if completed
        else {},
        "result_column_bytes_avg": round(float(result_bytes or 0)),
    }


async def run(arguments: argparse.Namespace) -> int:
    server = LocalPostgres(durable=True)
    admin_dsn = server.start()
    s3 = LocalS3Server(buckets=(BUCKET,))
    s3.start()
    os.environ["AWS_ACCESS_KEY_ID"] = s3.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = s3.secret_key
    try:
        database = "scrapeq_bench_output"
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        dsn = server.dsn(database)
        queue.migrate(dsn)
        results = [
            await scenario(dsn, s3, "steady", arguments.rows, arguments.rate),
            await scenario(dsn, s3, "trickle", arguments.trickle_rows, arguments.trickle_rate),
            await bytes_per_row(dsn),
        ]
    finally:
        s3.stop()
        server.stop()
    for result in results:
        result["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs"
        print(json.dumps(result))
    print()
    header = ("scenario", "rows", "rows/s", "batches", "lag p50", "p99", "max")
    print(f"{header[0]:<10} " + " ".join(f"{title:>8}" for title in header[1:]))
    for result in results[:2]:
        print(
            f"{result['scenario']:<10} {result['rows']:>8} {result['achieved_rows_per_s']:>8}"
            f" {result['batches']:>8} {result['lag_p50_s']:>7}s {result['lag_p99_s']:>7}s"
            f" {result['lag_max_s']:>7}s"
        )
    sizes = results[2]
    print(
        f"PostgreSQL bytes per completed row (results in the bucket): "
        f"{sizes['bytes_per_row_total']} in all, {sizes['bytes_per_row_by_table']}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=STEADY_ROWS)
    parser.add_argument("--rate", type=float, default=STEADY_RATE)
    parser.add_argument("--trickle-rows", type=int, default=TRICKLE_ROWS)
    parser.add_argument("--trickle-rate", type=float, default=TRICKLE_RATE)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
