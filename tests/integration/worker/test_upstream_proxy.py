"""Chaining to an upstream HTTP proxy (a real tinyproxy from Debian, with BasicAuth): the
worker's egress proxy checks first, then asks the upstream for a tunnel to the checked
address; the credentials never show in a result, a row or a log line (docs/worker.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import scrapeq_queue as queue
from scrapeq_queue.sealed_credentials import SEALING_KEY_ENV, Credentials, SealingKeys
from scrapeq_worker.egress_proxy import UpstreamProxy
from scrapeq_worker.settings import WorkerSettings

from tests.waiting import eventually

from .conftest import Connection, JobRow, job_row, run_burst
from .site import SITE_HOST, HostileSite
from .tinyproxy import PASSWORD, USER, Tinyproxy, running_tinyproxy, secrets_in

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.chromium,
    pytest.mark.timeout(120),
]


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    with running_tinyproxy(tmp_path / "first") as proxy:
        yield proxy


@pytest.fixture
def second_tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    with running_tinyproxy(tmp_path / "second") as proxy:
        yield proxy


@dataclass(frozen=True)
class Case:
    """One page for one engine, and the parts a test runs it with."""

    path: str
    payload: dict[str, object]
    heading: str
    site: HostileSite
    tinyproxy: Tinyproxy
    settings: WorkerSettings
    connection: Connection

    async def run(self, upstream: str, **options: int) -> JobRow:
        job_id = await queue.enqueue(
            self.connection, self.site.url(self.path), payload=self.payload, **options
        )
        await run_burst(self.settings, upstream_proxy=UpstreamProxy.parse(upstream))
        return await job_row(self.connection, job_id)


# Both engines: the browser (through its contexts' routes) and the plain-HTTP engine.
@pytest.fixture(
    params=[
        ("/js/3", {"waitFor": "h1.name", "extract": {"n": "h1"}}, "Laptop 3"),
        ("/static/3", {"render": False, "extract": {"n": "h1"}}, "Static 3"),
    ],
    ids=["browser", "http"],
)
def case(
    request: pytest.FixtureRequest,
    site: HostileSite,
    tinyproxy: Tinyproxy,
    worker_settings: WorkerSettings,
    connection: Connection,
    caplog: pytest.LogCaptureFixture,
) -> Case:
    caplog.set_level(logging.DEBUG)
    path, payload, heading = request.param
    return Case(path, payload, heading, site, tinyproxy, worker_settings, connection)


async def test_pages_are_fetched_through_the_upstream_proxy_to_the_checked_address(
    case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    row = await case.run(case.tinyproxy.url())

    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"n": case.heading}
    # The upstream was asked for the address the guard checked, not for a name.
    tunnel = f"CONNECT {SITE_HOST}:{case.site.port}"
    await eventually(
        lambda: any(tunnel in line for line in case.tinyproxy.requests()),
        within=5,
        what="tinyproxy to log the tunnel",
    )
    assert secrets_in(caplog.text) == []
    assert secrets_in(str(row.result)) == []


async def test_a_refused_upstream_login_fails_the_job_without_showing_the_credentials(
    case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    row = await case.run(case.tinyproxy.url(password="not-" + PASSWORD), max_retries=0)

    assert row.status == "failed"
    assert row.last_reason == "upstream_proxy_error"
    assert row.last_error is not None
    # tinyproxy answers a wrong login with 401 (RFC 9110 would say 407).
    assert "refused a tunnel" in row.last_error
    assert "Unauthorized" in row.last_error
    assert PASSWORD not in row.last_error
    assert PASSWORD not in caplog.text
    assert case.site.hits[case.path] == 0


async def test_a_job_s_own_proxies_carry_its_pages_in_turn_instead_of_the_pool_s(
    case: Case,
    second_tinyproxy: Tinyproxy,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec.proxy as the operator seals it into the rows: two pages of one job go through the
    two proxies of its list, one each; the pool's upstream (a dead port here) is not used."""
    key = SealingKeys.generate()
    monkeypatch.setenv(SEALING_KEY_ENV, key)
    proxies = (case.tinyproxy.url(), second_tinyproxy.url())
    sealed = SealingKeys.from_text(key).seal(Credentials(origins=(), proxies=proxies))
    paths = [case.path, case.path.replace("3", "4")]
    ids = [
        await queue.enqueue(
            case.connection, case.site.url(path), payload={**case.payload, "sealed": sealed}
        )
        for path in paths
    ]

    await run_burst(case.settings, upstream_proxy=UpstreamProxy.parse("http://127.0.0.1:9"))

    rows = [await job_row(case.connection, job_id) for job_id in ids]
    assert [row.status for row in rows] == ["completed", "completed"], rows
    assert [row.result["fields"]["n"] for row in rows] == [
        case.heading,
        case.heading.replace("3", "4"),
    ]
    tunnel = f"CONNECT {SITE_HOST}:{case.site.port}"
    for proxy in (case.tinyproxy, second_tinyproxy):
        await eventually(
            proxy.requests,
            until=lambda requests: any(tunnel in line for line in requests),
            within=5,
            what=f"tinyproxy on port {proxy.port} to log a tunnel of the job",
        )
    # The proxy list is in no log line, result, error or readable column of the rows.
    cursor = await case.connection.execute(
        "SELECT payload::text, result::text, coalesce(last_error, '') FROM scraping_jobs"
    )
    stored = " ".join(" ".join(row) for row in await cursor.fetchall())
    assert sealed in stored
    for secret in (PASSWORD, *proxies):
        assert secret not in stored
        assert secret not in caplog.text
    assert secrets_in(caplog.text) == []


def test_an_upstream_proxy_is_shown_without_its_credentials() -> None:
    upstream = UpstreamProxy.parse(f"http://{USER}:{PASSWORD}@proxy.internal:3128")

    assert PASSWORD not in repr(upstream)
    assert PASSWORD not in str(upstream)
    assert str(upstream) == "http://proxy.internal:3128 (with credentials)"
    with pytest.raises(ValueError, match="http://") as error:
        UpstreamProxy.parse(f"socks4://{USER}:{PASSWORD}@proxy.internal:1080")
    assert PASSWORD not in str(error.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"socks4://{USER}:{PASSWORD}@proxy.internal:1080", "its scheme is 'socks4', not 'http'"),
        (f"https://{USER}:{PASSWORD}@proxy.internal:3128", "its scheme is 'https', not 'http'"),
        (f"http://{USER}:{PASSWORD}@:3128", "it names no host"),
        (f"http://{USER}:{PASSWORD}@proxy.internal", "its port is missing"),
        (f"http://{USER}:{PASSWORD}@proxy.internal:http", "its port is missing or not a number"),
        ("proxy.internal:3128", "not 'http'"),
    ],
    ids=["socks", "https", "no-host", "no-port", "port-not-a-number", "no-scheme"],
)
def test_a_bad_upstream_proxy_is_refused_naming_what_is_wrong_but_not_the_password(
    text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=r"^an upstream proxy is http://\[user:") as error:
        UpstreamProxy.parse(text)
    assert problem in str(error.value)
    assert PASSWORD not in str(error.value)
