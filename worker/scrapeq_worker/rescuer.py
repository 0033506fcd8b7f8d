"""The rescuer: returns rows whose lease expired (their worker died) to the queue, about once
per lease period, from every worker (the queue makes concurrent rescues safe).

After a database outage every live worker needs one renewal interval (a third of the lease) to
renew its own leases, some of which expired during the outage. So the rescuer rescues nothing
until the database has answered this worker for that long since it last failed: a worker that
came back first must not take the rows of the others, which are still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from types import TracebackType

from .background import OnEnd, owned_task
from .metrics import WorkerMetrics
from .queue_gateway import QueueGateway


class Rescuer:
    """`async with Rescuer(...)`: the rescuer runs for the duration of the block."""

    def __init__(
        self,
        gateway: QueueGateway,
        metrics: WorkerMetrics,
        *,
        lease_seconds: float,
        on_end: OnEnd,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gateway = gateway
        self._metrics = metrics
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._on_end = on_end
        self._task: contextlib.AbstractAsyncContextManager[object] | None = None

    async def __aenter__(self) -> Rescuer:
        self._task = owned_task("worker-rescuer", self._rescue_periodically(), self._on_end)
        await self._task.__aenter__()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._task is not None
        await self._task.__aexit__(kind, error, traceback)

    async def _rescue_periodically(self) -> None:
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
