"""The lease keeper: renews the leases of the jobs this worker holds, and stops the jobs whose
lease is gone.

A claimed row is this worker's while its lease runs (`lease_seconds`); the keeper renews every
held lease each third of that, so two renewals may fail before a lease expires. It renews at
once when the database answers again after an outage (the gateway's `back` event): a lease
that expired meanwhile is still renewed as long as no one rescued the row (renewal, like
completion, is fenced by attempt). A failed renewal is retried after the short reconnect delay,
not a whole interval. A job missing from the renewal's answer was cancelled or rescued: its
work stops (`lost`), its outcome would be fenced out anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from .background import OnEnd, OwnedService, wait_for_event
from .queue_gateway import QueueGateway, Token


class Leases(OwnedService):
    """`async with Leases(...)`: the lease keeper runs for the duration of the block."""

    task_name = "worker-leases"

    def __init__(
        self,
        gateway: QueueGateway,
        *,
        lease_seconds: float,
        held: Callable[[], Sequence[Token]],
        lost: Callable[[int], None],
        stopping: asyncio.Event,
        on_end: OnEnd,
    ) -> None:
        """`held()`: the tokens of the jobs still this worker's; `lost(job_id)`: the lease of
        that job is gone. `on_end` hears of the keeper ending on its own (an error)."""
        super().__init__(on_end)
        self._gateway = gateway
        self._lease_seconds = lease_seconds
        self._held = held
        self._lost = lost
        self._stopping = stopping

    @property
    def interval(self) -> float:
        """Seconds between two rounds of renewals."""
        return self._lease_seconds / 3

    async def _run(self) -> None:
        back = self._gateway.back
        while True:
            await wait_for_event(back, self.interval)
            back.clear()
            while not await self.renew() and not self._stopping.is_set():
                pass

    async def renew(self) -> bool:
        """Renew every held lease; False when the database did not answer."""
        tokens = list(self._held())
        if not tokens:
            return True
        renewed = await self._gateway.renew_leases(tokens, self._lease_seconds)
        if renewed is None:
            return False
        for job_id, _ in tokens:
            if job_id not in renewed:
                self._lost(job_id)
        return True
