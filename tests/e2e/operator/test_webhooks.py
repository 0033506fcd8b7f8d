"""spec.webhooks through the real operator: a ScrapeJob reaching Succeeded sends one CloudEvent
that a loopback receiver verifies with the Secret's key; an endpoint at the cloud metadata
address gets nothing and the ScrapeJob a Warning Event WebhookRefused; the API server refuses
endpoints and event names the CRD does not know (docs/webhooks.md).

Real kube-apiserver, PostgreSQL and operator process; the rows are completed through the queue
package as a worker would (no page is fetched). The receiver is on 127.0.0.1, which the operator
reaches only because the test allows 127.0.0.0/8 (SCRAPEQ_OPERATOR_WEBHOOK_ALLOW_NETWORKS).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import scrapeq_queue
from psycopg import sql
from scrapeq_operator.webhook_signing import SIGNATURE_HEADER, InvalidSignature, verify

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    run_queue_call,
    scrapejob,
    wait_for_status,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(180)]

SIGNING_KEY = "e2e-webhook-signing-key"
WEBHOOK_ENVIRONMENT = {
    "SCRAPEQ_OPERATOR_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8",
    "SCRAPEQ_OPERATOR_WEBHOOK_POLL_SECONDS": "0.5",
}


@dataclass
class Receiver:
    """Every request the receiver got: its CloudEvent and whether its signature verified."""

    url: str = ""
    received: list[tuple[dict[str, Any], bool]] = field(default_factory=list)
    # While set, every request is answered 500 (after its signature was checked).
    failing: threading.Event = field(default_factory=threading.Event)
    refused: int = 0
    # The id of each event answered 204, once per answer.
    accepted_ids: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        """Requests with a valid signature that were answered 204."""
        return sum(1 for _, valid in self.received if valid) - self.refused


@contextlib.contextmanager
def webhook_receiver(host: str = "127.0.0.1") -> Iterator[Receiver]:
    """An HTTP receiver on `host` that verifies each event's signature with SIGNING_KEY."""
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                verify(
                    SIGNING_KEY.encode(),
                    self.headers.get(SIGNATURE_HEADER, ""),
                    body,
                    now=time.time(),
                )
                valid = True
            except InvalidSignature:
                valid = False
            receiver.received.append((json.loads(body), valid))
            if valid and receiver.failing.is_set():
                receiver.refused += 1
                self.send_response(500)
            else:
                if valid:
                    receiver.accepted_ids.append(str(json.loads(body).get("id")))
                self.send_response(204 if valid else 401)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    receiver.url = f"http://{host}:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def create_signing_secret(kubectl: Kubectl, namespace: str) -> None:
    kubectl.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hook", "namespace": namespace},
            "stringData": {"signing-key": SIGNING_KEY},
        }
    )


def job_with_webhooks(namespace: str, *urls: str) -> dict[str, Any]:
    manifest = scrapejob(
        "laptops",
        urls=["https://shop.example.com/1", "https://shop.example.com/2"],
        render=False,
        webhooks=[
            {"url": url, "secretRef": {"name": "hook", "key": "signing-key"}} for url in urls
        ],
    )
    manifest["metadata"]["namespace"] = namespace
    return manifest


def warning_events(kubectl: Kubectl, namespace: str, reason: str) -> list[dict[str, Any]]:
    listed = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name=laptops,reason={reason}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def every_row_as_text(database_url: str) -> str:
    """Every row of every table in the queue's database, each as its text form."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
            "AND table_type = 'BASE TABLE'"
        ).fetchall()
        texts: list[str] = []
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            texts.extend(row[0] for row in connection.execute(query))
    return "\n".join(texts)


def finish_the_job(kubectl: Kubectl, namespace: str, database_url: str) -> str:
    """Complete the job's rows as a worker would; return its uid once it shows Succeeded."""
    wait_for_status(
        kubectl, namespace, "laptops", lambda s: s.get("total") == 2, what="rows queued"
    )
    assert len(work_rows(database_url)) == 2
    wait_for_status(
        kubectl,
        namespace,
        "laptops",
        lambda s: s.get("phase") == "Succeeded",
        what="phase Succeeded",
    )
    uid: str = kubectl.get("scrapejob", "laptops", namespace)["metadata"]["uid"]
    return uid


