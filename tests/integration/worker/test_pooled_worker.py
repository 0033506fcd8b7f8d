"""A worker in pooled mode: its queue connections through PgBouncer in transaction mode, its
LISTEN session straight to PostgreSQL (docs/queue.md, "Through a pooler")."""

from __future__ import annotations

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings

from scrapeq.local.pgbouncer import LocalPgBouncer

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = pytest.mark.timeout(180)


async def test_a_pooled_worker_scrapes_rendered_and_static_pages_through_pgbouncer(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    pgbouncer: LocalPgBouncer,
) -> None:
    pages = [("/static/1", False), ("/static/2", False), ("/static/3", True), ("/static/4", True)]
    ids = []
    for path, render in pages:
        job_id = await queue.enqueue(connection, site.url(path), payload={"render": render})
        assert job_id is not None
        ids.append(job_id)

    await run_burst(
        worker_settings,
        database_url=pgbouncer.pooled(worker_settings.database_url or ""),
        database_listen_url=worker_settings.database_url,
        database_pooled=True,
    )

    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "completed", row.last_error
