"""The webhook outbox on a real PostgreSQL: recording an event again adds nothing and keeps its
id, a claimed event is leased so a second claimer skips it, a stale attempt cannot overwrite a
newer one, and an event is due again after its back-off (docs/webhooks.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

TARGETS = [
    queue.WebhookTarget("https://hooks.example.com/a", "hook-secret", "key"),
    queue.WebhookTarget("https://hooks.example.com/b", "hook-secret", "key"),
]


async def record(connection: Connection, uid: str = "uid-1") -> int:
    return await queue.record_webhook_events(
        connection,
        owner_uid=uid,
        owner_namespace="team",
        owner_name="laptops",
        event_type="Succeeded",
        targets=TARGETS,
        data={"namespace": "team", "name": "laptops", "total": 3},
    )


async def test_recording_an_event_again_adds_nothing_and_keeps_its_stable_id(
    async_connection: Connection,
) -> None:
    assert await record(async_connection) == 2
    assert await record(async_connection) == 0

    events = await queue.webhook_events_of(async_connection, "uid-1")
    assert [event.url for event in events] == [target.url for target in TARGETS]
    assert [event.event_id for event in events] == [
        queue.webhook_event_id("uid-1", "Succeeded", target.url) for target in TARGETS
    ]
    assert {event.status for event in events} == {"pending"}


async def test_the_outbox_never_holds_a_signing_key_only_where_to_read_it(
    async_connection: Connection,
) -> None:
    await record(async_connection)
    cursor = await async_connection.execute(
        "SELECT secret_name, secret_key, data::text FROM scrapeq_webhook_events"
    )
    for secret_name, secret_key, data in await cursor.fetchall():
        assert (secret_name, secret_key) == ("hook-secret", "key")
        assert "hook-secret" not in data


async def test_a_claimed_event_is_leased_and_two_claimers_never_get_the_same_one(
    async_connection: Connection, database_url: str
) -> None:
    await record(async_connection)
    other = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        first, second = await asyncio.gather(
            queue.claim_webhook_events(async_connection, limit=1, lease_seconds=60),
            queue.claim_webhook_events(other, limit=1, lease_seconds=60),
        )
        third = await queue.claim_webhook_events(other, limit=10, lease_seconds=60)
    finally:
        await other.close()

    claimed = [event.event_id for event in first + second + third]
    assert len(claimed) == 2
    assert len(set(claimed)) == 2
    assert all(event.attempt == 1 for event in first + second + third)


async def test_a_stale_attempt_cannot_finish_an_event_claimed_again(
    async_connection: Connection,
) -> None:
    await record(async_connection)
    stale = await queue.claim_webhook_events(async_connection, limit=1, lease_seconds=0)
    fresh = [
        event
        for event in await queue.claim_webhook_events(async_connection, limit=2, lease_seconds=60)
        if event.event_id == stale[0].event_id
    ]
    assert fresh[0].attempt == 2

    assert not await queue.mark_webhook_delivered(async_connection, stale[0])
    assert await queue.mark_webhook_delivered(async_connection, fresh[0])
    states = {e.event_id: e for e in await queue.webhook_events_of(async_connection, "uid-1")}
    assert states[fresh[0].event_id].status == "delivered"
    assert not await queue.retry_webhook_event(
        async_connection, fresh[0], delay_seconds=0, error="late"
    )


async def test_a_failed_attempt_is_due_again_only_after_its_delay_and_a_dead_event_never(
    async_connection: Connection,
) -> None:
    await record(async_connection)
    claimed = await queue.claim_webhook_events(async_connection, limit=2, lease_seconds=60)
    assert await queue.retry_webhook_event(
        async_connection, claimed[0], delay_seconds=0, error="HTTP 500"
    )
    assert await queue.retry_webhook_event(
        async_connection, claimed[1], delay_seconds=3600, error="HTTP 503"
    )

    again = await queue.claim_webhook_events(async_connection, limit=10, lease_seconds=60)
    assert [event.event_id for event in again] == [claimed[0].event_id]
    assert await queue.mark_webhook_dead(async_connection, again[0], error="too old")
    assert await queue.claim_webhook_events(async_connection, limit=10, lease_seconds=60) == []

    states = {e.event_id: e for e in await queue.webhook_events_of(async_connection, "uid-1")}
    assert states[claimed[0].event_id].status == "dead"
    assert states[claimed[0].event_id].last_error == "too old"
    assert states[claimed[1].event_id].last_error == "HTTP 503"
