"""Faults that are not a lost connection: the worker recovers or exits non-zero, never hangs,
and never mistakes a claim of invalid rows for an empty queue."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = [pytest.mark.postgres]


def refusing_trigger(what: str, when: str) -> str:
    """A real fault from the database itself: a trigger that refuses the updates `when`
    matches (the way a value the server cannot store is refused) with a plain SQL error."""
    return f"""
CREATE FUNCTION scrapeq_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'injected fault: refusing to {what} %', NEW.url_to_scrape;
END $$;
CREATE TRIGGER scrapeq_test_refuse BEFORE UPDATE ON scraping_jobs FOR EACH ROW
    WHEN ({when}) EXECUTE FUNCTION scrapeq_test_refuse();
"""


# Completing one row.
REFUSE_COMPLETION = refusing_trigger(
    "complete", "NEW.status = 'completed' AND NEW.url_to_scrape LIKE '%poison%'"
)
# Renewing a lease: an update that keeps a row processing.
REFUSE_RENEWAL = refusing_trigger(
    "renew the lease of", "OLD.status = 'processing' AND NEW.status = 'processing'"
)


async def test_a_completion_the_database_refuses_is_retried_and_the_others_complete(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    await connection.execute(REFUSE_COMPLETION)
    good = [
        await queue.enqueue(connection, site.url(f"/static/{n}"), payload={"render": False})
        for n in range(8)
    ]
    poison = await queue.enqueue(
        connection, site.url("/static/99?poison"), payload={"render": False}, max_retries=0
    )

    await run_burst(worker_settings, concurrency=4, batch_size=4)

    for job_id in good:
        assert (await job_row(connection, job_id)).status == "completed"
    row = await job_row(connection, poison)
    assert row.status == "failed"
    assert row.last_reason == "internal_error"
    assert row.last_error is not None
    assert "could not store the result" in row.last_error
    assert "injected fault" in row.last_error


async def test_a_lease_keeper_that_dies_stops_the_worker_with_status_1_and_hands_back_its_job(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    await connection.execute(REFUSE_RENEWAL)
    held = await queue.enqueue(
        connection, site.url("/stall?held"), payload={"render": False, "timeoutSeconds": 90}
    )
    worker = Worker(
        dataclasses.replace(
            worker_settings, burst=False, lease_seconds=3, drain_seconds=1, page_timeout_seconds=90
        ),
        install_signal_handlers=False,
    )

    assert await asyncio.wait_for(worker.run(), 60) == 1

    row = await job_row(connection, held)
    assert row.status == "pending"
    assert row.retry_count == 0
    assert [attempt.outcome for attempt in row.attempts] == ["released"]


async def test_a_burst_worker_whose_claims_hit_only_invalid_rows_keeps_claiming(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    # Invalid rows first (lower ids): every claim of a batch of 4 is all invalid at first.
    await connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        "SELECT %s || n, 'p', '{\"unknownOption\": 1}'::jsonb FROM generate_series(1, 20) AS n",
        (site.url("/static/"),),
    )
    good = [
        await queue.enqueue(connection, site.url(f"/static/{n}"), payload={"render": False})
        for n in range(100, 105)
    ]

    await run_burst(worker_settings, batch_size=4)

    backlog = (await queue.queue_backlog(connection, ["default"]))["default"]
    assert backlog.due_pending == 0
    for job_id in good:
        assert (await job_row(connection, job_id)).status == "completed"
    cursor = await connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE last_error_reason = 'invalid_payload'"
    )
    assert await cursor.fetchone() == (20,)


# A claim that fails once with a plain SQL error: not a lost connection, not the queue's error.
REFUSE_FIRST_CLAIM = """
CREATE SEQUENCE scrapeq_test_claims;
CREATE FUNCTION scrapeq_test_refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A sequence, because a raise rolls back whatever else the trigger wrote.
    IF nextval('scrapeq_test_claims') = 1 THEN
        RAISE EXCEPTION 'injected fault: refusing the first claim';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER scrapeq_test_refuse_claim BEFORE UPDATE ON scraping_jobs FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status = 'processing')
    EXECUTE FUNCTION scrapeq_test_refuse_claim();
"""


async def test_a_claim_failing_with_an_unexpected_error_is_tried_again_instead_of_ending_the_worker(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    await connection.execute(REFUSE_FIRST_CLAIM)
    ids = [
        await queue.enqueue(connection, site.url(f"/static/{n}"), payload={"render": False})
        for n in range(3)
    ]

    worker = await run_burst(worker_settings)

    for job_id in ids:
        assert (await job_row(connection, job_id)).status == "completed"
    assert worker.metrics.claim_errors._value.get() == 1
    assert worker.metrics.database_errors._value.get() == 0
