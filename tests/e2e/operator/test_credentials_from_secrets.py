"""Credentials from a Secret (spec.credentials): the site gets them, nobody else sees them.

Real kube-apiserver, PostgreSQL, operator process, and a real worker process with Chromium
(render: true) and the HTTP engine (render: false). The site records the headers of every
request; a second site on another origin (the page's third-party image, the target of a
redirect) records what it gets too. Then the secret values are searched for in the ScrapeJobs
(spec and status), the namespace's Events, the operator's and the worker's logs, and every
column of every row of every table: they are in none of them.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg import sql
from scrapeq_queue.sealed_credentials import SealingKeys

from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    owner_progress,
    scrapejob,
    wait_for_status,
    worker_command,
)
from tests.integration.worker.step_site import (
    LOGIN_PASSWORD,
    LOGIN_USER,
    running_step_site,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(240)]

TOKEN = f"tok-{uuid.uuid4().hex}"
SESSION = f"sess-{uuid.uuid4().hex}"
SECRETS = (TOKEN, SESSION)
CREDENTIALS = {
    "secretRef": {"name": "shop-login"},
    "headers": {"Authorization": "auth-header", "X-Api-Key": "api-key"},
    "cookies": {"session": "session-cookie"},
}


@dataclass
class RecordingSite:
    """A loopback HTTP site that records each request's path and headers."""

    pages: dict[str, bytes | tuple[int, str]]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    url: str = ""

    def headers_of(self, path: str) -> list[dict[str, str]]:
        return [headers for seen_path, headers in list(self.seen) if seen_path == path]


@contextlib.contextmanager
def recording_site(pages: dict[str, bytes | tuple[int, str]]) -> Iterator[RecordingSite]:
    site = RecordingSite(pages)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            site.seen.append((path, {k.lower(): v for k, v in self.headers.items()}))
            page = site.pages.get(path)
            if page is None:
                self.send_error(404)
                return
            if isinstance(page, tuple):
                status, location = page
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            content_type = "image/gif" if path.endswith(".gif") else "text/html; charset=utf-8"
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def sites() -> Iterator[tuple[RecordingSite, RecordingSite]]:
    """The shop (the jobs' origin) and another origin: a third-party image host and the
    target of a redirect away from the shop."""
    with recording_site({"/pixel.gif": b"GIF89a", "/landing": b"<h1>Elsewhere</h1>"}) as other:
        shop_pages: dict[str, bytes | tuple[int, str]] = {
            "/account": (
                "<html><body><h1>Your account</h1>"
                f'<img src="{other.url}/pixel.gif">'
                "<script>fetch('/api/orders').then(() => { document.title = 'done' })</script>"
                "</body></html>"
            ).encode(),
            "/api/orders": b"[]",
            "/static-account": b"<html><body><h1>Your account</h1></body></html>",
            "/away": (302, f"{other.url}/landing"),
        }
        with recording_site(shop_pages) as shop:
            yield shop, other


def _carries_credentials(headers: dict[str, str]) -> bool:
    return (
        headers.get("authorization") == f"Bearer {TOKEN}"
        and headers.get("x-api-key") == TOKEN
        and f"session={SESSION}" in headers.get("cookie", "")
    )


def _mentions_a_secret(headers: dict[str, str]) -> bool:
    return any(secret in value for value in headers.values() for secret in SECRETS)


def _every_row_as_text(database_url: str) -> str:
    """Every row of every table in the queue's database, each as its text form."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
            "AND table_type = 'BASE TABLE'"
        ).fetchall()
        texts = []
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            texts.extend(row[0] for row in connection.execute(query))
    return "\n".join(texts)


def apply_before_their_secret(
    kubectl: Kubectl, namespace: str, jobs: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Apply the ScrapeJobs in `namespace` and wait until each reports SecretNotFound; give
    their statuses by name."""
    for manifest in jobs.values():
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
    return {
        name: wait_for_status(
            kubectl,
            namespace,
            name,
            lambda s: s.get("reason") == "SecretNotFound",
            what=f"{name}: Ready=False SecretNotFound",
        )
        for name in jobs
    }


