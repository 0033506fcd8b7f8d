"""Chaining to an upstream SOCKS5 proxy (a real microsocks from Debian, with a login): the
worker's egress proxy checks first, then asks the SOCKS5 proxy for a tunnel to the checked IP
address; both engines; the credentials never show in a row or a log line (docs/worker.md,
"Upstream proxies")."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import scrapeq_queue as queue
from scrapeq_worker.egress_proxy import UpstreamProxy
from scrapeq_worker.settings import WorkerSettings

from scrapeq.local.defended_site import DefendedSite, running_defended_site

from .conftest import Connection, job_row, run_burst
from .socks5_proxy import PASSWORD, Socks5Proxy, running_socks5_proxy

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

# The proxy's connections leave from this address: the site sees the page came through it.
PROXY_ADDRESS = "127.0.0.3"


@pytest.fixture
def socks5_proxy(tmp_path: Path) -> Iterator[Socks5Proxy]:
    with running_socks5_proxy(tmp_path / "socks", bind=PROXY_ADDRESS) as proxy:
        yield proxy


@pytest.fixture
def site() -> Iterator[DefendedSite]:
    yield from running_defended_site(allows=100)


@pytest.mark.parametrize("render", [False, True], ids=["static", "browser"])
async def test_pages_are_fetched_through_a_socks5_upstream_to_the_checked_address(
    render: bool,
    site: DefendedSite,
    socks5_proxy: Socks5Proxy,
    worker_settings: WorkerSettings,
    connection: Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    job_id = await queue.enqueue(
        connection, site.url("/item/7"), payload={"render": render, "extract": {"n": "h1"}}
    )
    await run_burst(worker_settings, upstream_proxy=UpstreamProxy.parse(socks5_proxy.url()))

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"n": "Item 7"}
    assert dict(site.served) == {PROXY_ADDRESS: 1}
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("render", [False, True], ids=["static", "browser"])
async def test_a_refused_socks5_login_fails_the_job_without_showing_the_credentials(
    render: bool,
    site: DefendedSite,
    socks5_proxy: Socks5Proxy,
    worker_settings: WorkerSettings,
    connection: Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id = await queue.enqueue(
        connection, site.url("/item/1"), payload={"render": render}, max_retries=0
    )
    wrong = socks5_proxy.url(password="not-" + PASSWORD)
    await run_burst(
        dataclasses.replace(worker_settings, sessions=False),
        upstream_proxy=UpstreamProxy.parse(wrong),
    )

    row = await job_row(connection, job_id)
    assert row.status == "failed"
    assert row.last_reason == "upstream_proxy_error"
    assert row.last_error is not None
    assert PASSWORD not in row.last_error
    assert PASSWORD not in caplog.text
    assert sum(site.served.values()) == 0


def test_a_socks5_upstream_is_shown_without_its_credentials() -> None:
    upstream = UpstreamProxy.parse(f"socks5://user:{PASSWORD}@proxy.internal:1080")

    assert upstream.scheme == "socks5"
    assert PASSWORD not in repr(upstream)
    assert str(upstream) == "socks5://proxy.internal:1080 (with credentials)"
