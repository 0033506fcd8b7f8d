"""Several OS processes against one queue: no double claims, no lost jobs after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.waiting import eventually

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]
REPOSITORY_ROOT = Path(__file__).resolve().parents[3]


def start_claimer(database_url: str, worker_id: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.queue.claiming_process",
            database_url,
            worker_id,
            mode,
        ],
        cwd=REPOSITORY_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


async def test_no_row_is_claimed_twice_by_concurrent_worker_processes(
    database_url: str, async_connection: Connection
) -> None:
    ids = await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(4000)])
    claimers = [start_claimer(database_url, f"proc-{n}", "drain") for n in range(4)]
    for claimer in claimers:
        assert claimer.stdout is not None
        assert claimer.stdout.readline().strip() == "ready"

    for claimer in claimers:  # all at once, so that they really compete
        assert claimer.stdin is not None
        claimer.stdin.write("go\n")
        claimer.stdin.flush()

    claimed: list[tuple[int, int]] = []
    for claimer in claimers:
        stdout, stderr = claimer.communicate(timeout=90)
        assert claimer.returncode == 0, stderr
        claimed.extend(tuple(token) for token in json.loads(stdout))

    claimed_ids = Counter(job_id for job_id, _ in claimed)
    assert sorted(claimed_ids) == sorted(ids)
    assert max(claimed_ids.values()) == 1
    assert {attempt for _, attempt in claimed} == {1}
    cursor = await async_connection.execute(
        "SELECT status::text, count(*) FROM scraping_jobs GROUP BY status"
    )
    assert await cursor.fetchall() == [("completed", 4000)]
    cursor = await async_connection.execute(
        "SELECT count(DISTINCT worker_id) FROM scrapeq_attempts WHERE outcome = 'completed'"
    )
    (workers,) = await cursor.fetchone()  # type: ignore[misc]
    assert workers >= 2, "the claimers should have shared the work"


async def test_jobs_of_a_sigkilled_worker_are_rescued_and_completed_exactly_once(
    database_url: str, async_connection: Connection
) -> None:
    await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(20)])
    doomed = start_claimer(database_url, "doomed-pod", "hold")
    try:
        assert doomed.stdout is not None
        held = [tuple(token) for token in json.loads(doomed.stdout.readline())]
        assert len(held) == 5
    finally:
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.communicate(timeout=10)
    assert doomed.returncode == -signal.SIGKILL

    completed: list[int] = []

    async def work_until_all_done() -> int:
        await queue.rescue_expired_leases(async_connection)
        jobs = await queue.claim_jobs(
            async_connection, worker_id="survivor", queues=["default"], limit=10, lease_seconds=30
        )
        done = await queue.complete_many(
            async_connection, [queue.Completion(j.id, j.attempt, {"ok": True}, 0.0) for j in jobs]
        )
        completed.extend(done)
        return len(completed)

    await eventually(work_until_all_done, until=lambda n: n == 20, within=30, what="all 20 jobs")

    assert len(set(completed)) == 20
    cursor = await async_connection.execute(
        "SELECT job_id, array_agg(outcome ORDER BY attempt) FROM scrapeq_attempts GROUP BY job_id"
    )
    histories = dict(await cursor.fetchall())
    for job_id, _ in held:
        assert histories[job_id] == ["expired", "completed"]
    assert all(history.count("completed") == 1 for history in histories.values())
    cursor = await async_connection.execute(
        "SELECT status::text, count(*) FROM scraping_jobs GROUP BY status"
    )
    assert await cursor.fetchall() == [("completed", 20)]
