"""Writes the QueuePolicies' caps on rows in flight per namespace into PostgreSQL, where the
claim reads them (docs/operator.md, "Queue access"; docs/queue.md, "Namespace caps").

One operator-wide loop: every `queue_policy_sync_seconds` it lists the QueuePolicies and makes
their caps the queue's (one statement; unchanged caps are not rewritten). A round that cannot
read the policies or reach the database changes nothing: the caps in force stay until the next
round that can. No QueuePolicy, or the resource not installed, means no cap.
"""

from __future__ import annotations

import asyncio
import logging

from kubernetes.client.rest import ApiException
from scrapeq_queue import DatabaseUnavailable, set_namespace_limits

from scrapeq_operator import metrics
from scrapeq_operator.queue_access import namespace_caps, read_policy
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings

logger = logging.getLogger(__name__)


class NamespaceCapSync:
    """The loop that keeps the queue's namespace caps those of the QueuePolicies."""

    def __init__(self, settings: OperatorSettings, runtime: OperatorRuntime) -> None:
        self.settings = settings
        self.runtime = runtime
        self._written: dict[str, int] | None = None

    async def run(self) -> None:
        """Sync now and then every interval until cancelled; a failed round is logged and
        counted, and the next one comes after the usual interval."""
        while True:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except (ApiException, DatabaseUnavailable) as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("namespace_caps").inc()
                logger.warning("namespace caps: not synced this round: %s", error)
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("namespace_caps").inc()
                logger.exception("namespace caps: sync failed")
            await asyncio.sleep(self.settings.queue_policy_sync_seconds)

    async def sync_once(self) -> dict[str, int]:
        """Read the QueuePolicies and write their caps; return the caps now in force."""
        listed = await self.runtime.cluster.list_queue_policies()
        caps = namespace_caps([read_policy(item) for item in listed or []])
        if caps != self._written:
            async with self.runtime.connection() as connection:
                await set_namespace_limits(connection, caps)
            logger.info(
                "namespace caps: %s",
                ", ".join(f"{name} {cap}" for name, cap in sorted(caps.items())) or "none",
            )
            self._written = caps
        return caps
