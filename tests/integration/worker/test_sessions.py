"""The session pool with a real worker, PostgreSQL, three real tinyproxies and a local defended
site that blocks a (proxy, cookie) pair after a few pages: the job completes every page by
rotating sessions, a proxy that always fails is retired for every worker within a bounded
number of pages, and the metrics count the pages blocked and retried (docs/worker.md,
"Sessions")."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import scrapeq_queue as queue
from scrapeq_queue import sessions
from scrapeq_queue.sealed_credentials import SEALING_KEY_ENV, Credentials, SealingKeys
from scrapeq_queue.sessions import proxy_id
from scrapeq_worker.settings import WorkerSettings

from scrapeq.local.defended_site import DefendedSite, running_defended_site

from .conftest import Connection, job_row, run_burst
from .tinyproxy import Tinyproxy, running_tinyproxy

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

# Each proxy's connections leave from an address of its own, as real proxies' do.
PROXY_ADDRESSES = ("127.0.0.3", "127.0.0.4", "127.0.0.5")
ALLOWS = 4
PAGES = 18
OWNER = queue.Owner("uid-defended", "shop", "defended")
# A port nothing listens on: a proxy that always fails.
DEAD_PROXY = "http://127.0.0.1:9"


@pytest.fixture
def defended_site() -> Iterator[DefendedSite]:
    yield from running_defended_site(allows=ALLOWS)


@pytest.fixture
def tinyproxies(tmp_path: Path) -> Iterator[list[Tinyproxy]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(running_tinyproxy(tmp_path / address, bind=address))
            for address in PROXY_ADDRESSES
        ]


def sealed_proxies(monkeypatch: pytest.MonkeyPatch, proxies: tuple[str, ...]) -> str:
    """The job's proxies sealed as the operator seals spec.proxy into its rows."""
    key = SealingKeys.generate()
    monkeypatch.setenv(SEALING_KEY_ENV, key)
    return SealingKeys.from_text(key).seal(Credentials(origins=(), proxies=proxies))


@pytest.mark.parametrize("render", [False, True], ids=["static", "browser"])
async def test_a_job_completes_every_page_of_a_defended_site_by_rotating_sessions(
    render: bool,
    defended_site: DefendedSite,
    tinyproxies: list[Tinyproxy],
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxies = tuple(proxy.url() for proxy in tinyproxies)
    sealed = sealed_proxies(monkeypatch, (*proxies, DEAD_PROXY))
    ids = await queue.enqueue_many(
        connection,
        [defended_site.url(f"/item/{n}") for n in range(PAGES)],
        payload={"render": render, "extract": {"name": "h1"}, "sealed": sealed},
        owner=OWNER,
        max_retries=8,
        backoff_seconds=0,
    )
    settings = dataclasses.replace(worker_settings, proxy_failures_in_a_row=3)

    worker = await run_burst(settings)

    rows = [await job_row(connection, job_id) for job_id in ids]
    assert [row.status for row in rows] == ["completed"] * PAGES, [
        (row.status, row.last_error) for row in rows
    ]
    assert sorted(row.result["fields"]["name"] for row in rows) == sorted(
        f"Item {n}" for n in range(PAGES)
    )
    # More pages than the site serves cookie-less visitors (ALLOWS per proxy address): the
    # sessions' jars were carried from page to page, in either engine.
    assert ALLOWS * len(PROXY_ADDRESSES) < PAGES
    # The site did block sessions, and every proxy carried pages.
    assert sum(defended_site.refused.values()) > 0
    assert set(defended_site.served) == set(PROXY_ADDRESSES)

    def sample(name: str, **labels: str) -> float:
        return worker.metrics.registry.get_sample_value(name, labels) or 0.0

    blocked = sample("scrapeq_worker_pages_blocked_total", queue="default", rule="status")
    assert blocked == sum(defended_site.refused.values())
    assert sample("scrapeq_worker_jobs_retried_total", queue="default", reason="blocked") == (
        blocked
    )
    # The ScrapeJob's status counts them as well (status.blocked).
    progress = await queue.owner_progress(connection, [OWNER.uid])
    assert progress[OWNER.uid].blocked == blocked
    # The dead proxy was retired for every worker after at most its failures in a row.
    dead = proxy_id(DEAD_PROXY)
    assert sample("scrapeq_worker_proxies_retired_total", proxy=dead) == 1
    assert sample("scrapeq_worker_session_pages_total", proxy=dead, outcome="proxy_failed") == 3
    assert await sessions.retired_proxies(connection, [dead, *map(proxy_id, proxies)]) == [dead]
    # No proxy's address or credentials reached the database.
    cursor = await connection.execute("SELECT string_agg(proxy_id, ' ') FROM scrapeq_proxies")
    row = await cursor.fetchone()
    assert row is not None
    for proxy in tinyproxies:
        assert str(proxy.port) not in row[0]


async def test_without_sessions_the_defended_site_blocks_the_job_for_good(
    defended_site: DefendedSite,
    tinyproxies: list[Tinyproxy],
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same job without the pool: each page comes without cookies, through the next proxy
    in turn, and the site stops serving each proxy after its fresh-visitor budget."""
    sealed = sealed_proxies(monkeypatch, tuple(proxy.url() for proxy in tinyproxies))
    ids = await queue.enqueue_many(
        connection,
        [defended_site.url(f"/item/{n}") for n in range(PAGES)],
        payload={"render": False, "extract": {"name": "h1"}, "sealed": sealed},
        max_retries=2,
        backoff_seconds=0,
    )

    await run_burst(dataclasses.replace(worker_settings, sessions=False))

    rows = [await job_row(connection, job_id) for job_id in ids]
    completed = [row for row in rows if row.status == "completed"]
    assert len(completed) == ALLOWS * len(PROXY_ADDRESSES)
    assert {row.last_reason for row in rows if row.status == "failed"} == {"blocked"}


async def test_a_page_blocked_on_every_session_it_tries_fails_blocked_after_three(
    tinyproxies: list[Tinyproxy],
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A site that refuses everything: the row tries three sessions (one per proxy), then
    fails for good as `blocked` though its retry limit would allow more."""
    sealed = sealed_proxies(monkeypatch, tuple(proxy.url() for proxy in tinyproxies))
    with contextlib.contextmanager(running_defended_site)(allows=0) as refusing:
        job_id = await queue.enqueue(
            connection,
            refusing.url("/item/1"),
            payload={"render": False, "sealed": sealed},
            max_retries=8,
            backoff_seconds=0,
        )
        await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert (row.status, row.last_reason, row.retry_count) == ("failed", "blocked", 2)
    assert row.last_error is not None
    assert "blocked on 3 sessions" in row.last_error
    assert dict(refusing.refused) == {address: 1 for address in PROXY_ADDRESSES}
