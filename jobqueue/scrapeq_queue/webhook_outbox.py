"""The webhook outbox: events for ScrapeJobs' webhooks, kept until delivered or given up.

The operator records an event per (ScrapeJob, phase, endpoint) before it shows the phase in the
ScrapeJob's status, and its delivery loop claims due events, posts them and ends each attempt
(docs/webhooks.md). Recording is idempotent and each event has a stable id, so an operator that
restarts between the two steps records nothing twice and loses nothing. No signing key is ever
stored: an event names the Secret and key to read when it is sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

WebhookEventType = Literal["Succeeded", "Failed", "Batch"]
# The phases a ScrapeJob reports; a webhook without `events` hears of these.
WEBHOOK_EVENT_TYPES: Final[tuple[WebhookEventType, ...]] = ("Succeeded", "Failed")
# The event of each uploaded output batch, for the webhooks that ask for it.
WEBHOOK_BATCH_EVENT: Final[WebhookEventType] = "Batch"

# The namespace of the events' ids (uuid5): one ScrapeJob, phase and endpoint always get the
# same id, so a receiver can deduplicate on it whatever happened to the outbox row.
_EVENT_ID_NAMESPACE: Final = uuid.UUID("6d1b2f38-2b7a-5a49-9a0e-5c1f7e0c3a11")


@dataclass(frozen=True)
class WebhookTarget:
    """One endpoint of a ScrapeJob: where to post, and the Secret key that signs."""

    url: str
    secret_name: str
    secret_key: str


@dataclass(frozen=True)
class WebhookEvent:
    """A claimed event: what to send where, and which attempt this is."""

    id: int
    event_id: uuid.UUID
    owner_uid: str
    owner_namespace: str
    owner_name: str
    event_type: WebhookEventType
    url: str
    secret_name: str
    secret_key: str
    data: Mapping[str, Any]
    attempt: int
    created_at: datetime
    claimed_at: datetime


@dataclass(frozen=True)
class WebhookEventState:
    """An event as the outbox holds it (for inspection)."""

    event_id: uuid.UUID
    event_type: WebhookEventType
    url: str
    status: Literal["pending", "delivered", "dead"]
    attempts: int
    last_error: str | None


def webhook_event_id(
    owner_uid: str, event_type: WebhookEventType, url: str, batch: int | None = None
) -> uuid.UUID:
    """The stable idempotency id of the event `event_type` of ScrapeJob `owner_uid` for `url`
    (of its output batch `batch`, for a Batch event)."""
    name = f"{owner_uid}\n{event_type}\n{url}"
    if batch is not None:
        name += f"\n{batch}"
    return uuid.uuid5(_EVENT_ID_NAMESPACE, name)


@translate_database_errors
async def record_webhook_events(
    connection: psycopg.AsyncConnection[Any],
    *,
    owner_uid: str,
    owner_namespace: str,
    owner_name: str,
    event_type: WebhookEventType,
    targets: Sequence[WebhookTarget],
    data: Mapping[str, Any],
) -> int:
    """Record the event `event_type` of a ScrapeJob for each of `targets`, in one statement;
    an event already recorded stays as it is. Return how many are new."""
    if event_type not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    if not targets:
        return 0
    cursor = await connection.execute(
        statements.WEBHOOK_EVENTS_RECORD,
        {
            "owner_uid": owner_uid,
            "owner_namespace": owner_namespace,
            "owner_name": owner_name,
            "event_type": event_type,
            "data": json.dumps(dict(data)),
            "event_ids": [webhook_event_id(owner_uid, event_type, t.url) for t in targets],
            "urls": [target.url for target in targets],
            "secret_names": [target.secret_name for target in targets],
            "secret_keys": [target.secret_key for target in targets],
        },
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def record_batch_events(
    connection: psycopg.AsyncConnection[Any],
    *,
    owner_uid: str,
    owner_namespace: str,
    owner_name: str,
    sequence: int,
    targets: Sequence[WebhookTarget],
    data: Mapping[str, Any],
) -> int:
    """Record the Batch event of output batch `sequence` of a ScrapeJob for each of `targets`
    (in the transaction that marks the batch uploaded); an event already recorded stays as it
    is. Return how many are new."""
    if not targets:
        return 0
    cursor = await connection.execute(
        statements.WEBHOOK_BATCH_EVENTS_RECORD,
        {
            "owner_uid": owner_uid,
            "owner_namespace": owner_namespace,
            "owner_name": owner_name,
            "sequence": sequence,
            "data": json.dumps(dict(data)),
            "event_ids": [
                webhook_event_id(owner_uid, WEBHOOK_BATCH_EVENT, t.url, batch=sequence)
                for t in targets
            ],
            "urls": [target.url for target in targets],
            "secret_names": [target.secret_name for target in targets],
            "secret_keys": [target.secret_key for target in targets],
        },
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def claim_webhook_events(
    connection: psycopg.AsyncConnection[Any], *, limit: int, lease_seconds: float
) -> list[WebhookEvent]:
    """Claim up to `limit` due events, each leased for `lease_seconds` (no other claim gets
    it meanwhile), and count the attempt; commit at once (autocommit), send afterwards."""
    cursor = await connection.execute(
        statements.WEBHOOK_EVENTS_CLAIM, {"limit": limit, "lease_seconds": lease_seconds}
    )
    return [
        WebhookEvent(
            id=int(row[0]),
            event_id=row[1],
            owner_uid=row[2],
            owner_namespace=row[3],
            owner_name=row[4],
            event_type=row[5],
            url=row[6],
            secret_name=row[7],
            secret_key=row[8],
            data=row[9],
            attempt=int(row[10]),
            created_at=row[11],
            claimed_at=row[12],
        )
        for row in await cursor.fetchall()
    ]


async def _finish_attempt(
    connection: psycopg.AsyncConnection[Any],
    event: WebhookEvent,
    *,
    status: Literal["pending", "delivered", "dead"],
    delay_seconds: float,
    error: str | None,
) -> bool:
    cursor = await connection.execute(
        statements.WEBHOOK_EVENT_FINISH_ATTEMPT,
        {
            "id": event.id,
            "attempt": event.attempt,
            "status": status,
            "delay_seconds": delay_seconds,
            "error": error,
        },
    )
    return await cursor.fetchone() is not None


@translate_database_errors
async def mark_webhook_delivered(
    connection: psycopg.AsyncConnection[Any], event: WebhookEvent
) -> bool:
    """The endpoint accepted this attempt; False when the attempt was no longer current."""
    return await _finish_attempt(
        connection, event, status="delivered", delay_seconds=0.0, error=None
    )


@translate_database_errors
async def retry_webhook_event(
    connection: psycopg.AsyncConnection[Any],
    event: WebhookEvent,
    *,
    delay_seconds: float,
    error: str,
) -> bool:
    """This attempt failed: the event is due again after `delay_seconds`; False when the
    attempt was no longer current."""
    return await _finish_attempt(
        connection, event, status="pending", delay_seconds=delay_seconds, error=error
    )


@translate_database_errors
async def mark_webhook_dead(
    connection: psycopg.AsyncConnection[Any], event: WebhookEvent, *, error: str
) -> bool:
    """The event is given up (refused endpoint, or too old); False when the attempt was no
    longer current."""
    return await _finish_attempt(connection, event, status="dead", delay_seconds=0.0, error=error)


@translate_database_errors
async def webhook_events_of(
    connection: psycopg.AsyncConnection[Any], owner_uid: str
) -> list[WebhookEventState]:
    """Every outbox event of one ScrapeJob, oldest first."""
    cursor = await connection.execute(statements.WEBHOOK_EVENTS_OF_OWNER, {"owner_uid": owner_uid})
    return [
        WebhookEventState(row[0], row[1], row[2], row[3], int(row[4]), row[5])
        for row in await cursor.fetchall()
    ]
