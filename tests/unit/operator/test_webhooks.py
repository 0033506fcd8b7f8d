"""Webhook events without a network: the signature a receiver checks, the back-off between
tries, the CloudEvents document, what spec.webhooks means, and the address guard's refusals
(docs/webhooks.md)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from scrapeq_operator.webhook_events import batch_event_data, cloud_event, event_body, retry_delay
from scrapeq_operator.webhook_guard import WebhookGuard, WebhookRefused
from scrapeq_operator.webhook_signing import (
    InvalidSignature,
    signature_header,
    verify,
)
from scrapeq_operator.webhook_spec import job_webhooks, targets_for
from scrapeq_queue import WebhookEvent
from scrapeq_queue.addresses import parse_networks

pytestmark = pytest.mark.timeout(10)

KEY = b"a signing key from a Secret"
BODY = b'{"specversion":"1.0"}'


def test_a_signed_body_verifies_with_the_same_key_and_returns_its_timestamp() -> None:
    header = signature_header(KEY, 1_700_000_000, BODY)

    assert header.startswith("t=1700000000,v1=")
    assert verify(KEY, header, BODY, now=1_700_000_010) == 1_700_000_000


@pytest.mark.parametrize(
    ("key", "body"),
    [(b"another key", BODY), (KEY, BODY + b" "), (KEY, b'{"specversion":"1.1"}')],
    ids=["wrong key", "body with a byte added", "body changed"],
)
def test_a_signature_fails_for_another_key_or_a_changed_body(key: bytes, body: bytes) -> None:
    header = signature_header(KEY, 1_700_000_000, BODY)

    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify(key, header, body, now=1_700_000_000)


def test_a_replayed_request_outside_the_tolerance_is_refused() -> None:
    header = signature_header(KEY, 1_700_000_000, BODY)

    with pytest.raises(InvalidSignature, match="outside the tolerance"):
        verify(KEY, header, BODY, now=1_700_000_000 + 301)


@pytest.mark.parametrize("header", ["", "t=1700000000", "v1=abc", "t=soon,v1=abc"])
def test_a_header_without_a_timestamp_and_a_signature_is_refused(header: str) -> None:
    with pytest.raises(InvalidSignature, match="needs t="):
        verify(KEY, header, BODY, now=1_700_000_000)


def test_the_timestamp_is_signed_so_it_cannot_be_moved_forward() -> None:
    signed = signature_header(KEY, 1_700_000_000, BODY)
    moved = signed.replace("t=1700000000", "t=1700000900")

    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify(KEY, moved, BODY, now=1_700_000_900)


def test_the_retry_delay_doubles_up_to_its_maximum_and_jitter_takes_at_most_half() -> None:
    def no_jitter() -> float:
        return 1.0

    def full_jitter() -> float:
        return 0.0

    ceilings = [
        retry_delay(attempt, base_seconds=5, max_seconds=300, jitter=no_jitter)
        for attempt in range(1, 10)
    ]
    assert ceilings == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert retry_delay(3, base_seconds=5, max_seconds=300, jitter=full_jitter) == 10
    assert retry_delay(10_000, base_seconds=5, max_seconds=300, jitter=no_jitter) == 300


def test_real_jitter_spreads_delays_within_half_and_all_of_the_ceiling() -> None:
    delays = {retry_delay(4, base_seconds=5, max_seconds=300) for _ in range(200)}

    assert all(20 <= delay <= 40 for delay in delays)
    assert len(delays) > 100


def outbox_event() -> WebhookEvent:
    moment = datetime(2026, 12, 3, 20, 0, 0, tzinfo=UTC)
    return WebhookEvent(
        id=1,
        event_id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        owner_uid="uid-1",
        owner_namespace="team",
        owner_name="laptops",
        event_type="Succeeded",
        url="https://hooks.example.com/scrapeq",
        secret_name="hook",
        secret_key="key",
        data={"namespace": "team", "name": "laptops", "total": 3, "succeeded": 3},
        attempt=1,
        created_at=moment,
        claimed_at=moment,
    )


def test_the_event_is_a_cloudevents_1_0_document_whose_id_is_the_idempotency_id() -> None:
    document = cloud_event(outbox_event())

    assert document == {
        "specversion": "1.0",
        "id": "12345678-1234-5678-1234-567812345678",
        "source": "/apis/scrapeq.io/namespaces/team/scrapejobs/laptops",
        "type": "io.scrapeq.scrapejob.succeeded",
        "subject": "uid-1",
        "time": "2026-12-03T20:00:00Z",
        "datacontenttype": "application/json",
        "data": {"namespace": "team", "name": "laptops", "total": 3, "succeeded": 3},
    }
    assert json.loads(event_body(outbox_event())) == document


def test_the_body_never_names_the_secret_that_signs_it() -> None:
    body = event_body(outbox_event())

    assert b"hook" not in body.replace(b"hooks.example.com", b"")
    assert b"secret" not in body.lower()


def test_a_batch_event_is_typed_batch_and_carries_the_batch_object() -> None:
    data = batch_event_data(
        namespace="team",
        name="laptops",
        uid="uid-1",
        bucket="crawls",
        sequence=3,
        key="p/batch-000003.jsonl",
        rows=10,
        size=2048,
        sha256="ab" * 32,
        counts={"completed": 9, "failed": 1},
    )
    document = cloud_event(replace(outbox_event(), event_type="Batch", data=data))

    assert document["type"] == "io.scrapeq.scrapejob.batch"
    assert document["data"]["batch"] == {
        "sequence": 3,
        "bucket": "crawls",
        "key": "p/batch-000003.jsonl",
        "rows": 10,
        "bytes": 2048,
        "sha256": "ab" * 32,
        "counts": {"completed": 9, "failed": 1},
    }


def test_batch_events_go_only_to_endpoints_that_ask_for_them() -> None:
    spec = {
        "webhooks": [
            {"url": "https://a.example/h", "secretRef": {"name": "s", "key": "k"}},
            {
                "url": "https://b.example/h",
                "events": ["Batch", "Succeeded"],
                "secretRef": {"name": "s", "key": "k"},
            },
        ]
    }

    webhooks = job_webhooks(spec)

    assert [sorted(webhook.events) for webhook in webhooks] == [
        ["Failed", "Succeeded"],
        ["Batch", "Succeeded"],
    ]
    assert [t.url for t in targets_for(webhooks, "Batch")] == ["https://b.example/h"]


def test_webhooks_default_to_both_phases_and_an_endpoint_hears_each_phase_once() -> None:
    spec = {
        "webhooks": [
            {"url": "https://a.example/h", "secretRef": {"name": "s", "key": "k"}},
            {
                "url": "https://b.example/h",
                "events": ["Failed"],
                "secretRef": {"name": "s", "key": "k"},
            },
            {"url": "https://a.example/h", "secretRef": {"name": "t", "key": "k"}},
        ]
    }

    webhooks = job_webhooks(spec)

    assert [sorted(webhook.events) for webhook in webhooks] == [
        ["Failed", "Succeeded"],
        ["Failed"],
        ["Failed", "Succeeded"],
    ]
    assert [t.url for t in targets_for(webhooks, "Succeeded")] == ["https://a.example/h"]
    assert [t.url for t in targets_for(webhooks, "Failed")] == [
        "https://a.example/h",
        "https://b.example/h",
    ]
    assert job_webhooks({}) == ()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local (cloud metadata)"),
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("https://10.0.0.1/hook", "private"),
        ("https://100.64.0.10/hook", "carrier-grade NAT"),
        ("http://[::ffff:192.168.1.1]/hook", "private"),
        ("http://localhost:9/hook", "loopback"),
    ],
)
async def test_an_endpoint_resolving_into_a_forbidden_network_is_refused_with_its_reason(
    url: str, reason: str
) -> None:
    with pytest.raises(WebhookRefused, match=re.escape(f"a {reason} address")):
        await WebhookGuard().check(url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://hooks.example.com/", "scheme 'ftp' is not allowed"),
        ("https://user:pass@hooks.example.com/", "user information"),
        ("https:///path", "no host name"),
    ],
)
async def test_an_endpoint_that_is_not_plain_http_or_https_is_refused(
    url: str, reason: str
) -> None:
    with pytest.raises(WebhookRefused, match=reason):
        await WebhookGuard().check(url)


async def test_an_allowed_network_lets_a_local_receiver_through_and_nothing_else() -> None:
    guard = WebhookGuard(parse_networks("127.0.0.0/8"))

    endpoint = await guard.check("http://127.0.0.1:8080/hook")

    assert [str(address) for address in endpoint.addresses] == ["127.0.0.1"]
    assert endpoint.port == 8080
    with pytest.raises(WebhookRefused, match="cloud metadata"):
        await guard.check("http://169.254.169.254/")
