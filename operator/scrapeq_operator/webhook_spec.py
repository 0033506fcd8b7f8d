"""spec.webhooks: which endpoints hear of which phases of a ScrapeJob, and of each batch of its
output (docs/webhooks.md).

Pure functions over the spec; the API server already enforced the schema (http/https URLs,
known event names, at most MAX_WEBHOOKS), so this only shapes it and fills the defaults a spec
written before the CRD defaulted them may lack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from scrapeq_queue import (
    WEBHOOK_BATCH_EVENT,
    WEBHOOK_EVENT_TYPES,
    WebhookEventType,
    WebhookTarget,
)

# The CRD's maxItems: a webhook is one POST per phase, not a fan-out service.
MAX_WEBHOOKS: Final = 5


@dataclass(frozen=True)
class JobWebhook:
    """One entry of spec.webhooks."""

    url: str
    events: frozenset[WebhookEventType]
    secret_name: str
    secret_key: str

    @property
    def target(self) -> WebhookTarget:
        return WebhookTarget(self.url, self.secret_name, self.secret_key)


def job_webhooks(spec: Mapping[str, Any]) -> tuple[JobWebhook, ...]:
    """The ScrapeJob's webhooks (empty without spec.webhooks); entries the schema would have
    refused (no URL, no Secret key) are left out rather than failing the whole job."""
    webhooks: list[JobWebhook] = []
    for entry in list(spec.get("webhooks") or [])[:MAX_WEBHOOKS]:
        if not isinstance(entry, Mapping):
            continue
        secret = entry.get("secretRef") or {}
        url, name, key = entry.get("url"), secret.get("name"), secret.get("key")
        if not (isinstance(url, str) and url and isinstance(name, str) and name):
            continue
        if not (isinstance(key, str) and key):
            continue
        # Without `events`, the phases; Batch only when asked for.
        wanted = entry.get("events") or WEBHOOK_EVENT_TYPES
        events = frozenset(
            event for event in (*WEBHOOK_EVENT_TYPES, WEBHOOK_BATCH_EVENT) if event in wanted
        )
        webhooks.append(JobWebhook(url, events, name, key))
    return tuple(webhooks)


def targets_for(webhooks: tuple[JobWebhook, ...], event: WebhookEventType) -> list[WebhookTarget]:
    """The endpoints that asked for `event`, each once."""
    targets: dict[str, WebhookTarget] = {}
    for webhook in webhooks:
        if event in webhook.events:
            targets.setdefault(webhook.url, webhook.target)
    return list(targets.values())
