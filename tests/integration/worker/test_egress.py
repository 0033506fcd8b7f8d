"""One way out: everything Chromium sends leaves through the worker's egress proxy, which
resolves once, checks, and connects to the checked address (docs/worker.md, "Threat model").

Each hostile page lives on the allowed test site (127.0.0.2) and tries to reach a 'secret'
service on 127.0.0.1 / ::1 (outside the allow-list) through a path the tab's own CDP `Fetch`
checks never see. The secret counts every TCP connection and UDP datagram: it must count zero.
Each page marks `#done` once its attempts have settled, so the job's result is read only after
the attack ran; where the proxy saw the attempt, the job's `blocked_requests` names it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker import network_guard
from scrapeq_worker.network_guard import IPAddress, NetworkGuard
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .secret import SecretServer, running_secret
from .site import SITE_HOST, HostileSite, running_site

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(120)]

DONE = {"waitFor": "#done", "extract": {"done": "#done"}, "timeoutSeconds": 20}


@pytest.fixture
def secret() -> Iterator[SecretServer]:
    yield from running_secret()


def page(script: str, head: str = "") -> str:
    """A page that runs `script` (which calls done() when its attempts have settled)."""
    return (
        f"<!doctype html><html><head><title>hostile</title>{head}</head><body><script>"
        "function done(text) { var d = document.createElement('p'); d.id = 'done';"
        " d.textContent = text || 'done'; document.body.appendChild(d); }\n"
        f"{script}</script></body></html>"
    )


async def scrape(
    connection: Connection,
    settings: WorkerSettings,
    url: str,
    payload: dict[str, Any] = DONE,
) -> Any:
    job_id = await queue.enqueue(connection, url, payload=payload, dedup_key=url)
    await run_burst(settings)
    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    return row.result


def blocked_targets(result: Any) -> set[str]:
    return {entry["url"] for entry in result.get("blocked_requests", [])}


async def test_a_websocket_to_a_loopback_port_is_refused_over_ipv4_and_ipv6(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    site.pages["ws"] = page(
        "var left = 2; function settle() { if (--left === 0) done(); }\n"
        f"['ws://127.0.0.1:{secret.port}/', 'ws://[::1]:{secret.port}/'].forEach(function (u) {{"
        " var s = new WebSocket(u); s.onerror = settle; s.onopen = function () {"
        " s.send('hi'); settle(); }; });"
    )

    result = await scrape(connection, worker_settings, site.url("/page/ws"))

    assert secret.hits == 0
    assert {f"127.0.0.1:{secret.port}", f"[::1]:{secret.port}"} <= blocked_targets(result)


async def test_popups_and_their_images_and_fetches_never_reach_the_secret(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    site.pages["child"] = page(
        f"var img = new Image(); img.src = '{secret.url('/popup-image')}';\n"
        f"fetch('{secret.url('/popup-fetch')}').then(function (r) {{ return r.text(); }})"
        ".then(function (t) { opener.postMessage('leak:' + t, '*'); },"
        " function () { opener.postMessage('refused', '*'); });"
    )
    site.pages["opener"] = page(
        f"window.open('{secret.url('/popup')}');\n"
        "window.addEventListener('message', function (e) { done(String(e.data)); });\n"
        "window.open('/page/child');"
    )

    result = await scrape(connection, worker_settings, site.url("/page/opener"))

    assert result["fields"]["done"] == "refused"
    assert secret.hits == 0
    assert {
        secret.url("/popup"),
        secret.url("/popup-image"),
        secret.url("/popup-fetch"),
    } <= blocked_targets(result)


async def test_shared_workers_and_service_workers_cannot_fetch_the_secret(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    site.scripts["shared.js"] = (
        "onconnect = function (e) { var port = e.ports[0];"
        f" fetch('{secret.url('/shared')}').then(function () {{ port.postMessage('leak'); }},"
        " function () { port.postMessage('refused'); }); };"
    )
    site.scripts["sw.js"] = (
        "self.addEventListener('message', function (e) {"
        f" e.waitUntil(fetch('{secret.url('/service')}').then(function () {{ return 'leak'; }},"
        " function () { return 'refused'; }).then(function (v) { e.source.postMessage(v); }));"
        " });"
    )
    site.pages["workers"] = page(
        "var answers = [];\n"
        "function note(v) { answers.push(v); if (answers.length === 2) done(answers.join(',')); }\n"
        "var w = new SharedWorker('/script/shared.js'); w.port.onmessage = function (e) {"
        " note(e.data); }; w.port.start();\n"
        "navigator.serviceWorker.onmessage = function (e) { note(e.data); };\n"
        "navigator.serviceWorker.register('/script/sw.js', {scope: '/'}).then(function () {"
        " return navigator.serviceWorker.ready; }).then(function (r) {"
        " r.active.postMessage('go'); }, function (e) { note('no service worker: ' + e); });"
    )

    result = await scrape(connection, worker_settings, site.url("/page/workers"))

    assert result["fields"]["done"] == "refused,refused"
    assert secret.hits == 0
    assert {secret.url("/shared"), secret.url("/service")} <= blocked_targets(result)


async def test_a_service_worker_left_by_one_scrapejob_never_controls_another_ones_page(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.scripts["takeover.js"] = (
        "self.addEventListener('install', function () { self.skipWaiting(); });\n"
        "self.addEventListener('activate', function (e) { e.waitUntil(clients.claim()); });\n"
        "self.addEventListener('fetch', function (e) { e.respondWith(new Response("
        "'<h1 class=name>TAKEN OVER</h1><p id=done>x</p>',"
        " {headers: {'Content-Type': 'text/html'}})); });"
    )
    site.pages["install"] = page(
        "navigator.serviceWorker.register('/script/takeover.js', {scope: '/'}).then(function () {"
        " return navigator.serviceWorker.ready; }).then(function () { done('installed'); });"
    )
    first = await queue.enqueue(
        connection,
        site.url("/page/install"),
        payload=DONE,
        dedup_key="install",
        priority=9,
        owner=queue.Owner(uid="uid-a", namespace="team-a", name="installs"),
    )
    second = await queue.enqueue(
        connection,
        site.url("/js/1"),
        payload={"extract": {"name": "h1.name"}},
        dedup_key="victim",
        priority=1,
        owner=queue.Owner(uid="uid-b", namespace="team-b", name="victim"),
    )

    # One worker, one page at a time: the second job runs in the same browser after the first.
    await run_burst(worker_settings, concurrency=1)

    installed = await job_row(connection, first)
    assert installed.status == "completed", installed.last_error
    assert installed.result["fields"]["done"] == "installed"
    victim = await job_row(connection, second)
    assert victim.status == "completed", victim.last_error
    assert victim.result["fields"]["name"] == "Laptop 1"


async def test_speculation_rules_prefetch_and_prerender_never_reach_the_secret(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    to_secret = "/redirect?to=" + secret.url("/prerendered")
    rules = (
        '<script type="speculationrules">{"prefetch": [{"source": "list", "urls": ['
        f'"{secret.url("/prefetch")}", "/redirect?to={secret.url("/prefetched")}"]}}],'
        f' "prerender": [{{"source": "list", "urls": ["{to_secret}"]}}]}}</script>'
    )
    # The page finishes once the site saw the speculative request for the redirect.
    site.pages["speculation"] = page(
        "var tries = 0; (function wait() { fetch('/page/probe-hits').then(function (r) {"
        " return r.text(); }).then(function (t) { if (t.indexOf('seen') >= 0 || ++tries > 40)"
        " done(t.indexOf('seen') >= 0 ? 'speculated' : 'not speculated');"
        " else setTimeout(wait, 100); }); })();",
        head=rules,
    )

    class Probe(dict[str, str]):
        def get(self, key: str, default: Any = None) -> Any:
            if key == "probe-hits":
                return "seen" if site.hits["/redirect"] >= 2 else "not yet"
            return super().get(key, default)

    site.pages = Probe(site.pages)

    result = await scrape(connection, worker_settings, site.url("/page/speculation"))

    assert result["fields"]["done"] == "speculated"
    assert secret.hits == 0
    # Chromium does not follow a speculative request's cross-site redirect nor send cross-site
    # speculation (measured), so nothing reaches the proxy to refuse: nothing may be reported
    # as blocked either, beyond the secret's own URLs.
    assert blocked_targets(result) <= {
        secret.url("/prefetch"),
        secret.url("/prefetched"),
        secret.url("/prerendered"),
    }


async def test_webrtc_stun_and_turn_never_send_a_datagram_to_the_secret(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    servers = [
        {"urls": f"stun:127.0.0.1:{secret.port}"},
        {"urls": f"stun:[::1]:{secret.port}"},
        {"urls": f"turn:127.0.0.1:{secret.port}?transport=udp", "username": "u", "credential": "c"},
        {"urls": f"turn:127.0.0.1:{secret.port}?transport=tcp", "username": "u", "credential": "c"},
    ]
    site.pages["webrtc"] = page(
        f"var pc = new RTCPeerConnection({{iceServers: {servers!r}}});\n"
        "pc.createDataChannel('x');\n"
        "pc.onicegatheringstatechange = function () {"
        " if (pc.iceGatheringState === 'complete') done('gathered'); };\n"
        "pc.createOffer().then(function (o) { return pc.setLocalDescription(o); });"
    )

    result = await scrape(connection, worker_settings, site.url("/page/webrtc"))

    assert result["fields"]["done"] == "gathered"
    assert secret.hits == 0


async def test_quic_and_webtransport_never_send_a_datagram_to_the_secret(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    site.pages["quic"] = page(
        "var left = 2; function settle() { if (--left === 0) done(); }\n"
        f"try {{ var t = new WebTransport('{secret.url('/wt', scheme='https')}');"
        " t.ready.then(settle, settle); } catch (e) { settle(); }\n"
        f"fetch('{secret.url('/h3', scheme='https')}').then(settle, settle);"
    )

    await scrape(connection, worker_settings, site.url("/page/quic"))

    assert secret.hits == 0


async def test_refusals_are_reported_only_by_the_job_whose_page_made_them(
    site: HostileSite,
    secret: SecretServer,
    worker_settings: WorkerSettings,
    connection: Connection,
) -> None:
    site.pages["sneaky"] = page(
        f"var s = new WebSocket('ws://127.0.0.1:{secret.port}/'); s.onerror = function () {{"
        " done(); };"
    )
    sneaky = await queue.enqueue(connection, site.url("/page/sneaky"), payload=DONE)
    clean = [
        await queue.enqueue(
            connection, site.url(f"/js/{n}"), payload={"extract": {"name": "h1.name"}}
        )
        for n in range(4)
    ]

    await run_burst(worker_settings, concurrency=5)

    sneaky_row = await job_row(connection, sneaky)
    assert sneaky_row.status == "completed", sneaky_row.last_error
    assert blocked_targets(sneaky_row.result) == {f"127.0.0.1:{secret.port}"}
    for job_id in clean:
        row = await job_row(connection, job_id)
        assert row.status == "completed", row.last_error
        assert "blocked_requests" not in row.result
    assert secret.hits == 0


def rebind_after(monkeypatch: pytest.MonkeyPatch, checks: int) -> list[IPAddress]:
    """Stand in a resolver the test controls: `rebind.test` resolves to the allowed site's
    address for the first `checks` lookups and to the secret's loopback address after (no
    cache in between). Returns the answers given, in order."""
    answers: list[IPAddress] = []
    original = NetworkGuard._lookup

    async def rebinding(self: NetworkGuard, host: str, port: int) -> tuple[IPAddress, ...]:
        if host != "rebind.test":
            return await original(self, host, port)
        answer = ipaddress.ip_address(SITE_HOST if len(answers) < checks else "127.0.0.1")
        answers.append(answer)
        return (answer,)

    monkeypatch.setattr(NetworkGuard, "_lookup", rebinding)
    monkeypatch.setattr(network_guard, "DNS_CACHE_SECONDS", 0.0)
    return answers


@pytest.fixture
def secret_and_site() -> Iterator[tuple[SecretServer, HostileSite]]:
    """The secret on a free port of 127.0.0.1 and the site on the same port of its own
    address, so that a connection by name to the site's port lands on the secret when the
    name resolves to loopback. The secret takes its port first: a free port chosen for the
    site could be in use on 127.0.0.1 (by any local connection's end)."""
    for secret in running_secret():
        for site in running_site(secret.port):
            yield secret, site


async def test_a_name_that_rebinds_to_the_secret_after_its_checks_is_never_connected_to(
    secret_and_site: tuple[SecretServer, HostileSite],
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resolver the test controls answers the allowed site's address to the worker's two
    checks (before the tab opens, and the tab's own) and the secret's loopback address after.
    The secret listens on the site's port on 127.0.0.1, so a connection made by name after the
    checks would land on it. The proxy resolves once, checks, and connects to what it checked:
    here it sees the loopback answer and refuses."""
    secret, site = secret_and_site
    answers = rebind_after(monkeypatch, checks=2)
    job_id = await queue.enqueue(
        connection, f"http://rebind.test:{site.port}/js/1", payload=DONE, max_retries=0
    )
    await run_burst(worker_settings)
    row = await job_row(connection, job_id)

    assert len(answers) >= 3  # the proxy asked the resolver itself
    assert secret.hits == 0
    assert site.hits["/js/1"] == 0
    assert row.status == "failed"
    assert row.last_reason == "blocked_address"
    assert row.last_error is not None
    assert "127.0.0.1 is a loopback address" in row.last_error


async def test_the_plain_http_engine_connects_to_the_checked_address_or_not_at_all(
    secret_and_site: tuple[SecretServer, HostileSite],
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`render: false` after one good answer: every later lookup of the name says loopback.
    Whatever the engine does after its first check, the secret (on the site's port on
    127.0.0.1) must see nothing: the page is fetched from the checked address, or the job
    fails with the guard's reason."""
    secret, site = secret_and_site
    answers = rebind_after(monkeypatch, checks=1)
    job_id = await queue.enqueue(
        connection,
        f"http://rebind.test:{site.port}/static/1",
        payload={"render": False},
        max_retries=0,
    )
    await run_burst(worker_settings)
    row = await job_row(connection, job_id)

    assert answers, "the engine never asked the resolver the test controls"
    assert secret.hits == 0
    if row.status == "completed":
        assert site.hits["/static/1"] == 1
    else:
        assert row.status == "failed", row.last_error
        assert row.last_reason == "blocked_address"
        assert row.last_error is not None
        assert "127.0.0.1 is a loopback address" in row.last_error
        assert site.hits["/static/1"] == 0
