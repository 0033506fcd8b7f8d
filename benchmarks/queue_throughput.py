"""Queue benchmark: scrapeq's queue against PgQueuer and procrastinate on one local PostgreSQL.

    python -m benchmarks.queue_throughput            # all three systems, full sizes (~5 min)
    python -m benchmarks.queue_throughput --systems scrapeq --jobs 2000 --backlog-finished 20000

Every system runs against the same throw-away PostgreSQL server, started here with
`LocalPostgres(durable=True)` (fsync, synchronous_commit and full_page_writes at their
defaults, so a commit costs what it costs in production), each measure in a database of its own.

Measures, per system:
- throughput: N no-op jobs enqueued up front, then W worker processes claim -> no-op ->
  complete until the queue is empty; jobs/s = N / (last worker done - go signal). Also the
  bulk enqueue's time and PostgreSQL's CPU per 1,000 jobs drained. The jobs carry no payload,
  or with `--payload steps` the 2.3 KB a ScrapeJob with steps and items gives its rows.
- latency: one idle consumer process waiting on LISTEN/NOTIFY; the benchmark enqueues one job
  at a time and measures from just before the INSERT to the moment the consumer holds the job.
- backlog: the time of one claim of one job (S samples) with an empty table, then with
  1,000,000 finished and 100,000 pending jobs in the system's own tables; the ratio of medians.
- stale (scrapeq's claims): the same one-job claims where the statistics are stale: the
  1,000,000 finished jobs analyzed, then the 100,000 pending ones queued with autovacuum held
  off (a queue in service between a burst and autovacuum's next ANALYZE); then again once
  analyzed. The ratio of medians.

Throughput and latency run in interleaved rounds (scrapeq, PgQueuer, procrastinate, scrapeq,
...; `--rounds`, default 3) because the machine is shared: the JSON reports the median round's
jobs/s (every round in `rounds`) and latency percentiles over the pooled samples.

Output: one JSON object per system and measure on its own line (scrapeq first), then a table.
A peer that cannot be imported or fails prints a JSON line with its error instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import psycopg
import scrapeq_queue as queue
from psycopg import sql
from psycopg.types.json import Jsonb
from scrapeq_queue import row_lifecycle
from scrapeq_queue.row_loading import load_claimed_rows_safely

from benchmarks.fleet import cpu_between, postgres_cpu_seconds
from scrapeq.local.postgres import LocalPostgres

# The sizes the issue asks for; flags can shrink them for a smoke run.
THROUGHPUT_JOBS = 20_000
WORKER_PROCESSES = 3
LATENCY_JOBS = 200
BACKLOG_FINISHED = 1_000_000
BACKLOG_PENDING = 100_000
CLAIM_SAMPLES = 300
# Jobs per claim and per completion batch for the systems that batch (scrapeq, PgQueuer).
BATCH_SIZE = 50
# Concurrent job slots per procrastinate worker process (it fetches one job per query).
PROCRASTINATE_CONCURRENCY = 10
# Pause between two latency samples so the consumer is back to waiting on LISTEN.
LATENCY_GAP_SECONDS = 0.02
SYSTEMS = ("scrapeq", "scrapeq-tenants", "scrapeq-tenants-off", "pgqueuer", "procrastinate")
# Throughput and latency run this many interleaved rounds; the median round is reported.
ROUNDS = 3
# procrastinate drains 20,000 jobs in minutes, not seconds (one job per fetch, one commit per
# job); one round keeps the whole benchmark near ten minutes and cannot change the ranking.
ROUNDS_CAP = {("procrastinate", "throughput"): 1}

Report = Callable[[int], None]

# The payloads a throughput job may carry (`--payload`): none, or what a ScrapeJob with page
# steps, items with transforms, fields and follow rules gives each of its rows (2,266 bytes of
# JSON), since what a row carries is copied by every UPDATE of it.
PAYLOADS: dict[str, dict[str, Any] | None] = {
    "empty": None,
    "steps": {
        "render": True,
        "waitFor": "h1.name",
        "timeoutSeconds": 30,
        "steps": [
            {"action": "waitFor", "selector": "button.reveal"},
            {"action": "click", "selector": "button.reveal", "waitFor": ".price"},
            {"action": "scroll", "selector": "li.item", "count": 100, "maxRounds": 20},
        ],
        "items": {
            "selector": "div.product",
            "fields": {
                f"field{n}": {
                    "selector": f".f{n} span.value",
                    "transforms": [{"type": "trim"}, {"type": "price"}],
                }
                for n in range(12)
            },
        },
        "extract": {
            f"x{n}": {"selector": f"#section-{n} .content", "attribute": "data-value"}
            for n in range(10)
        },
        "follow": {"selector": "a.next", "maxDepth": 3, "include": ["/category/", "/product/"]},
    },
}


class System(Protocol):
    """What the benchmark needs from each queue, implemented with that queue's own API."""

    name: str
    batch_size: int

    async def install(self, dsn: str) -> None: ...

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None: ...

    def producer(
        self, dsn: str
    ) -> contextlib.AbstractAsyncContextManager[Callable[[], Awaitable[int]]]: ...

    async def drain(self, dsn: str, worker: str, ready: Callable[[], Awaitable[None]]) -> int: ...

    async def consume(
        self, dsn: str, ready: Callable[[], Awaitable[None]], report: Report
    ) -> None: ...

    async def fill_finished(self, dsn: str, count: int) -> None: ...

    def claimer(
        self, dsn: str
    ) -> contextlib.AbstractAsyncContextManager[Callable[[], Awaitable[None]]]: ...


# --- scrapeq -------------------------------------------------------------------------------------

