"""Fixtures for the worker's integration tests: the hostile test site, a worker factory, and
readers for what the queue recorded."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from .site import ALLOW_SITE, HostileSite, running_site

Connection = psycopg.AsyncConnection[Any]


@pytest.fixture
def site() -> Iterator[HostileSite]:
    yield from running_site()


@pytest.fixture
def worker_settings(database_url: str, chromium_executable: str) -> WorkerSettings:
    """Settings for an in-process burst worker allowed to reach only the test site."""
    return WorkerSettings(
        database_url=database_url,
        burst=True,
        allow_networks=parse_networks(ALLOW_SITE),
        chromium=chromium_executable,
        metrics_port=0,
        poll_seconds=0.5,
        worker_id="test-worker",
    )


@pytest.fixture
async def connection(database_url: str) -> AsyncIterator[Connection]:
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


async def run_burst(settings: WorkerSettings, **changes: Any) -> Worker:
    """Run a worker in burst mode until no job is due; return it (for its metrics)."""
    worker = Worker(dataclasses.replace(settings, **changes), install_signal_handlers=False)
    status = await asyncio.wait_for(worker.run(), timeout=100)
    assert status == 0
    return worker


@dataclasses.dataclass(frozen=True)
class JobRow:
    status: str
    result: Any
    last_error: str | None
    retry_count: int
    attempts: list[queue.AttemptRecord]

    @property
    def last_reason(self) -> str | None:
        return self.attempts[-1].reason if self.attempts else None


async def job_row(connection: Connection, job_id: int | None) -> JobRow:
    """The row's state as a test sees it (a read-only look at the table)."""
    assert job_id is not None
    cursor = await connection.execute(
        "SELECT status::text, result, last_error, retry_count FROM scraping_jobs WHERE id = %s",
        (job_id,),
    )
    row = await cursor.fetchone()
    assert row is not None, f"job {job_id} does not exist"
    attempts = await queue.job_attempts(connection, job_id)
    return JobRow(row[0], row[1], row[2], row[3], attempts)
