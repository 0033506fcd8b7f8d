"""Retention: the one operator-wide loop that prunes finished rows from the queue table.

Every finished row stays in `scraping_jobs` until something deletes it, and a busy cluster
finishes hundreds of thousands a day; the claim index ignores them, but the table, its other
indexes and vacuum do not. So the operator runs `scrapeq_queue.prune_finished` every
`prune_interval_seconds`, under the rules of docs/queue.md's "Retention": a row a sink still
waits for stays; a row with its own retention (a ScrapeJob's spec.retention, or a SQL
producer's `retain_for`) goes that long after it finished; other rows of ScrapeJobs follow the
settings here (completed and cancelled rows go `retain_completed_days` after they finished;
failed rows are a dead-letter queue keeping the newest `retain_failed_last` per queue, 0 keeping
every one); other rows of SQL producers stay. Deleting rows of finished ScrapeJobs does not
change their status: the status sync never looks at a finished job again. The same pass deletes
the politeness state of sites idle for `retain_idle_sites_days`
(`scrapeq_queue.prune_idle_sites`; 0 keeps them), and the crawl memory of URLs no run fetched
for `retain_crawl_memory_days` (`scrapeq_queue.prune_crawl_memory`; 0 keeps it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import scrapeq_queue
from scrapeq_queue import DatabaseUnavailable

from scrapeq_operator import metrics
from scrapeq_operator.settings import OperatorSettings

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)


class Retention:
    """Prune finished rows and idle hosts periodically; `run` is the loop, `prune_once` one
    pass."""

    def __init__(self, settings: OperatorSettings, runtime: OperatorRuntime) -> None:
        self.settings = settings
        self.runtime = runtime

    async def run(self) -> None:
        """Prune now and then every interval until cancelled; return at once when turned off.

        A failed pass (database down) is logged and counted, and the next one comes after the
        usual interval: retention is never urgent.
        """
        interval = self.settings.prune_interval_seconds
        if interval <= 0:
            logger.info("retention: off (prune interval 0); finished rows are kept")
            return
        while True:
            try:
                await self.prune_once()
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("retention").inc()
                logger.warning("retention: database unavailable, pruning later: %s", error)
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("retention").inc()
                logger.exception("retention: prune failed")
            await asyncio.sleep(interval)

    async def prune_once(self) -> int:
        """Delete the finished rows past retention, then the state of idle hosts; return how
        many rows went.

        Holds one pooled connection for the whole pass; each delete batch is its own short
        transaction, so claims and completions are never blocked for long.
        """
        keep_last = self.settings.retain_failed_last
        idle_days = self.settings.retain_idle_sites_days
        started = time.monotonic()
        async with self.runtime.connection() as connection:
            deleted = await scrapeq_queue.prune_finished(
                connection,
                completed_older_than=timedelta(days=self.settings.retain_completed_days),
                keep_failed_last=keep_last if keep_last > 0 else None,
            )
            metrics.RETENTION_PRUNED_JOBS_TOTAL.inc(deleted)
            hosts = 0
            if idle_days > 0:
                hosts = await scrapeq_queue.prune_idle_sites(
                    connection, idle_longer_than=timedelta(days=idle_days)
                )
                metrics.RETENTION_PRUNED_SITES_TOTAL.inc(hosts)
            memory_days = self.settings.retain_crawl_memory_days
            if memory_days > 0:
                urls = await scrapeq_queue.prune_crawl_memory(
                    connection, older_than=timedelta(days=memory_days)
                )
                metrics.RETENTION_PRUNED_CRAWL_MEMORY_TOTAL.inc(urls)
        if deleted or hosts:
            logger.info(
                "retention: deleted %d finished rows and the state of %d idle sites in %.2f s",
                deleted,
                hosts,
                time.monotonic() - started,
            )
        return deleted