# Benchmark fixture data, not product SQL: a million rows as a long-running installation would
# have them (completed, with their attempt logged), written in two statements instead of
# pushing a million jobs through workers.
SCRAPEQ_FILL_FINISHED = """
WITH done AS (
    INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload, status, result, attempt,
                               processed_by, processing_started_at, finished_at, run_at,
                               created_at, updated_at)
    SELECT 'https://bench.test/done/' || n, 'default', '{}', 'completed', '{"ok": true}', 1,
           'bench', now() - interval '1 hour', now() - interval '1 hour',
           now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour'
    FROM generate_series(1, %(count)s) AS n
    RETURNING id
)
INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome,
                              duration_seconds)
SELECT id, 1, 'bench', now() - interval '1 hour', now() - interval '1 hour', 'completed', 0.1
FROM done
"""


class Scrapeq:
    """scrapeq as a site sees it by default: rows of many hosts, the pool's politeness
    defaults (2 per host) binding every claim, rows spread over `hosts` sites."""

    name = "scrapeq"
    hosts = 1000

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def url(self, n: int) -> str:
        return f"https://site{n % self.hosts}.test/{n}"

    def measured_jobs(self, enqueued: int) -> int:
        """How many of the enqueued jobs the drain must process (all of them)."""
        return enqueued

    async def claim(
        self, connection: psycopg.AsyncConnection[Any], worker: str, limit: int
    ) -> list[tuple[int, int, str]]:
        """(id, attempt, host key) of up to `limit` claimed jobs."""
        jobs = await queue.claim_jobs(
            connection, worker_id=worker, queues=["default"], limit=limit, lease_seconds=60
        )
        return [(job.id, job.attempt, job.host_key or "") for job in jobs]

    async def finished(self, connection: psycopg.AsyncConnection[Any]) -> bool:
        """Whether a drain that claimed nothing may stop (claims skip a host another claimer
        holds for an instant, so "nothing claimed" alone does not mean "nothing due")."""
        backlog = await queue.queue_backlog(connection, ["default"])
        return backlog["default"].due_pending == 0

    async def install(self, dsn: str) -> None:
        await asyncio.to_thread(queue.migrate, dsn)

    async def hold_autovacuum(self, dsn: str) -> None:
        """Keep autovacuum from analyzing the queue table (the stale measure)."""
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await connection.execute("ALTER TABLE scraping_jobs SET (autovacuum_enabled = off)")

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None:
        async with await queue.connect(dsn) as connection:
            await queue.enqueue_many(
                connection, [self.url(n) for n in range(count)], payload=payload
            )

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[int]]]:
        async with await queue.connect(dsn) as connection:

            async def enqueue_one() -> int:
                job_id = await queue.enqueue(connection, "https://bench.test/one")
                assert job_id is not None
                return job_id

            yield enqueue_one

    async def drain(self, dsn: str, worker: str, ready: Callable[[], Awaitable[None]]) -> int:
        """Claim a batch, no-op, complete it while the next batch is being claimed.

        Two connections per process so that a claim and the previous batch's completion (each
        waiting on its own commit) overlap: batching claims and completions, as a worker does.
        """
        async with (
            await queue.connect(dsn, application_name=worker) as claimer,
            await queue.connect(dsn, application_name=worker) as completer,
        ):
            await ready()
            processed = 0
            completing: asyncio.Task[set[int]] | None = None
            while True:
                jobs = await self.claim(claimer, worker, self.batch_size)
                if completing is not None:
                    processed += len(await completing)
                    completing = None
                if not jobs and await self.finished(claimer):
                    return processed
                completing = asyncio.create_task(self.complete(completer, jobs))

    async def complete(
        self, connection: psycopg.AsyncConnection[Any], jobs: list[tuple[int, int, str]]
    ) -> set[int]:
        """Complete the jobs; return the ids this measure counts."""
        return await queue.complete_many(
            connection, [queue.Completion(job_id, attempt, {}, 0.0) for job_id, attempt, _ in jobs]
        )

    async def consume(self, dsn: str, ready: Callable[[], Awaitable[None]], report: Report) -> None:
        async with (
            await queue.connect(dsn) as connection,
            await queue.connect(dsn) as listener,
        ):
            await queue.listen(listener)
            await ready()
            while True:
                jobs = await queue.claim_jobs(
                    connection, worker_id="consumer", queues=["default"], limit=10, lease_seconds=60
                )
                for job in jobs:
                    report(job.id)
                if jobs:
                    await queue.complete_many(
                        connection, [queue.Completion(j.id, j.attempt, {}, 0.0) for j in jobs]
                    )
                    continue
                await queue.wait_for_notification(listener, 1.0)

    async def fill_finished(self, dsn: str, count: int) -> None:
        async with await queue.connect(dsn) as connection:
            await connection.execute(SCRAPEQ_FILL_FINISHED, {"count": count})

    @contextlib.asynccontextmanager
    async def claimer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        async with await queue.connect(dsn) as connection:

            async def claim_one() -> None:
                assert len(await self.claim(connection, "probe", 1)) == 1

            yield claim_one


# The claim and completion statements as they were before per-site politeness (schema 0002),
# verbatim: the baseline the politeness modes are compared with in the same run.
PRE_POLITENESS_COMPLETE = """
WITH done AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'completed', result = outcome.result, finished_at = now(), updated_at = now(),
        lease_expires_at = NULL
    FROM (
        SELECT given.id, given.attempt, result.value AS result, given.duration
        FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[],
                    %(durations)s::double precision[]) WITH ORDINALITY
                 AS given(id, attempt, duration, position)
        JOIN jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY AS result(value, position)
            USING (position)
    ) AS outcome
    WHERE jobs.id = outcome.id AND jobs.attempt = outcome.attempt AND jobs.status = 'processing'
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.processed_by,
              jobs.processing_started_at, outcome.duration
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'completed', duration FROM done
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'completed', pg_backend_pid() %% 16, count(*) FROM done
    GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
)
SELECT id FROM done
"""