def run_worker_burst(
    database_url: str, key: str, *arguments: str
) -> subprocess.CompletedProcess[str]:
    """A real worker process (`--burst`, DEBUG logs, `arguments`) holding the sealing key; it
    must succeed."""
    worker = subprocess.run(
        worker_command("--burst", "--log-level", "DEBUG", *arguments),
        cwd=REPOSITORY_ROOT,
        env={**os.environ, "DATABASE_URL": database_url, "SCRAPEQ_SEALING_KEY": key},
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    return worker


def places_a_reader_could_look(
    kubectl: Kubectl,
    namespace: str,
    operator: OperatorProcess,
    worker: subprocess.CompletedProcess[str],
    database_url: str,
) -> dict[str, str]:
    """The ScrapeJobs (spec and status), the namespace's Events, the operator's and the
    worker's logs, and every row of every table, each as text."""
    return {
        "ScrapeJobs": kubectl.run("get", "scrapejobs", "-n", namespace, "-o", "yaml").stdout,
        "Events": kubectl.run("get", "events", "-n", namespace, "-o", "yaml").stdout,
        "operator log": operator.log_tail(characters=10_000_000),
        "worker log": worker.stdout + worker.stderr,
        "database rows": _every_row_as_text(database_url),
    }


def _a_sealed_text(database_url: str) -> str:
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT payload->>'sealed' FROM scraping_jobs WHERE payload ? 'sealed' LIMIT 1"
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_secret_headers_and_cookies_reach_the_site_and_appear_nowhere_else(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    sites: tuple[RecordingSite, RecordingSite],
) -> None:
    shop, other = sites
    key = SealingKeys.generate()
    operator = operator_factory(empty_database_url, environment={"SCRAPEQ_SEALING_KEY": key})
    jobs = {
        "rendered": scrapejob(
            "rendered",
            urls=[f"{shop.url}/account", f"{shop.url}/away"],
            waitUntil="networkidle0",
            credentials=CREDENTIALS,
            # A plain header of the same name gives way to the credential.
            payload={"headers": {"X-Api-Key": "public-value"}},
            retries={"limit": 0},
        ),
        "static": scrapejob(
            "static",
            urls=[f"{shop.url}/static-account", f"{shop.url}/away"],
            render=False,
            credentials=CREDENTIALS,
            # A plain header of the same name gives way to the credential.
            payload={"headers": {"X-Api-Key": "public-value"}},
            retries={"limit": 0},
        ),
    }
    # No Secret yet: the jobs wait with a reason, and queue nothing.
    for status in apply_before_their_secret(kubectl, namespace, jobs).values():
        assert status["phase"] == "Pending"
        assert f"Secret {namespace}/shop-login does not exist" in status["message"]
    uids = {name: kubectl.get("scrapejob", name, namespace)["metadata"]["uid"] for name in jobs}
    assert all(owner_progress(empty_database_url, uid).total == 0 for uid in uids.values())

    kubectl.run(
        "create",
        "secret",
        "generic",
        "shop-login",
        "-n",
        namespace,
        f"--from-literal=auth-header=Bearer {TOKEN}",
        f"--from-literal=api-key={TOKEN}",
        f"--from-literal=session-cookie={SESSION}",
    )
    for uid in uids.values():
        eventually_blocking(
            lambda uid=uid: owner_progress(empty_database_url, uid).total == 2,
            within=30,
            what="rows queued once the Secret exists",
        )

    worker = run_worker_burst(empty_database_url, key)
    for name in jobs:
        wait_for_status(
            kubectl,
            namespace,
            name,
            lambda s: s.get("phase") == "Succeeded",
            what=f"{name} Succeeded",
        )

    # The shop got the headers and the cookie: the documents of both engines, the browser's
    # same-origin fetch, and the first hop of each redirect.
    for path, count in (("/account", 1), ("/api/orders", 1), ("/static-account", 1), ("/away", 2)):
        requests = shop.headers_of(path)
        assert len(requests) == count, (path, requests)
        assert all(_carries_credentials(headers) for headers in requests), path
    # The other origin got none of it: not the page's image, not the redirect's target.
    assert len(other.headers_of("/pixel.gif")) == 1
    assert len(other.headers_of("/landing")) == 2
    assert not any(_mentions_a_secret(headers) for _, headers in other.seen)

    # And the values are nowhere a reader of the cluster, the logs or the table could look.
    places = places_a_reader_could_look(kubectl, namespace, operator, worker, empty_database_url)
    assert "scrapeq-sealed:v1:" in places["database rows"]
    assert "shop-login" in places["ScrapeJobs"]
    assert "SecretNotFound" in places["Events"]
    for place, text in places.items():
        for secret in SECRETS:
            assert secret not in text, f"a secret value appears in the {place}"

    # A sealed text copied into another ScrapeJob would lend it these credentials: refused.
    borrowed = scrapejob(
        "borrowed",
        url=f"{shop.url}/account",
        payload={"sealed": _a_sealed_text(empty_database_url)},
    )
    borrowed["metadata"]["namespace"] = namespace
    kubectl.apply(borrowed)
    status = wait_for_status(
        kubectl, namespace, "borrowed", lambda s: s.get("phase") == "Failed", what="borrowed Failed"
    )
    assert status["reason"] == "InvalidSpec"
    assert "payload.sealed is written by the operator: use spec.credentials" in status["message"]


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        ({"secretRef": {"name": "login"}}, "credentials needs headers or cookies"),
        ({"headers": {"X-Token": "t"}}, "spec.credentials.secretRef: Required value"),
        (
            {"secretRef": {"name": "login"}, "headers": {"Bad Header": "t"}},
            "credentials.headers: names must be HTTP header names",
        ),
        (
            {"secretRef": {"name": "login"}, "cookies": {"a;b": "t"}},
            "credentials.cookies: names must be cookie names",
        ),
        (
            {"secretRef": {"name": "login"}, "headers": {"X-Token": "not/a key"}},
            "spec.credentials.headers.X-Token",
        ),
    ],
    ids=["neither", "no-secret", "header-name", "cookie-name", "secret-key"],
)
def test_the_api_server_rejects_credentials_that_cannot_be_sent(
    kubectl: Kubectl, namespace: str, credentials: dict[str, Any], message: str
) -> None:
    manifest = scrapejob("invalid", url="https://a.example.com/", credentials=credentials)
    manifest["metadata"]["namespace"] = namespace
    result = kubectl.create(manifest, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_credentials_cannot_change_on_a_live_scrapejob(kubectl: Kubectl, namespace: str) -> None:
    manifest = scrapejob("live", url="https://a.example.com/", credentials=CREDENTIALS)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    changed = kubectl.run(
        "patch",
        "scrapejob",
        "live",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"credentials": {"secretRef": {"name": "someone-elses"}}}}',
        check=False,
    )
    assert changed.returncode != 0
    assert "spec is immutable" in changed.stderr


