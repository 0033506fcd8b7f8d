"""Putting a ScrapeJob's webhook events in the outbox when it reaches a terminal phase.

Called wherever the operator decides a terminal phase, before that phase is written to the
status: by the status sync (Succeeded or Failed from the rows) and by the create handler (a job
that can never run ends Failed without rows). Recording again adds nothing
(scrapeq_queue.record_webhook_events), so a retried patch or a restart never doubles an event.
"""

from __future__ import annotations

from datetime import datetime

import scrapeq_queue
from scrapeq_queue import Connection, WebhookEventType

from scrapeq_operator import metrics
from scrapeq_operator.webhook_events import event_data
from scrapeq_operator.webhook_spec import JobWebhook, targets_for


def wants_events(webhooks: tuple[JobWebhook, ...], event_type: WebhookEventType) -> bool:
    """True when an endpoint of the job asked for `event_type` (else nothing to record)."""
    return bool(targets_for(webhooks, event_type))


async def record_phase_events(
    connection: Connection,
    *,
    uid: str,
    namespace: str,
    name: str,
    webhooks: tuple[JobWebhook, ...],
    event_type: WebhookEventType,
    reason: str,
    total: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    cancelled: int = 0,
    finished_at: datetime | None = None,
) -> int:
    """Record the event `event_type` of a ScrapeJob for every endpoint that asked for it;
    return how many events are new."""
    targets = targets_for(webhooks, event_type)
    if not targets:
        return 0
    data = event_data(
        namespace=namespace,
        name=name,
        uid=uid,
        phase=event_type,
        reason=reason,
        total=total,
        succeeded=succeeded,
        failed=failed,
        cancelled=cancelled,
        finished_at=finished_at,
    )
    recorded = await scrapeq_queue.record_webhook_events(
        connection,
        owner_uid=uid,
        owner_namespace=namespace,
        owner_name=name,
        event_type=event_type,
        targets=targets,
        data=data,
    )
    metrics.WEBHOOK_EVENTS_RECORDED_TOTAL.inc(recorded)
    return recorded