PRE_POLITENESS_CLAIM = """
WITH candidates AS (
    SELECT locked.id
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    CROSS JOIN LATERAL (
        SELECT jobs.id, jobs.priority, jobs.run_at
        FROM scraping_jobs AS jobs
        WHERE jobs.status = 'pending' AND jobs.queue = wanted.queue AND jobs.run_at <= now()
        ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
        LIMIT (SELECT %(limit)s::integer)
        FOR UPDATE SKIP LOCKED
    ) AS locked
    ORDER BY locked.priority DESC, locked.run_at, locked.id
    LIMIT (SELECT %(limit)s::integer)
),
claimed AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'processing',
        attempt = jobs.attempt + 1,
        processed_by = %(worker_id)s,
        processing_started_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        updated_at = now()
    WHERE jobs.id = ANY (ARRAY(SELECT id FROM candidates)) AND jobs.status = 'pending'
    RETURNING jobs.id, jobs.attempt, jobs.url_to_scrape, jobs.parser_type, jobs.payload,
              jobs.queue, jobs.priority, jobs.retry_count, jobs.max_retries, jobs.depth,
              jobs.parent_id, jobs.owner_uid, jobs.owner_namespace, jobs.owner_name, jobs.run_at,
              jobs.processing_started_at, jobs.lease_expires_at
)
SELECT id, attempt, url_to_scrape, parser_type, payload, queue, priority, retry_count,
       max_retries, depth, parent_id, owner_uid, owner_namespace, owner_name, run_at,
       processing_started_at, lease_expires_at
FROM claimed
ORDER BY priority DESC, run_at, id
"""


class ScrapeqBeforePoliteness(Scrapeq):
    """Today's figure: the claim and completion without per-site politeness
    (PRE_POLITENESS_CLAIM, PRE_POLITENESS_COMPLETE) on the same schema and the same rows of
    1,000 sites."""

    name = "scrapeq-before"

    async def claim(
        self, connection: psycopg.AsyncConnection[Any], worker: str, limit: int
    ) -> list[tuple[int, int, str]]:
        # What claim_jobs does with each row (loaders that cannot raise, the payload's and the
        # URL's checks, ClaimedJob), so that both modes pay the same Python.
        async with connection.cursor() as cursor:
            load_claimed_rows_safely(cursor)
            await cursor.execute(
                PRE_POLITENESS_CLAIM,
                {"queues": ["default"], "limit": limit, "worker_id": worker, "lease_seconds": 60.0},
            )
            rows = await cursor.fetchall()
        jobs = []
        for loaded in rows:
            row, payload_key = row_lifecycle.unpack_payload(loaded)
            if row_lifecycle.unworkable(row, payload_key) is None:
                # No host key, no crawl memory.
                jobs.append(row_lifecycle.job_from_row((*row, *[None] * 8)))
        return [(job.id, job.attempt, "") for job in jobs]

    async def complete(
        self, connection: psycopg.AsyncConnection[Any], jobs: list[tuple[int, int, str]]
    ) -> set[int]:
        jobs = sorted(jobs)
        cursor = await connection.execute(
            PRE_POLITENESS_COMPLETE,
            {
                "ids": [job_id for job_id, _, _ in jobs],
                "attempts": [attempt for _, attempt, _ in jobs],
                "results": Jsonb([{} for _ in jobs]),
                "durations": [0.0 for _ in jobs],
            },
        )
        return {row[0] for row in await cursor.fetchall()}

    async def finished(self, connection: psycopg.AsyncConnection[Any]) -> bool:
        return True


class ScrapeqHotHost(Scrapeq):
    """One hot host holds 90 % of the rows (its limit: 2 at a time); the measure is how fast
    the other hosts' rows finish, to compare with `scrapeq` (no head-of-line blocking). Ten
    times the rows are enqueued, so that the other hosts hold as many as in `scrapeq` (20 each
    over 1,000 sites) and the two rates compare like for like."""

    name = "scrapeq-hot-host"
    hot = "hot.test"
    # Latency and claim-time measures would mostly wait for the hot host: they say nothing here.
    measures = ("throughput",)

    def url(self, n: int) -> str:
        if n % 10:
            return f"https://{self.hot}/{n}"
        return f"https://site{(n // 10) % self.hosts}.test/{n}"

    def enqueued_jobs(self, jobs: int) -> int:
        return jobs * 10

    def measured_jobs(self, enqueued: int) -> int:
        return len([n for n in range(enqueued) if not n % 10])

    async def complete(
        self, connection: psycopg.AsyncConnection[Any], jobs: list[tuple[int, int, str]]
    ) -> set[int]:
        done = await super().complete(connection, jobs)
        return {job_id for job_id, _, host in jobs if job_id in done and host != self.hot}

    async def finished(self, connection: psycopg.AsyncConnection[Any]) -> bool:
        cursor = await connection.execute(HOT_HOST_OTHERS_LEFT, {"hot": self.hot})
        row = await cursor.fetchone()
        return row is not None and row[0] == 0


# Rows of other hosts not finished yet (the hot-host measure stops at 0).
HOT_HOST_OTHERS_LEFT = """
SELECT count(*) FROM scraping_jobs
WHERE status IN ('pending', 'processing') AND host_key <> %(hot)s
"""


# Benchmark fixture, not product SQL: the schema without the finished-row signal's trigger
# (docs/queue.md, "Signals for SQL producers"), to compare completions with and without it.
DROP_FINISHED_SIGNAL = "DROP TRIGGER scrapeq_jobs_notify_finished ON scraping_jobs"


class ScrapeqWithoutFinishedSignal(Scrapeq):
    """`scrapeq` on a schema without the trigger of the finished-row signal: what `scrapeq`
    (the same rows, none opted in) must match for the signal to cost rows that did not opt in
    nothing."""

    name = "scrapeq-no-signal"

    async def install(self, dsn: str) -> None:
        await super().install(dsn)
        async with await queue.connect(dsn) as connection:
            await connection.execute(DROP_FINISHED_SIGNAL)


class ScrapeqFinishedSignal(Scrapeq):
    """`scrapeq` with every row opted in to the finished-row signal (one NOTIFY per completed
    row, nobody listening): what the signal costs the rows that ask for it."""

    name = "scrapeq-signal"

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None:
        async with await queue.connect(dsn) as connection:
            await queue.enqueue_many(
                connection,
                [self.url(n) for n in range(count)],
                payload=payload,
                notify_finished=True,
            )


