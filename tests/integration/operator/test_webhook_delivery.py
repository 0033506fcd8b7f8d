"""Webhook delivery against a real PostgreSQL outbox and a real HTTP receiver that verifies
every signature: an event is delivered once, a receiver answering 500 for a while gets it once
afterwards, an event outlives a restarted delivery loop, a forbidden endpoint gets nothing, and
an event that cannot be delivered is given up after its maximum age (docs/webhooks.md).

The Kubernetes API is stood in for (a Secret to read, Events to post): the same loop runs
against a real kube-apiserver in tests/e2e/operator/test_webhooks.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_operator.cluster import ObjectRef
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.webhook_delivery import WebhookDelivery
from scrapeq_queue.addresses import parse_networks

from tests.integration.operator.webhook_receiver import WebhookReceiver, webhook_receiver
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

Connection = psycopg.AsyncConnection[Any]
KEY = b"whsec-test-key"


@dataclass
class PostedEvent:
    target: ObjectRef
    type_: str
    reason: str
    message: str


@dataclass
class SecretsAndEvents:
    """What the delivery loop asks of the Kubernetes API: Secrets to read, Events to post."""

    secrets: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    events: list[PostedEvent] = field(default_factory=list)

    async def read_secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.secrets.get((namespace, name))

    async def announce(self, target: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        self.events.append(PostedEvent(target, type_, reason, message))

    def close(self) -> None:
        return None


def settings_for(database_url: str, **overrides: Any) -> OperatorSettings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "webhook_allow_networks": parse_networks("127.0.0.0/8"),
        "webhook_poll_seconds": 0.1,
        "webhook_timeout_seconds": 5.0,
        "webhook_retry_base_seconds": 0.2,
        "webhook_retry_max_seconds": 0.5,
    }
    values.update(overrides)
    return OperatorSettings(**values)


@dataclass
class Operator:
    runtime: OperatorRuntime
    delivery: WebhookDelivery


async def start(settings: OperatorSettings, cluster: SecretsAndEvents) -> Operator:
    runtime = OperatorRuntime(settings, cast(Any, cluster))
    await runtime.open()
    delivery = WebhookDelivery(settings, runtime)
    runtime.spawn("webhooks", delivery.run())
    return Operator(runtime, delivery)


@pytest.fixture
def cluster() -> SecretsAndEvents:
    return SecretsAndEvents(secrets={("team", "hook"): {"key": KEY}})


async def record(connection: Connection, url: str, uid: str = "uid-1") -> None:
    await queue.record_webhook_events(
        connection,
        owner_uid=uid,
        owner_namespace="team",
        owner_name="laptops",
        event_type="Succeeded",
        targets=[queue.WebhookTarget(url, "hook", "key")],
        data={"namespace": "team", "name": "laptops", "total": 2, "succeeded": 2},
    )


async def outbox_state(connection: Connection, uid: str = "uid-1") -> list[str]:
    return [event.status for event in await queue.webhook_events_of(connection, uid)]


def verified(receiver: WebhookReceiver) -> bool:
    return all(delivery.signature_valid for delivery in receiver.deliveries)


async def test_an_event_is_delivered_once_as_a_signed_cloudevent(
    async_connection: Connection, database_url: str, cluster: SecretsAndEvents
) -> None:
    async with webhook_receiver(KEY) as receiver:
        await record(async_connection, receiver.url)
        operator = await start(settings_for(database_url), cluster)
        try:
            await eventually(
                lambda: outbox_state(async_connection),
                until=lambda states: states == ["delivered"],
                within=20,
                what="the event delivered",
            )
            # Rounds go on; a delivered event is never sent again.
            assert await operator.delivery.deliver_round() == 0
        finally:
            await operator.runtime.close()

    assert len(receiver.deliveries) == 1
    (delivery,) = receiver.deliveries
    assert delivery.signature_valid
    assert delivery.content_type.startswith("application/cloudevents+json")
    assert delivery.event["specversion"] == "1.0"
    assert delivery.event["type"] == "io.scrapeq.scrapejob.succeeded"
    assert delivery.event["id"] == str(queue.webhook_event_id("uid-1", "Succeeded", receiver.url))
    assert delivery.event["data"]["succeeded"] == 2
    assert cluster.events == []


async def test_a_receiver_answering_500_for_a_while_gets_the_event_once_afterwards(
    async_connection: Connection, database_url: str, cluster: SecretsAndEvents
) -> None:
    async with webhook_receiver(KEY, answers=[500, 500, 503]) as receiver:
        await record(async_connection, receiver.url)
        operator = await start(settings_for(database_url), cluster)
        try:
            await eventually(
                lambda: outbox_state(async_connection),
                until=lambda states: states == ["delivered"],
                within=30,
                what="the event delivered after three failures",
            )
        finally:
            await operator.runtime.close()

    assert [delivery.answered for delivery in receiver.deliveries] == [500, 500, 503, 204]
    assert verified(receiver)
    assert len({delivery.event["id"] for delivery in receiver.deliveries}) == 1
    assert len(receiver.accepted) == 1


async def test_an_undelivered_event_survives_a_restarted_delivery_loop(
    async_connection: Connection, database_url: str, cluster: SecretsAndEvents
) -> None:
    async with webhook_receiver(KEY) as receiver:
        receiver.then = 500
        await record(async_connection, receiver.url)
        first = await start(settings_for(database_url), cluster)
        try:
            await eventually(
                lambda: len(receiver.deliveries),
                until=lambda count: count >= 2,
                within=20,
                what="two failed attempts before the restart",
            )
        finally:
            await first.runtime.close()
        assert await outbox_state(async_connection) == ["pending"]

        receiver.then = 200
        second = await start(settings_for(database_url), cluster)
        try:
            await eventually(
                lambda: outbox_state(async_connection),
                until=lambda states: states == ["delivered"],
                within=20,
                what="the event delivered by the restarted loop",
            )
        finally:
            await second.runtime.close()

    assert verified(receiver)
    assert len(receiver.accepted) == 1


async def test_two_delivery_loops_on_one_outbox_send_each_event_once(
    async_connection: Connection, database_url: str, cluster: SecretsAndEvents
) -> None:
    async with webhook_receiver(KEY) as receiver:
        for number in range(20):
            await record(async_connection, receiver.url, uid=f"uid-{number}")
        operators = [await start(settings_for(database_url), cluster) for _ in range(2)]
        try:
            await eventually(
                lambda: len(receiver.accepted),
                until=lambda count: count >= 20,
                within=30,
                what="twenty events delivered",
            )
            await asyncio.gather(*(o.delivery.deliver_round() for o in operators))
        finally:
            for operator in operators:
                await operator.runtime.close()

    assert verified(receiver)
    ids = [delivery.event["id"] for delivery in receiver.deliveries]
    assert len(ids) == 20
    assert len(set(ids)) == 20


@pytest.mark.parametrize(
    ("allowed", "url", "reason"),
    [
        ("", None, "loopback"),
        ("127.0.0.0/8", "http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("127.0.0.0/8", "http://10.96.0.1/hook", "private"),
    ],
    ids=["loopback receiver without the allow-list", "metadata address", "cluster network"],
)
async def test_an_endpoint_in_a_forbidden_network_is_refused_and_nothing_is_sent(
    async_connection: Connection,
    database_url: str,
    cluster: SecretsAndEvents,
    allowed: str,
    url: str | None,
    reason: str,
) -> None:
    async with webhook_receiver(KEY) as receiver:
        await record(async_connection, url or receiver.url)
        settings = settings_for(database_url, webhook_allow_networks=parse_networks(allowed))
        operator = await start(settings, cluster)
        try:
            await eventually(
                lambda: outbox_state(async_connection),
                until=lambda states: states == ["dead"],
                within=20,
                what="the event refused",
            )
        finally:
            await operator.runtime.close()

    assert receiver.deliveries == []
    (event,) = cluster.events
    assert (event.type_, event.reason) == ("Warning", "WebhookRefused")
    assert reason in event.message
    assert (event.target.kind, event.target.name, event.target.uid) == (
        "ScrapeJob",
        "laptops",
        "uid-1",
    )
    (state,) = await queue.webhook_events_of(async_connection, "uid-1")
    assert str(state.last_error).startswith("refused: ")


async def test_an_event_whose_secret_is_missing_is_retried_then_given_up_at_its_maximum_age(
    async_connection: Connection, database_url: str
) -> None:
    cluster = SecretsAndEvents()  # no Secret at all
    async with webhook_receiver(KEY) as receiver:
        await record(async_connection, receiver.url)
        operator = await start(settings_for(database_url, webhook_max_age_seconds=2.0), cluster)
        try:
            await eventually(
                lambda: outbox_state(async_connection),
                until=lambda states: states == ["dead"],
                within=20,
                what="the event given up",
            )
        finally:
            await operator.runtime.close()

    assert receiver.deliveries == []
    (state,) = await queue.webhook_events_of(async_connection, "uid-1")
    assert state.attempts >= 2
    assert state.last_error == "Secret team/hook not found"
    (event,) = cluster.events
    assert event.reason == "WebhookUndelivered"
    assert "Secret team/hook not found" in event.message
    assert "whsec" not in event.message
