"""What a webhook sends: the CloudEvents 1.0 JSON document of an outbox event, and when a
failed one is tried again (docs/webhooks.md, "The event").

Structured mode: the whole event is the JSON body (`application/cloudevents+json`), so a
receiver needs no CloudEvents SDK. `data` carries the ScrapeJob's namespace, name, uid, phase
and row counts, never a Secret, header or result.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from scrapeq_queue import WebhookEvent, WebhookEventType

from scrapeq_operator.vocabulary import GROUP

CONTENT_TYPE: Final = "application/cloudevents+json; charset=utf-8"
EVENT_TYPES: Final[dict[WebhookEventType, str]] = {
    "Succeeded": "io.scrapeq.scrapejob.succeeded",
    "Failed": "io.scrapeq.scrapejob.failed",
    "Batch": "io.scrapeq.scrapejob.batch",
}


def event_source(namespace: str, name: str) -> str:
    """The CloudEvents source of a ScrapeJob: its API path, a URI-reference."""
    return f"/apis/{GROUP}/namespaces/{namespace}/scrapejobs/{name}"


def cloud_event(event: WebhookEvent) -> dict[str, Any]:
    """The CloudEvents 1.0 document of `event`; `id` is its idempotency id."""
    return {
        "specversion": "1.0",
        "id": str(event.event_id),
        "source": event_source(event.owner_namespace, event.owner_name),
        "type": EVENT_TYPES[event.event_type],
        "subject": event.owner_uid,
        "time": event.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "data": dict(event.data),
    }


def event_body(event: WebhookEvent) -> bytes:
    """The exact bytes posted (and signed) for `event`."""
    return json.dumps(cloud_event(event), separators=(",", ":"), sort_keys=True).encode()


def event_data(
    *,
    namespace: str,
    name: str,
    uid: str,
    phase: WebhookEventType,
    reason: str,
    total: int,
    succeeded: int,
    failed: int,
    cancelled: int,
    finished_at: datetime | None,
) -> dict[str, Any]:
    """The `data` of an event, as recorded in the outbox when the ScrapeJob reached `phase`."""
    return {
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "phase": phase,
        "reason": reason,
        "total": total,
        "succeeded": succeeded,
        "failed": failed,
        "cancelled": cancelled,
        "finishedAt": (
            finished_at.astimezone(UTC).isoformat().replace("+00:00", "Z") if finished_at else None
        ),
    }


def batch_event_data(
    *,
    namespace: str,
    name: str,
    uid: str,
    bucket: str,
    sequence: int,
    key: str,
    rows: int,
    size: int,
    sha256: str,
    counts: Mapping[str, int],
) -> dict[str, Any]:
    """The `data` of a Batch event: the ScrapeJob, and the batch object now in the bucket
    (its rows by state: completed, failed, cancelled)."""
    return {
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "batch": {
            "sequence": sequence,
            "bucket": bucket,
            "key": key,
            "rows": rows,
            "bytes": size,
            "sha256": sha256,
            "counts": dict(counts),
        },
    }


def retry_delay(
    attempt: int,
    *,
    base_seconds: float,
    max_seconds: float,
    jitter: Callable[[], float] = random.random,
) -> float:
    """The delay after failed attempt number `attempt` (1 for the first): base * 2^(attempt-1),
    at most `max_seconds`, then a random half of it taken off (between 50 % and 100 % of it),
    so events that failed together do not come back together."""
    exponent = min(max(attempt - 1, 0), 32)
    ceiling = min(max_seconds, base_seconds * 2.0**exponent)
    return ceiling * (0.5 + 0.5 * jitter())