# --- PgQueuer ------------------------------------------------------------------------------------

# Benchmark fixture data: PgQueuer deletes finished jobs from its queue table and keeps one
# log row per status change in pgqueuer_log, so that is where a long history lives.
PGQUEUER_FILL_FINISHED = """
INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
SELECT now() - interval '1 hour', n, status, 0, 'noop', true
FROM generate_series(1, %(count)s) AS n,
     unnest(ARRAY['picked', 'successful']::pgqueuer_status[]) AS status
"""


class PgQueuerSystem:
    """PgQueuer on asyncpg, the driver its documentation leads with."""

    name = "pgqueuer"
    measures = ("throughput", "latency", "backlog")

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    @contextlib.asynccontextmanager
    async def _queries(self, dsn: str) -> AsyncIterator[Any]:
        import asyncpg  # type: ignore[import-untyped]  # ships no type information
        from pgqueuer import AsyncpgDriver, Queries

        connection = await asyncpg.connect(dsn)
        try:
            yield Queries(AsyncpgDriver(connection))
        finally:
            await connection.close()

    async def install(self, dsn: str) -> None:
        async with self._queries(dsn) as queries:
            await queries.install()

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None:
        # PgQueuer's payload is bytes: the same JSON as scrapeq's rows carry.
        data = None if payload is None else json.dumps(payload).encode()
        async with self._queries(dsn) as queries:
            for start in range(0, count, 10_000):
                size = min(10_000, count - start)
                await queries.enqueue(["noop"] * size, [data] * size, [0] * size)

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[int]]]:
        async with self._queries(dsn) as queries:

            async def enqueue_one() -> int:
                (job_id,) = await queries.enqueue("noop", None)
                return int(job_id)

            yield enqueue_one

    async def drain(self, dsn: str, worker: str, ready: Callable[[], Awaitable[None]]) -> int:
        from pgqueuer import QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        processed = 0
        async with self._queries(dsn) as queries:
            manager = QueueManager(queries)

            @manager.entrypoint("noop")
            async def noop(job: Any) -> None:
                nonlocal processed
                processed += 1

            await ready()
            await manager.run(
                batch_size=self.batch_size,
                mode=QueueExecutionMode.drain,
                dequeue_timeout=timedelta(seconds=1),
            )
        return processed

    async def consume(self, dsn: str, ready: Callable[[], Awaitable[None]], report: Report) -> None:
        from pgqueuer import QueueManager

        async with self._queries(dsn) as queries:
            manager = QueueManager(queries)

            @manager.entrypoint("noop")
            async def noop(job: Any) -> None:
                report(int(job.id))

            await ready()
            await manager.run(batch_size=10, dequeue_timeout=timedelta(seconds=1))

    async def fill_finished(self, dsn: str, count: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await connection.execute(PGQUEUER_FILL_FINISHED, {"count": count})

    @contextlib.asynccontextmanager
    async def claimer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        async with self._queries(dsn) as queries:
            manager_id = uuid.uuid4()
            entrypoints = {"noop": EntrypointExecutionParameter(concurrency_limit=0)}

            async def claim_one() -> None:
                jobs = await queries.dequeue(
                    batch_size=1,
                    entrypoints=entrypoints,
                    queue_manager_id=manager_id,
                    global_concurrency_limit=None,
                    heartbeat_timeout=timedelta(seconds=60),
                )
                assert len(jobs) == 1

            yield claim_one


# --- procrastinate -------------------------------------------------------------------------------

# Benchmark fixture data: procrastinate keeps finished jobs in procrastinate_jobs (status
# succeeded) unless told to delete them.
PROCRASTINATE_FILL_FINISHED = """
INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts)
SELECT 'default', 'noop', '{}', 'succeeded', 1 FROM generate_series(1, %(count)s)
"""


class Procrastinate:
    name = "procrastinate"
    measures = ("throughput", "latency", "backlog")

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size  # unused: procrastinate fetches one job per query

    def _app(self, dsn: str, on_job: Callable[[Any], None] | None = None) -> Any:
        import procrastinate

        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

        @app.task(name="noop", pass_context=True)
        async def noop(context: Any) -> None:
            if on_job is not None:
                on_job(context)

        app.noop = noop  # type: ignore[attr-defined]  # kept for enqueueing
        return app

    async def install(self, dsn: str) -> None:
        app = self._app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None:
        if payload is not None:
            raise NotImplementedError("procrastinate's jobs here carry no payload")
        app = self._app(dsn)
        async with app.open_async():
            for start in range(0, count, 10_000):
                await app.noop.batch_defer_async(*({} for _ in range(min(10_000, count - start))))

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[int]]]:
        app = self._app(dsn)
        async with app.open_async():

            async def enqueue_one() -> int:
                job_id: int = await app.noop.defer_async()
                return job_id

            yield enqueue_one

    async def drain(self, dsn: str, worker: str, ready: Callable[[], Awaitable[None]]) -> int:
        processed = 0

        def count(context: Any) -> None:
            nonlocal processed
            processed += 1

        app = self._app(dsn, count)
        async with app.open_async():
            await ready()
            await app.run_worker_async(
                name=worker,
                concurrency=PROCRASTINATE_CONCURRENCY,
                wait=False,
                install_signal_handlers=False,
                delete_jobs="never",
            )
        return processed

    async def consume(self, dsn: str, ready: Callable[[], Awaitable[None]], report: Report) -> None:
        app = self._app(dsn, lambda context: report(int(context.job.id)))
        async with app.open_async():
            await ready()
            await app.run_worker_async(
                concurrency=1,
                wait=True,
                listen_notify=True,
                fetch_job_polling_interval=1.0,
                install_signal_handlers=False,
            )

    async def fill_finished(self, dsn: str, count: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await connection.execute(PROCRASTINATE_FILL_FINISHED, {"count": count})

    @contextlib.asynccontextmanager
    async def claimer(self, dsn: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        app = self._app(dsn)
        async with app.open_async():
            worker_id = await app.job_manager.register_worker()

            async def claim_one() -> None:
                job = await app.job_manager.fetch_job(queues=None, worker_id=worker_id)
                assert job is not None

            yield claim_one


# --- namespace turns (docs/queue.md, "Namespace turns") -------------------------------------------


class ScrapeqTenants(Scrapeq):
    """Rows of 10 namespaces over the 1,000 sites, every site holding rows of every namespace:
    the claim with namespace turns on (a head per site and namespace, a site's slots in turns
    of namespaces)."""

    name = "scrapeq-tenants"
    namespaces = 10
    # Throughput is what the switch may cost; the other measures use ownerless rows.
    measures = ("throughput",)

    async def enqueue_bulk(
        self, dsn: str, count: int, payload: dict[str, Any] | None = None
    ) -> None:
        async with await queue.connect(dsn) as connection:
            for namespace in range(self.namespaces):
                # Row n goes to namespace (n // hosts) % namespaces, so that each site's rows
                # belong to every namespace.
                await queue.enqueue_many(
                    connection,
                    [
                        self.url(n)
                        for n in range(count)
                        if (n // self.hosts) % self.namespaces == namespace
                    ],
                    owner=queue.Owner(
                        uid=f"bench-{namespace}", namespace=f"team-{namespace}", name="bench"
                    ),
                    payload=payload,
                )


class ScrapeqTenantsTurnsOff(ScrapeqTenants):
    """The same rows, claimed with namespace turns off (`scrapeq.namespace_turns = off` on the
    claiming connections): each head gives its site's best rows of any namespace."""

    name = "scrapeq-tenants-off"

    def __init__(self, batch_size: int) -> None:
        super().__init__(batch_size)
        self._turned_off: set[int] = set()

    async def claim(
        self, connection: psycopg.AsyncConnection[Any], worker: str, limit: int
    ) -> list[tuple[int, int, str]]:
        if id(connection) not in self._turned_off:
            await connection.execute("SET scrapeq.namespace_turns = off")
            self._turned_off.add(id(connection))
        return await super().claim(connection, worker, limit)


IMPLEMENTATIONS: dict[str, Callable[[int], System]] = {
    "scrapeq": Scrapeq,
    "scrapeq-before": ScrapeqBeforePoliteness,
    "scrapeq-hot-host": ScrapeqHotHost,
    "scrapeq-no-signal": ScrapeqWithoutFinishedSignal,
    "scrapeq-signal": ScrapeqFinishedSignal,
    "scrapeq-tenants": ScrapeqTenants,
    "scrapeq-tenants-off": ScrapeqTenantsTurnsOff,
    "pgqueuer": PgQueuerSystem,
    "procrastinate": Procrastinate,
}


# --- child processes -----------------------------------------------------------------------------


async def _wait_for_go() -> None:
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "go":
        raise SystemExit("the benchmark went away before saying go")


async def _child(role: str, system_name: str, dsn: str, worker: str, batch_size: int) -> None:
    system = IMPLEMENTATIONS[system_name](batch_size)
    if role == "drain":
        processed = await system.drain(dsn, worker, _wait_for_go)
        print(json.dumps({"processed": processed, "finished_at": time.time()}), flush=True)
        return

    async def announce() -> None:
        print("ready", flush=True)

    def report(job_id: int) -> None:
        print(json.dumps({"id": job_id, "at": time.time()}), flush=True)

    await system.consume(dsn, announce, report)


async def _spawn(role: str, system: System, dsn: str, worker: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.queue_throughput",
        "--child",
        role,
        "--system",
        system.name,
        "--batch-size",
        str(system.batch_size),
        "--dsn",
        dsn,
        "--worker",
        worker,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return process


async def _read_line(process: asyncio.subprocess.Process, within_seconds: float) -> str:
    assert process.stdout is not None
    async with asyncio.timeout(within_seconds):
        line = await process.stdout.readline()
    if not line:
        assert process.stderr is not None
        error = (await process.stderr.read()).decode(errors="replace").strip()
        raise RuntimeError(f"child process exited: {error[-2000:]}")
    return line.decode().strip()


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            async with asyncio.timeout(10):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


# --- the measures --------------------------------------------------------------------------------


@dataclass
class Settings:
    jobs: int
    workers: int
    latency_jobs: int
    backlog_finished: int
    backlog_pending: int
    claim_samples: int
    batch_size: int
    # The payload of every throughput job (PAYLOADS).
    payload: str = "empty"


class Databases:
    """One database per system and measure on the shared server, dropped when done."""

    def __init__(self, server: LocalPostgres) -> None:
        self.server = server
        self.admin_dsn = server.dsn()

    def server_cpu_seconds(self) -> dict[int, float]:
        """CPU the server has used so far, by process (benchmarks.fleet.postgres_cpu_seconds):
        between two readings at quiet moments, what the server did in between."""
        postmaster = self.server.postmaster_pid()
        assert postmaster is not None, "the server runs"
        return postgres_cpu_seconds(postmaster)

    @contextlib.asynccontextmanager
    async def fresh(self, name: str) -> AsyncIterator[str]:
        async with await psycopg.AsyncConnection.connect(self.admin_dsn, autocommit=True) as admin:
            await admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            # A URL, not key=value: asyncpg (PgQueuer's driver) only takes URLs.
            yield self.server.dsn(name)
        finally:
            async with await psycopg.AsyncConnection.connect(
                self.admin_dsn, autocommit=True
            ) as admin:
                await admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


async def _settle(dsn: str) -> None:
    """VACUUM ANALYZE and CHECKPOINT after a bulk load, before anything is measured.

    That is what autovacuum and the checkpointer do on their own some minutes after a load;
    without it, measured commits would queue behind the load's write-back.
    """
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute("VACUUM ANALYZE")
        await connection.execute("CHECKPOINT")


# Look-ups of a site's state, one per site the claim's walk visits (nothing else reads it while
# rows are claimed and completed without delays); counted by PostgreSQL's statistics.
HOST_VISITS = """
SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes
WHERE indexrelname = 'scrapeq_hosts_pkey'
"""
# Other connections to this database: the drain's workers, until their backends have exited. A
# backend reports its statistics as it exits, a moment after it leaves pg_stat_activity, so a
# backend descheduled in between could leave its last look-ups out of the count.
OTHER_BACKENDS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


async def _host_visits(dsn: str) -> int:
    """Site-state look-ups so far, once every other backend of the database has exited."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        deadline = time.monotonic() + 10
        while (await (await connection.execute(OTHER_BACKENDS)).fetchone() or (0,))[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the drain's backends did not exit within 10 s")
            await asyncio.sleep(0.05)
        row = await (await connection.execute(HOST_VISITS)).fetchone()
        return int(row[0]) if row else 0


async def measure_throughput(
    system: System, databases: Databases, settings: Settings
) -> dict[str, Any]:
    async with databases.fresh(f"bench_{system.name}_throughput") as dsn:
        await system.install(dsn)
        enqueued = getattr(system, "enqueued_jobs", lambda jobs: jobs)(settings.jobs)
        enqueue_started = time.monotonic()
        await system.enqueue_bulk(dsn, enqueued, PAYLOADS[settings.payload])
        enqueue_seconds = time.monotonic() - enqueue_started
        await _settle(dsn)
        counts_visits = isinstance(system, Scrapeq)
        visits_before = await _host_visits(dsn) if counts_visits else 0
        server_cpu_before = databases.server_cpu_seconds()
        workers = [
            await _spawn("drain", system, dsn, f"{system.name}-worker-{n}")
            for n in range(settings.workers)
        ]
        try:
            for worker in workers:
                assert await _read_line(worker, 60) == "ready"
            go = time.time()
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write(b"go\n")
                await worker.stdin.drain()
            results = [json.loads(await _read_line(worker, 300)) for worker in workers]
        finally:
            for worker in workers:
                await _stop(worker)
        # The drain's backends have closed their connections by now: reaped, they count whole.
        server_cpu = cpu_between(server_cpu_before, databases.server_cpu_seconds())
        processed = sum(result["processed"] for result in results)
        seconds = max(result["finished_at"] for result in results) - go
        measured = getattr(system, "measured_jobs", lambda enqueued: enqueued)(enqueued)
        if processed != measured:
            raise RuntimeError(f"processed {processed} of {measured} jobs")
        outcome: dict[str, Any] = {
            "jobs": measured,
            "workers": settings.workers,
            "seconds": round(seconds, 3),
            "jobs_per_s": round(measured / seconds, 1),
            "payload": settings.payload,
            # The bulk enqueue of the jobs before the drain (one producer connection).
            "enqueue_seconds": round(enqueue_seconds, 3),
            # PostgreSQL's CPU for the drain (every backend, the server's own processes).
            "server_cpu_ms_per_1000_jobs": round(server_cpu / measured * 1_000_000, 1),
        }
        if counts_visits:
            # How many sites the claims' walks visited per row they took (all rows, the hot
            # site's too): 1 / (rows a site gives per visit) when no walk passes over another's.
            visits = await _host_visits(dsn) - visits_before
            outcome["host_visits_per_row"] = round(visits / enqueued, 3)
        return outcome


async def measure_latency(
    system: System, databases: Databases, settings: Settings
) -> dict[str, Any]:
    async with databases.fresh(f"bench_{system.name}_latency") as dsn:
        await system.install(dsn)
        consumer = await _spawn("consume", system, dsn, f"{system.name}-consumer")
        try:
            assert await _read_line(consumer, 60) == "ready"
            # Let the consumer reach its idle wait before the first sample.
            await asyncio.sleep(0.5)
            latencies = []
            async with system.producer(dsn) as enqueue_one:
                for _ in range(settings.latency_jobs):
                    started = time.time()
                    job_id = await enqueue_one()
                    report = json.loads(await _read_line(consumer, 30))
                    if report["id"] != job_id:
                        raise RuntimeError(f"consumer reported job {report['id']}, not {job_id}")
                    latencies.append(report["at"] - started)
                    await asyncio.sleep(LATENCY_GAP_SECONDS)
        finally:
            await _stop(consumer)
        return {"jobs": settings.latency_jobs, "samples_s": latencies}


async def measure_backlog(
    system: System, databases: Databases, settings: Settings
) -> dict[str, Any]:
    """Claim latency of one job: empty table vs a long history and a deep backlog.

    Samples alternate between the two databases so that whatever else the machine is doing
    at the time weighs on both sides alike.
    """
    async with (
        databases.fresh(f"bench_{system.name}_empty") as empty_dsn,
        databases.fresh(f"bench_{system.name}_backlog") as backlog_dsn,
    ):
        await system.install(empty_dsn)
        await system.enqueue_bulk(empty_dsn, settings.claim_samples)
        await system.install(backlog_dsn)
        await system.fill_finished(backlog_dsn, settings.backlog_finished)
        await system.enqueue_bulk(backlog_dsn, settings.backlog_pending)
        await _settle(empty_dsn)
        await _settle(backlog_dsn)
        empty_latencies: list[float] = []
        backlog_latencies: list[float] = []
        async with (
            system.claimer(empty_dsn) as claim_empty,
            system.claimer(backlog_dsn) as claim_backlog,
        ):
            for _ in range(settings.claim_samples):
                for claim, latencies in (
                    (claim_empty, empty_latencies),
                    (claim_backlog, backlog_latencies),
                ):
                    started = time.perf_counter()
                    await claim()
                    latencies.append(time.perf_counter() - started)
    empty = _percentiles(empty_latencies)
    loaded = _percentiles(backlog_latencies)
    return {
        "finished_rows": settings.backlog_finished,
        "pending_rows": settings.backlog_pending,
        "empty_p50_ms": empty["p50_ms"],
        "empty_p99_ms": empty["p99_ms"],
        "backlog_p50_ms": loaded["p50_ms"],
        "backlog_p99_ms": loaded["p99_ms"],
        "ratio_p50": round(loaded["p50_ms"] / empty["p50_ms"], 2),
    }


async def measure_stale(system: System, databases: Databases, settings: Settings) -> dict[str, Any]:
    """Claim latency of one job after a backlog arrived into a table whose statistics say
    nearly nothing is pending, then the same once the table is analyzed.

    The finished rows are analyzed before the pending ones are queued, and autovacuum is held
    off the table: a queue in service is in that state from a burst of new rows until
    autovacuum's next ANALYZE (at most a minute when 2 % of the rows changed). Each phase
    claims on a connection of its own, so each plans the claim with the statistics of its time.
    """
    hold_autovacuum = getattr(system, "hold_autovacuum", None)
    if hold_autovacuum is None:
        raise RuntimeError(f"{system.name} cannot hold autovacuum off its tables")
    async with databases.fresh(f"bench_{system.name}_stale") as dsn:
        await system.install(dsn)
        await system.fill_finished(dsn, settings.backlog_finished)
        await _settle(dsn)
        await hold_autovacuum(dsn)
        await system.enqueue_bulk(dsn, settings.backlog_pending)
        phases: list[list[float]] = [[], []]
        for phase, latencies in enumerate(phases):
            if phase == 1:
                await _settle(dsn)
            async with system.claimer(dsn) as claim:
                for _ in range(settings.claim_samples):
                    started = time.perf_counter()
                    await claim()
                    latencies.append(time.perf_counter() - started)
    stale = _percentiles(phases[0])
    analyzed = _percentiles(phases[1])
    return {
        "finished_rows": settings.backlog_finished,
        "pending_rows": settings.backlog_pending,
        "stale_p50_ms": stale["p50_ms"],
        "stale_p99_ms": stale["p99_ms"],
        "analyzed_p50_ms": analyzed["p50_ms"],
        "analyzed_p99_ms": analyzed["p99_ms"],
        "ratio_p50": round(stale["p50_ms"] / analyzed["p50_ms"], 2),
    }


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


MEASURES: dict[str, Callable[[System, Databases, Settings], Awaitable[dict[str, Any]]]] = {
    "throughput": measure_throughput,
    "latency": measure_latency,
    "backlog": measure_backlog,
    "stale": measure_stale,
}


async def _run_one(
    system: System, measure: str, databases: Databases, settings: Settings
) -> dict[str, Any]:
    print(f">> {system.name}: {measure}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        outcome = await MEASURES[measure](system, databases, settings)
    except Exception as error:  # a failing peer is reported, not fatal
        outcome = {"error": f"{type(error).__name__}: {error}"}
    shown = {key: value for key, value in outcome.items() if key != "samples_s"}
    print(f"   {time.monotonic() - started:.1f}s: {json.dumps(shown)}", file=sys.stderr, flush=True)
    return outcome


def _combine(system: str, measure: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One line per system and measure: the median round, or pooled samples for latency."""
    line: dict[str, Any] = {"system": system, "measure": measure}
    errors = [run["error"] for run in runs if "error" in run]
    if errors:
        line["error"] = errors[0]
        return line
    if measure == "throughput":
        rates = [run["jobs_per_s"] for run in runs]
        line.update(runs[0], jobs_per_s=round(statistics.median(rates), 1), rounds=rates)
        del line["seconds"]
        if "host_visits_per_row" in line:
            visits = [run["host_visits_per_row"] for run in runs]
            line["host_visits_per_row"] = round(statistics.median(visits), 3)
    elif measure == "latency":
        samples = [sample for run in runs for sample in run["samples_s"]]
        line.update(jobs=len(samples), rounds=len(runs), **_percentiles(samples))
    else:
        line.update(runs[0])
    return line


async def run(
    systems: list[str], measures: list[str], settings: Settings, rounds: int
) -> list[dict[str, Any]]:
    """Run every measure for every system; throughput and latency in interleaved rounds.

    The machine is shared, so its load drifts during a run: interleaving the systems round by
    round exposes them to the same drift, and the median round is reported.
    """
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with LocalPostgres(durable=True) as server:
        databases = Databases(server)
        implementations = {name: IMPLEMENTATIONS[name](settings.batch_size) for name in systems}
        for measure in measures:
            for round_number in range(rounds if measure != "backlog" else 1):
                for name, system in implementations.items():
                    if round_number >= ROUNDS_CAP.get((name, measure), rounds):
                        continue
                    if measure not in getattr(system, "measures", MEASURES):
                        continue
                    outcome = await _run_one(system, measure, databases, settings)
                    runs.setdefault((name, measure), []).append(outcome)
    return [
        _combine(name, measure, runs[(name, measure)])
        for name in systems
        for measure in measures
        if (name, measure) in runs
    ]


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f} %"


def politeness_ratios(results: list[dict[str, Any]]) -> list[str]:
    """The politeness modes against their references in this run, as a sentence each: the
    ratio of the median rounds and, since rounds of one index ran one after the other, the
    median of the rounds' own ratios (steadier when the machine's speed drifts)."""
    rates = {
        line["system"]: line["rounds"]
        for line in results
        if line["measure"] == "throughput" and "rounds" in line
    }
    sentences = []
    for system, reference, what in (
        ("scrapeq", "scrapeq-before", "politeness on"),
        ("scrapeq-hot-host", "scrapeq", "hot host, other sites' rows"),
        ("scrapeq", "scrapeq-no-signal", "finished signal, no row opted in"),
        ("scrapeq-signal", "scrapeq-no-signal", "finished signal, every row opted in"),
        ("scrapeq-tenants", "scrapeq-tenants-off", "namespace turns on / off, 10 namespaces"),
    ):
        if system not in rates or reference not in rates:
            continue
        pairs = zip(rates[system], rates[reference], strict=True)
        ratios = [mine / theirs for mine, theirs in pairs]
        medians = statistics.median(rates[system]) / statistics.median(rates[reference])
        sentences.append(
            f"{what}: {system} / {reference} = {_percent(medians)} of the median rounds; "
            f"round by round {' / '.join(_percent(ratio) for ratio in ratios)}, "
            f"median {_percent(statistics.median(ratios))}"
        )
    visits = {
        line["system"]: line["host_visits_per_row"]
        for line in results
        if line["measure"] == "throughput" and "host_visits_per_row" in line
    }
    if any(visits.values()):
        sentences.append(
            "sites the claims visited per row taken (median round): "
            + ", ".join(f"{system} {value}" for system, value in visits.items())
        )
    return sentences


def print_results(results: list[dict[str, Any]]) -> None:
    for line in results:
        print(json.dumps(line), flush=True)
    print()
    print(
        f"{'system':<14} {'jobs/s':>9} {'lat p50':>9} {'lat p99':>9} "
        f"{'claim empty':>12} {'claim backlog':>14} {'ratio':>6}"
    )
    by_system: dict[str, dict[str, dict[str, Any]]] = {}
    for line in results:
        by_system.setdefault(line["system"], {})[line["measure"]] = line

    def cell(system: dict[str, dict[str, Any]], measure: str, key: str, unit: str = "") -> str:
        entry = system.get(measure, {})
        if "error" in entry:
            return "error"
        value = entry.get(key)
        return "-" if value is None else f"{value}{unit}"

    for name, system in by_system.items():
        print(
            f"{name:<14} {cell(system, 'throughput', 'jobs_per_s'):>9} "
            f"{cell(system, 'latency', 'p50_ms', 'ms'):>9} "
            f"{cell(system, 'latency', 'p99_ms', 'ms'):>9} "
            f"{cell(system, 'backlog', 'empty_p50_ms', 'ms'):>12} "
            f"{cell(system, 'backlog', 'backlog_p50_ms', 'ms'):>14} "
            f"{cell(system, 'backlog', 'ratio_p50', 'x'):>6}"
        )
    for sentence in politeness_ratios(results):
        print(sentence)
    payloads = {
        line["payload"] for line in results if line["measure"] == "throughput" and "payload" in line
    }
    if payloads - {"empty"}:
        print(f"throughput jobs' payload: {', '.join(sorted(payloads))} (--payload)")
    for line in results:
        if line["measure"] == "throughput" and "enqueue_seconds" in line:
            print(
                f"{line['system']}, the median round: bulk enqueue of {line['jobs']:,} jobs "
                f"{line['enqueue_seconds']} s; PostgreSQL's CPU for the drain "
                f"{line['server_cpu_ms_per_1000_jobs']} ms per 1,000 jobs"
            )
    for line in results:
        if line["measure"] == "stale" and "error" not in line:
            print(
                f"claim of one job, {line['system']}: {line['stale_p50_ms']} ms (p50) with "
                f"statistics from before {line['pending_rows']:,} rows were queued, "
                f"{line['analyzed_p50_ms']} ms once analyzed ({line['ratio_p50']}x)"
            )
    print(
        f"\nmachine: {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}; "
        "PostgreSQL from the machine's packages, durable settings (fsync on, synchronous_commit on)"
    )
    for line in results:
        if "error" in line:
            print(f"{line['system']} {line['measure']} failed: {line['error']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queue_throughput")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--measures", default=",".join(MEASURES), help="comma-separated")
    parser.add_argument("--jobs", type=int, default=THROUGHPUT_JOBS)
    parser.add_argument("--workers", type=int, default=WORKER_PROCESSES)
    parser.add_argument("--latency-jobs", type=int, default=LATENCY_JOBS)
    parser.add_argument("--backlog-finished", type=int, default=BACKLOG_FINISHED)
    parser.add_argument("--backlog-pending", type=int, default=BACKLOG_PENDING)
    parser.add_argument("--claim-samples", type=int, default=CLAIM_SAMPLES)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="throughput/latency rounds")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_SIZE,
        help="claim/complete batch (scrapeq, PgQueuer)",
    )
    parser.add_argument(
        "--payload",
        choices=sorted(PAYLOADS),
        default="empty",
        help="each throughput job's payload: empty, or steps (the 2.3 KB of JSON a ScrapeJob "
        "with steps, items with transforms, extract and follow gives its rows)",
    )
    parser.add_argument("--child", choices=("drain", "consume"), help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Peers log warnings about how the benchmark instantiates them; only errors matter here.
    logging.basicConfig(level=logging.ERROR)
    if args.child:
        asyncio.run(_child(args.child, args.system, args.dsn, args.worker, args.batch_size))
        return 0
    systems = [name for name in args.systems.split(",") if name]
    measures = [name for name in args.measures.split(",") if name]
    unknown = [name for name in systems if name not in IMPLEMENTATIONS] + [
        name for name in measures if name not in MEASURES
    ]
    if unknown:
        parser.error(f"unknown system or measure: {', '.join(unknown)}")
    settings = Settings(
        jobs=args.jobs,
        workers=args.workers,
        latency_jobs=args.latency_jobs,
        backlog_finished=args.backlog_finished,
        backlog_pending=args.backlog_pending,
        claim_samples=args.claim_samples,
        batch_size=args.batch_size,
        payload=args.payload,
    )
    load_before = os.getloadavg()
    results = asyncio.run(run(systems, measures, settings, args.rounds))
    print_results(results)
    load_after = os.getloadavg()
    # The machine may be shared: say how busy it was, since every figure depends on it.
    print(
        f"load average (1/5/15 min): before {' '.join(f'{v:.1f}' for v in load_before)}, "
        f"after {' '.join(f'{v:.1f}' for v in load_after)}"
    )
    return 1 if any(line["system"] == "scrapeq" and "error" in line for line in results) else 0


if __name__ == "__main__":
    sys.exit(main())
