"""The loop that keeps PostgreSQL's site policies to the cluster's SitePolicies.

The operator writes a SitePolicy into the queue on each of its watch events (handlers.py,
`sync_site_policy`), and every policy comes again when it starts; but a policy deleted while no
operator was watching sends no event to anyone. So at start and every `RESYNC_SECONDS` the
operator lists the cluster's SitePolicies and removes from PostgreSQL the ones not listed (and
not written since the listing began: a policy created meanwhile stays).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

import scrapeq_queue
from kubernetes.client.rest import ApiException
from scrapeq_queue import DatabaseUnavailable

from scrapeq_operator import metrics

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)

# How often the cluster's SitePolicies are listed again (a deletion missed while no operator
# ran is undone this long after one starts, at the latest; at start, at once).
RESYNC_SECONDS: Final = 300.0


class SitePolicyResync:
    """`run` is the loop; `resync_once` one pass."""

    def __init__(self, runtime: OperatorRuntime, *, interval: float = RESYNC_SECONDS) -> None:
        self.runtime = runtime
        self.interval = interval

    async def run(self) -> None:
        while True:
            try:
                await self.resync_once()
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("site_policy").inc()
                logger.warning("site policies: database unavailable, resyncing later: %s", error)
            except ApiException as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("site_policy").inc()
                logger.warning(
                    "site policies: cannot list SitePolicies (%s %s), resyncing later",
                    error.status,
                    error.reason,
                )
            await asyncio.sleep(self.interval)

    async def resync_once(self) -> list[str]:
        """Remove the policies the cluster no longer has; answer their names."""
        async with self.runtime.connection() as connection:
            listed_at = await scrapeq_queue.database_now(connection)
            names = await self.runtime.cluster.list_site_policy_names()
            removed = await scrapeq_queue.retain_site_policies(
                connection, names, listed_at=listed_at
            )
        if removed:
            logger.info("site policies removed, no longer in the cluster: %s", ", ".join(removed))
        return removed