def test_a_scrapejob_reaching_succeeded_sends_one_verified_cloudevent(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator = operator_factory(empty_database_url, environment=WEBHOOK_ENVIRONMENT)
    create_signing_secret(kubectl, namespace)
    with webhook_receiver() as receiver:
        kubectl.apply(job_with_webhooks(namespace, receiver.url))
        uid = finish_the_job(kubectl, namespace, empty_database_url)

        eventually_blocking(
            lambda: run_queue_call(
                empty_database_url, lambda conn: scrapeq_queue.webhook_events_of(conn, uid)
            ),
            until=lambda events: [e.status for e in events] == ["delivered"],
            within=30,
            what=f"the event delivered\n{operator.log_tail()}",
        )

    assert len(receiver.received) == 1
    ((event, valid),) = receiver.received
    assert valid
    assert event["type"] == "io.scrapeq.scrapejob.succeeded"
    assert event["id"] == str(scrapeq_queue.webhook_event_id(uid, "Succeeded", receiver.url))
    assert event["source"] == f"/apis/scrapeq.io/namespaces/{namespace}/scrapejobs/laptops"
    assert event["data"]["total"] == 2
    assert event["data"]["succeeded"] == 2
    assert event["data"]["reason"] == "Succeeded"
    assert SIGNING_KEY not in operator.log_tail(200_000)
    status = json.dumps(kubectl.get("scrapejob", "laptops", namespace).get("status"))
    assert SIGNING_KEY not in status
    assert SIGNING_KEY not in every_row_as_text(empty_database_url)


def test_an_event_the_receiver_refused_survives_an_operator_restart_and_arrives_once(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    environment = {
        **WEBHOOK_ENVIRONMENT,
        "SCRAPEQ_OPERATOR_WEBHOOK_RETRY_BASE_SECONDS": "0.2",
        "SCRAPEQ_OPERATOR_WEBHOOK_RETRY_MAX_SECONDS": "0.5",
    }
    first = operator_factory(empty_database_url, environment=environment)
    create_signing_secret(kubectl, namespace)
    with webhook_receiver() as receiver:
        receiver.failing.set()
        kubectl.apply(job_with_webhooks(namespace, receiver.url))
        uid = finish_the_job(kubectl, namespace, empty_database_url)
        eventually_blocking(
            lambda: receiver.refused >= 2,
            within=30,
            what="two attempts answered 500 before the restart",
        )
        first.stop()

        receiver.failing.clear()
        operator_factory(empty_database_url, environment=environment)
        eventually_blocking(
            lambda: run_queue_call(
                empty_database_url, lambda conn: scrapeq_queue.webhook_events_of(conn, uid)
            ),
            until=lambda events: [e.status for e in events] == ["delivered"],
            within=30,
            what="the event delivered by the restarted operator",
        )

    assert all(valid for _, valid in receiver.received)
    assert receiver.accepted == 1
    assert len({event["id"] for event, _ in receiver.received}) == 1


def test_a_scrapejob_that_can_never_run_sends_its_failed_event_with_the_reason(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url, environment=WEBHOOK_ENVIRONMENT)
    create_signing_secret(kubectl, namespace)
    with webhook_receiver() as receiver:
        manifest = job_with_webhooks(namespace, receiver.url)
        manifest["spec"]["payload"] = {"noSuchOption": 1}
        kubectl.apply(manifest)
        wait_for_status(
            kubectl,
            namespace,
            "laptops",
            lambda s: s.get("phase") == "Failed",
            what="phase Failed (InvalidSpec)",
        )
        eventually_blocking(
            lambda: receiver.received, within=30, what="the Failed event at the receiver"
        )

    ((event, valid),) = receiver.received
    assert valid
    assert event["type"] == "io.scrapeq.scrapejob.failed"
    assert event["data"]["reason"] == "InvalidSpec"
    assert event["data"]["total"] == 0


def test_a_webhook_to_the_metadata_address_is_refused_and_reported_on_the_scrapejob(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url, environment=WEBHOOK_ENVIRONMENT)
    create_signing_secret(kubectl, namespace)
    kubectl.apply(job_with_webhooks(namespace, "http://169.254.169.254/latest/meta-data/"))
    uid = finish_the_job(kubectl, namespace, empty_database_url)

    (refused,) = eventually_blocking(
        lambda: warning_events(kubectl, namespace, "WebhookRefused"),
        within=30,
        what="the WebhookRefused Event",
    )
    assert refused["type"] == "Warning"
    assert "link-local (cloud metadata)" in refused["message"]
    (state,) = run_queue_call(
        empty_database_url, lambda conn: scrapeq_queue.webhook_events_of(conn, uid)
    )
    assert state.status == "dead"
    assert state.attempts == 1


@pytest.mark.parametrize(
    ("webhook", "message"),
    [
        ({"url": "ftp://hooks.example.com/", "secretRef": {"name": "s", "key": "k"}}, "http"),
        (
            {
                "url": "https://hooks.example.com/",
                "events": ["Started"],
                "secretRef": {"name": "s", "key": "k"},
            },
            "Unsupported value",
        ),
        ({"url": "https://hooks.example.com/", "secretRef": {"name": "s"}}, "key"),
    ],
    ids=["not http", "unknown event", "no Secret key"],
)
def test_the_api_server_refuses_a_webhook_it_cannot_send(
    kubectl: Kubectl, namespace: str, webhook: dict[str, Any], message: str
) -> None:
    manifest = scrapejob("invalid", url="https://a.example.com/", webhooks=[webhook])
    manifest["metadata"]["namespace"] = namespace

    result = kubectl.create(manifest, check=False)

    assert result.returncode != 0
    assert "spec.webhooks" in result.stderr
    assert message in result.stderr
