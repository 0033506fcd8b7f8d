"""Upstream proxies from a Secret (spec.proxy): the job's pages go through them, and the proxy
URLs with their credentials appear nowhere else.

Real kube-apiserver, PostgreSQL, operator process, a real worker process with Chromium
(render: true) and the HTTP engine (render: false), and a real tinyproxy with BasicAuth. Then
the proxy password is searched for in the ScrapeJobs (spec and status), the namespace's Events,
the operator's and the worker's logs, and every column of every row of every table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from scrapeq_queue.sealed_credentials import SealingKeys

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    scrapejob,
    wait_for_status,
)
from tests.e2e.operator.test_credentials_from_secrets import (
    RecordingSite,
    apply_before_their_secret,
    places_a_reader_could_look,
    recording_site,
    run_worker_burst,
)
from tests.integration.worker.tinyproxy import Tinyproxy, running_tinyproxy, secrets_in
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(240)]

PROXY = {"secretRef": {"name": "shop-proxy"}}


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    with running_tinyproxy(tmp_path / "tinyproxy") as proxy:
        yield proxy


@pytest.fixture
def shop() -> Iterator[RecordingSite]:
    pages: dict[str, bytes | tuple[int, str]] = {
        "/rendered": b"<html><body><h1>Rendered</h1></body></html>",
        "/static": b"<html><body><h1>Static</h1></body></html>",
    }
    with recording_site(pages) as site:
        yield site


def test_a_job_s_pages_go_through_its_proxies_whose_credentials_appear_nowhere_else(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    tinyproxy: Tinyproxy,
    shop: RecordingSite,
) -> None:
    key = SealingKeys.generate()
    operator = operator_factory(empty_database_url, environment={"SCRAPEQ_SEALING_KEY": key})
    jobs = {
        "rendered": scrapejob(
            "rendered", url=f"{shop.url}/rendered", proxy=PROXY, retries={"limit": 0}
        ),
        "static": scrapejob(
            "static", url=f"{shop.url}/static", render=False, proxy=PROXY, retries={"limit": 0}
        ),
    }
    # No Secret yet: the jobs wait with a reason naming the Secret, and queue nothing.
    for status in apply_before_their_secret(kubectl, namespace, jobs).values():
        assert f"spec.proxy: Secret {namespace}/shop-proxy does not exist" in status["message"]

    # A Secret whose list holds something that is not a proxy URL: InvalidProxy, naming the
    # line and never its text.
    kubectl.run(
        "create", "secret", "generic", "shop-proxy", "-n", namespace,
        f"--from-literal=proxies=socks4://{tinyproxy.url()[7:]}",
    )  # fmt: skip
    status = wait_for_status(
        kubectl,
        namespace,
        "static",
        lambda s: s.get("reason") == "InvalidProxy",
        what="static: Ready=False InvalidProxy",
    )
    assert "line 1 is not an upstream proxy" in status["message"]
    kubectl.run("delete", "secret", "shop-proxy", "-n", namespace)
    kubectl.run(
        "create", "secret", "generic", "shop-proxy", "-n", namespace,
        f"--from-literal=proxies=# the shop's proxy\n{tinyproxy.url()}\n",
    )  # fmt: skip
    uids = {name: kubectl.get("scrapejob", name, namespace)["metadata"]["uid"] for name in jobs}
    for uid in uids.values():
        eventually_blocking(
            lambda uid=uid: owner_progress(empty_database_url, uid).total == 1,
            within=60,
            what="rows queued once the Secret is right",
        )

    worker = run_worker_burst(empty_database_url, key)
    for name in jobs:
        wait_for_status(
            kubectl, namespace, name, lambda s: s.get("phase") == "Succeeded", what=f"{name} done"
        )
    # Both pages came through tinyproxy, as tunnels to the checked address.
    tunnel = f"CONNECT 127.0.0.1:{shop.url.rsplit(':', 1)[1]}"
    tunnels = [line for line in tinyproxy.requests() if tunnel in line]
    assert len(shop.headers_of("/rendered")) == 1
    assert len(shop.headers_of("/static")) == 1
    assert len(tunnels) >= 2, tinyproxy.requests()

    places = places_a_reader_could_look(kubectl, namespace, operator, worker, empty_database_url)
    assert "scrapeq-sealed:v1:" in places["database rows"]
    assert "shop-proxy" in places["ScrapeJobs"]
    assert "InvalidProxy" in places["Events"]
    for place, text in places.items():
        assert secrets_in(text) == [], f"the proxy's credentials appear in the {place}"
        assert tinyproxy.url() not in text, f"the proxy URL appears in the {place}"


def test_a_proxy_needs_a_secret_and_cannot_change_on_a_live_scrapejob(
    kubectl: Kubectl, namespace: str
) -> None:
    missing = scrapejob("no-secret", url="https://a.example.com/", proxy={"key": "proxies"})
    missing["metadata"]["namespace"] = namespace
    refused = kubectl.create(missing, check=False)
    assert "spec.proxy.secretRef: Required value" in refused.stderr, refused.stderr

    manifest = scrapejob("live", url="https://a.example.com/", proxy=PROXY)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    changed = kubectl.run(
        "patch", "scrapejob", "live", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"proxy": {"secretRef": {"name": "someone-elses"}}}}', check=False,
    )  # fmt: skip
    assert changed.returncode != 0
    assert "spec is immutable" in changed.stderr, changed.stderr
