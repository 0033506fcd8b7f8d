"""Hostile rows inserted by plain SQL beside healthy ones: a real burst worker (both engines)
fails each with its reason, completes the healthy rows without delay, answers /healthz within
a second throughout and exits 0."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.processes import free_port
from tests.plain_sql import insert_plain_row

from .conftest import Connection, job_row, run_burst
from .health_probe import HEALTH_WITHIN_SECONDS, HealthProbe
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(180)]

# What each payload made of a worker before: exit 1 within a second (the first three), or a
# crawl that never ended (the last). Each is one plain INSERT away for any producer.
HOSTILE_PAYLOADS = (
    """'{"timeoutSeconds": 1e400}'""",
    "('{\"timeoutSeconds\": ' || repeat('9', 5000) || '}')",
    "('{\"extract\": {' || (SELECT string_agg('\"f' || n || '\": \"h1\"', ',') "
    "FROM generate_series(1, 10000) AS n) || '}}')",
    """'{"follow": {"selector": "a", "maxPages": 30, "maxDepth": 1000}}'""",
    """'{"headers": {"X-A": "one\\r\\nX-B: two"}}'""",
    """'{"headers": {"Bad Name": "v"}}'""",
)
# A healthy page finishes well within this on the loaded development machine: the hostile
# rows claimed beside it must not add to it.
HEALTHY_ATTEMPT_SECONDS = 5.0


async def insert_hostile_rows(connection: Connection, url: str) -> list[int]:
    return [
        await insert_plain_row(connection, url, payload_sql) for payload_sql in HOSTILE_PAYLOADS
    ]


async def insert_healthy_rows(connection: Connection, site: HostileSite, count: int) -> list[int]:
    ids = []
    for n in range(count):
        cursor = await connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
            "VALUES (%s, 'p', %s::jsonb) RETURNING id",
            (site.url(f"/static/{n}"), '{"render": %s}' % ("true" if n % 2 else "false")),
        )
        row = await cursor.fetchone()
        assert row is not None
        ids.append(int(row[0]))
    return ids


async def assert_healthy_rows_completed_promptly(connection: Connection, ids: list[int]) -> None:
    for job_id in ids:
        row = await job_row(connection, job_id)
        assert row.status == "completed", (job_id, row.last_error)
        (attempt,) = row.attempts
        assert attempt.duration_seconds is not None
        assert attempt.duration_seconds < HEALTHY_ATTEMPT_SECONDS


async def test_hostile_rows_fail_alone_and_the_healthy_rows_beside_them_complete(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    healthy_before = await insert_healthy_rows(connection, site, 4)
    hostile = await insert_hostile_rows(connection, site.url("/static/999"))
    healthy_after = await insert_healthy_rows(connection, site, 4)

    port = free_port()
    started = time.monotonic()
    async with HealthProbe(f"http://127.0.0.1:{port}/healthz") as probe:
        await run_burst(
            worker_settings,
            batch_size=8,
            concurrency=4,
            metrics_port=port,
            metrics_host="127.0.0.1",
        )
    elapsed = time.monotonic() - started

    assert probe.answered, "the worker's /healthz never answered during the burst"
    assert probe.slowest_seconds < HEALTH_WITHIN_SECONDS, probe.answers
    for job_id in hostile:
        row = await job_row(connection, job_id)
        assert (row.status, row.last_reason) == ("failed", "invalid_payload"), row.last_error
        assert row.last_error is not None
        assert row.last_error.startswith("invalid payload: ")
    await assert_healthy_rows_completed_promptly(connection, healthy_before + healthy_after)
    assert elapsed < 30, f"the burst took {elapsed:.1f}s"


async def test_two_workers_each_handle_the_hostile_rows_they_claim_and_exit_0(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    hostile = []
    for _ in range(3):
        hostile += await insert_hostile_rows(connection, site.url("/static/999"))
    healthy = await insert_healthy_rows(connection, site, 8)

    workers = [
        Worker(
            dataclasses.replace(worker_settings, worker_id=name, batch_size=4, concurrency=2),
            install_signal_handlers=False,
        )
        for name in ("first", "second")
    ]
    statuses = await asyncio.wait_for(asyncio.gather(*(w.run() for w in workers)), 120)

    assert statuses == [0, 0]
    cursor = await connection.execute(
        "SELECT DISTINCT processed_by FROM scraping_jobs WHERE id = ANY(%s)", (hostile,)
    )
    handled_by = {row[0] for row in await cursor.fetchall()}
    assert handled_by <= {"first", "second"}
    for job_id in hostile:
        row = await job_row(connection, job_id)
        assert (row.status, row.last_reason) == ("failed", "invalid_payload")
    await assert_healthy_rows_completed_promptly(connection, healthy)


@pytest.mark.parametrize("render", [True, False], ids=["browser", "static"])
async def test_two_rows_for_a_refused_target_fail_at_once_one_after_the_other(
    render: bool, site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    # Both rows obey robots.txt: the first fetch of it is refused by the guard, and the
    # cluster's lease on that origin must not hold the second row back.
    refused = [
        await queue.enqueue(
            connection,
            f"http://169.254.169.254/latest/{n}",
            payload={"render": render, "politeness": {"respectRobotsTxt": True}},
        )
        for n in range(2)
    ]
    healthy = await insert_healthy_rows(connection, site, 2)

    await run_burst(worker_settings, batch_size=1, concurrency=1)

    attempts = []
    for job_id in refused:
        row = await job_row(connection, job_id)
        assert (row.status, row.last_reason) == ("failed", "blocked_address"), row.last_error
        attempts += row.attempts
    first_start = min(attempt.started_at for attempt in attempts)
    last_end = max(attempt.finished_at for attempt in attempts if attempt.finished_at)
    elapsed = (last_end - first_start).total_seconds()
    assert elapsed < 5.0, f"the two refused rows took {elapsed:.1f}s"
    await assert_healthy_rows_completed_promptly(connection, healthy)


class EndlessSite(dict[str, str]):
    """Pages that each link to 40 pages never seen before: a crawl that only a cap ends."""

    def get(self, name: str, default: str | None = None) -> str:  # type: ignore[override]
        links = "".join(f'<a href="/page/{name}-{n}">{n}</a>' for n in range(40))
        return f"<!doctype html><html><head><title>{name}</title></head><body>{links}</body></html>"


@pytest.mark.parametrize("render", [True, False], ids=["browser", "static"])
async def test_a_classic_row_that_follows_links_ends_after_its_max_pages(
    render: bool, site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages = EndlessSite()
    cursor = await connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        "VALUES (%s, 'p', %s::jsonb) RETURNING id",
        (
            site.url("/page/root"),
            # waitUntil load: without it each rendered page would wait for 500 ms without a
            # request (the wait of a row that says nothing), which this test is not about.
            '{"render": %s, "waitUntil": "load", "follow": {"selector": "a", "maxPages": 45,'
            ' "maxDepth": 5}}' % ("true" if render else "false"),
        ),
    )
    row = await cursor.fetchone()
    assert row is not None

    await run_burst(worker_settings, batch_size=8, concurrency=4)

    cursor = await connection.execute(
        "SELECT depth, status::text, result -> 'follow_dropped' FROM scraping_jobs ORDER BY id"
    )
    rows = await cursor.fetchall()
    # The root queues 40 pages; the 5 pages left go to the first 5 of them, one each.
    assert len(rows) == 1 + 45
    assert {status for _, status, _ in rows} == {"completed"}
    assert [depth for depth, _, _ in rows].count(2) == 5
    dropped = [reported for _, _, reported in rows if reported is not None]
    assert dropped == [{"max_pages": 39}] * 5


# URLs no engine can fetch, each with what the reason's message says. Inserted by plain SQL.
BAD_URLS = {
    "http://[::1/": "cannot be parsed: Invalid IPv6 URL",
    "http://127.0.0.2:0/": "has port 0",
    "http://127.0.0.2:99999/": "Port out of range",
    "http://127.0.0.2:6000/": "uses port 6000, another protocol's port",
    "http://shop..example/": "is not a valid DNS name",
    "http://" + "x" * 64 + ".example/": "is not a valid DNS name",
}


@pytest.mark.parametrize("render", [True, False], ids=["browser", "static"])
async def test_a_url_no_engine_can_fetch_fails_as_bad_url_before_any_engine_sees_it(
    render: bool, site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    bad = {}
    for url in BAD_URLS:
        cursor = await connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
            "VALUES (%s, 'p', %s::jsonb) RETURNING id",
            (url, '{"render": %s}' % ("true" if render else "false")),
        )
        row = await cursor.fetchone()
        assert row is not None
        bad[row[0]] = url
    healthy = await insert_healthy_rows(connection, site, 2)

    await run_burst(worker_settings, batch_size=8, concurrency=2)

    for job_id, url in bad.items():
        row = await job_row(connection, job_id)
        assert (row.status, row.last_reason, row.retry_count) == ("failed", "bad_url", 0), url
        assert row.last_error is not None
        assert BAD_URLS[url] in row.last_error
    await assert_healthy_rows_completed_promptly(connection, healthy)


@pytest.mark.parametrize("render", [True, False], ids=["browser", "static"])
async def test_a_redirect_loop_fails_for_good_in_both_engines(
    render: bool, site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    looping = await queue.enqueue(
        connection, site.url("/redirect-loop"), payload={"render": render}
    )

    await run_burst(worker_settings)

    row = await job_row(connection, looping)
    assert (row.status, row.last_reason, row.retry_count) == (
        "failed",
        "too_many_redirects",
        0,
    ), row.last_error


async def test_a_hostile_row_a_lost_worker_held_is_failed_by_the_next_worker_that_claims_it(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    # The first worker claimed the row and was lost before it finished (as every worker that
    # claimed such a row once was): its lease ran out, and the rescue gives the row back.
    hostile = await insert_plain_row(connection, site.url("/static/999"), HOSTILE_PAYLOADS[0])
    first = await queue.claim_jobs(
        connection,
        worker_id="lost-worker",
        queues=["default"],
        limit=1,
        lease_seconds=30,
        reject_invalid_payloads=False,
    )
    assert [job.id for job in first] == [hostile]
    assert not first[0].options_checked  # a worker given it would check the options itself
    await connection.execute(
        "UPDATE scraping_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (hostile,),
    )
    assert await queue.rescue_expired_leases(connection) == 1
    healthy = await insert_healthy_rows(connection, site, 2)

    await run_burst(worker_settings)

    row = await job_row(connection, hostile)
    assert (row.status, row.last_reason) == ("failed", "invalid_payload")
    assert [attempt.worker_id for attempt in row.attempts] == ["lost-worker", "test-worker"]
    await assert_healthy_rows_completed_promptly(connection, healthy)


@pytest.mark.parametrize("render", [True, False], ids=["browser", "static"])
async def test_a_redirect_to_a_port_browsers_refuse_is_a_bad_url_in_both_engines(
    render: bool, site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    redirected = await queue.enqueue(
        connection,
        site.url("/redirect?to=http://127.0.0.2:6000/"),
        payload={"render": render},
    )

    await run_burst(worker_settings)

    row = await job_row(connection, redirected)
    assert (row.status, row.last_reason, row.retry_count) == ("failed", "bad_url", 0)
    assert row.last_error is not None
    assert "uses port 6000" in row.last_error