PASSWORD = f"pw-{uuid.uuid4().hex}"
LOGIN_FORM = (
    b"<html><body><input id=user><input id=password type=password>"
    b"<button id=send>Sign in</button><p id=done></p><script>"
    b"document.getElementById('send').addEventListener('click', function () {"
    b"  fetch('/api/check', {headers: {'X-Typed': document.getElementById('password').value,"
    b"                                 'X-User': document.getElementById('user').value}})"
    b"    .then(function () { document.getElementById('done').textContent = 'sent'; });"
    b"});</script></body></html>"
)


def test_a_secret_value_typed_by_a_step_reaches_the_page_and_appears_nowhere_else(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    key = SealingKeys.generate()
    operator = operator_factory(empty_database_url, environment={"SCRAPEQ_SEALING_KEY": key})
    steps = [
        {"action": "type", "selector": "#user", "value": "ada"},
        {
            "action": "fill",
            "selector": "#password",
            "valueFrom": {"secretKeyRef": {"name": "form-login", "key": "password"}},
        },
        {"action": "click", "selector": "#send", "waitFor": "#done:not(:empty)"},
    ]
    with recording_site({"/login": LOGIN_FORM, "/api/check": b"{}"}) as shop:
        jobs = {
            "typed": scrapejob(
                "typed",
                url=f"{shop.url}/login",
                steps=steps,
                extract={"done": {"selector": "#done"}},
                retries={"limit": 0},
            )
        }
        (status,) = apply_before_their_secret(kubectl, namespace, jobs).values()
        assert f"Secret {namespace}/form-login does not exist" in status["message"]
        kubectl.run(
            "create",
            "secret",
            "generic",
            "form-login",
            "-n",
            namespace,
            f"--from-literal=password={PASSWORD}",
        )
        uid = kubectl.get("scrapejob", "typed", namespace)["metadata"]["uid"]
        eventually_blocking(
            lambda: owner_progress(empty_database_url, uid).total == 1,
            within=30,
            what="the row queued once the Secret exists",
        )
        worker = run_worker_burst(empty_database_url, key)
        wait_for_status(
            kubectl, namespace, "typed", lambda s: s.get("phase") == "Succeeded", what="Succeeded"
        )
    # The page got the value, typed into its field by the step...
    (checked,) = shop.headers_of("/api/check")
    assert (checked["x-typed"], checked["x-user"]) == (PASSWORD, "ada")
    # ...and nobody else can read it.
    places = places_a_reader_could_look(kubectl, namespace, operator, worker, empty_database_url)
    assert "form-login/password" in places["database rows"]
    assert '"sent"' in places["database rows"]
    for place, text in places.items():
        assert PASSWORD not in text, f"the secret value appears in the {place}"


def test_a_login_session_types_its_password_from_a_secret_once_and_serves_the_jobs_pages(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    key = SealingKeys.generate()
    operator = operator_factory(empty_database_url, environment={"SCRAPEQ_SEALING_KEY": key})
    with contextlib.ExitStack() as stack:
        shop = stack.enter_context(contextlib.contextmanager(running_step_site)())
        login = {
            "url": shop.url("/login"),
            "steps": [
                {"action": "fill", "selector": "input[name=user]", "value": LOGIN_USER},
                {
                    "action": "type",
                    "selector": "input[name=password]",
                    "valueFrom": {"secretKeyRef": {"name": "members", "key": "password"}},
                },
                {"action": "click", "selector": "button[type=submit]", "waitForNavigation": True},
            ],
            "successSelector": ".welcome",
        }
        jobs = {
            "members": scrapejob(
                "members",
                urls=[shop.url(f"/members/{n}") for n in range(1, 4)],
                session={"login": login},
                extract={"price": {"selector": ".member-price"}},
                retries={"limit": 0},
            )
        }
        apply_before_their_secret(kubectl, namespace, jobs)
        kubectl.run(
            "create",
            "secret",
            "generic",
            "members",
            "-n",
            namespace,
            f"--from-literal=password={LOGIN_PASSWORD}",
        )
        uid = kubectl.get("scrapejob", "members", namespace)["metadata"]["uid"]
        eventually_blocking(
            lambda: owner_progress(empty_database_url, uid).total == 3,
            within=30,
            what="the rows queued once the Secret exists",
        )
        # One page at a time: the job's one warm browser context serves all three pages.
        worker = run_worker_burst(empty_database_url, key, "--concurrency", "1")
        wait_for_status(
            kubectl, namespace, "members", lambda s: s.get("phase") == "Succeeded", what="Succeeded"
        )
        assert shop.logins == 1
        # Each page once, and /members/1 once more: where the login form lands.
        assert [shop.hits[f"/members/{n}"] for n in range(1, 4)] == [2, 1, 1]
    places = places_a_reader_could_look(kubectl, namespace, operator, worker, empty_database_url)
    for n in range(1, 4):
        assert f"${n}00.00 for members" in places["database rows"]
    for place, text in places.items():
        assert LOGIN_PASSWORD not in text, f"the password appears in the {place}"
