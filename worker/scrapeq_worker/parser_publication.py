"""Publishing this worker's parsers: which parsers its image registered, for each queue it
serves, written to the queue database at start and every PUBLISH_INTERVAL_SECONDS. The operator
reads them before it queues a ScrapeJob that names a parser, so a name no pool of the queue has
gives the ScrapeJob UnknownParser instead of failing its rows one by one (docs/parsers.md,
"Publication"). The worker claims no row before its first publication succeeded (`published`):
a row served before it could belong to a job the operator queued only because no worker of the
queue had published yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

from .background import OnEnd, OwnedService
from .queue_gateway import QueueGateway

logger = logging.getLogger(__name__)

# A publication refreshed every five minutes stays far inside the week it is kept; the list
# only changes with the image, so there is nothing to gain from refreshing faster.
PUBLISH_INTERVAL_SECONDS: Final = 300.0
# After a failed publication (the database was away), the next try comes this much sooner.
RETRY_SECONDS: Final = 10.0
# Until the first publication succeeds the worker claims nothing, so a failed first one is tried
# again after this (besides the gateway's own wait after a database failure).
FIRST_RETRY_SECONDS: Final = 1.0


class ParserPublication(OwnedService):
    """`async with ParserPublication(...)`: the publication is kept fresh for the block."""

    task_name = "worker-parser-publication"

    def __init__(
        self,
        gateway: QueueGateway,
        *,
        queues: Sequence[str],
        parsers: Sequence[str],
        on_end: OnEnd,
        on_published: Callable[[], None] = lambda: None,
        interval_seconds: float = PUBLISH_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(on_end)
        self._gateway = gateway
        self._queues = tuple(queues)
        self._parsers = tuple(parsers)
        self._interval = interval_seconds
        self._on_published = on_published
        self.publications = 0
        # Set by the first publication that succeeds (and `on_published` called then).
        self.published = asyncio.Event()

    async def _run(self) -> None:
        while True:
            if await self._gateway.publish_parsers(self._queues, self._parsers):
                self.publications += 1
                if not self.published.is_set():
                    self.published.set()
                    self._on_published()
                await asyncio.sleep(self._interval)
            else:
                retry = RETRY_SECONDS if self.published.is_set() else FIRST_RETRY_SECONDS
                await asyncio.sleep(min(retry, self._interval))
