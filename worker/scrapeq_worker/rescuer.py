"""The rescuer: returns rows whose lease expired (their worker died) to the queue, about once
per lease period, from every worker (the queue makes concurrent rescues safe).

After a database outage every live worker needs one renewal interval (a third of the lease) to
renew its own leases, some of which expired during the outage. So the rescuer rescues nothing
until the database has answered this worker for that long since it last failed: a worker that
came back first must not take the rows of the others, which are still alive.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .background import OnEnd, OwnedService
from .metrics import WorkerMetrics
from .queue_gateway import QueueGateway


class Rescuer(OwnedService):
    """`async with Rescuer(...)`: the rescuer runs for the duration of the block."""

    task_name = "worker-rescuer"

    def __init__(
        self,
        gateway: QueueGateway,
        metrics: WorkerMetrics,
        *,
        lease_seconds: float,
        on_end: OnEnd,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(on_end)
        self._gateway = gateway
        self._metrics = metrics
        self._lease_seconds = lease_seconds
        self._clock = clock

    async def _run(self) -> None:
        interval = self._lease_seconds / 3
        last_rescue = self._clock()
        while True:
            await asyncio.sleep(interval)
            if (
                self._clock() - last_rescue >= self._lease_seconds
                and self._gateway.seconds_answering() >= interval
            ):
                last_rescue = self._clock()
                rescued = await self._gateway.rescue_expired_leases()
                if rescued:
                    self._metrics.leases_rescued.inc(rescued)
