"""Background tasks that live exactly as long as an `async with` block.

The worker's services (the listener, the lease keeper, the rescuer) run until the worker stops
them. One that ends on its own, with an error or without, leaves the worker half working
(say, holding rows whose leases nobody renews); it is reported to `on_end` so the worker can
stop with exit status 1 and its pod restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Self

# Told the name of a task that ended on its own and its error (None: it returned).
OnEnd = Callable[[str, BaseException | None], None]


@contextlib.asynccontextmanager
async def owned_task(
    name: str, coroutine: Coroutine[Any, Any, Any], on_end: OnEnd
) -> AsyncIterator[asyncio.Task[Any]]:
    """Run `coroutine` as a task named `name` for the duration of the block; cancel it and
    wait for it on the way out. `on_end` hears of an end the block did not cause."""
    task = asyncio.create_task(coroutine, name=name)

    def ended(task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            on_end(name, task.exception())

    task.add_done_callback(ended)
    try:
        yield task
    finally:
        task.cancel()
        # An error was reported when the task ended (ended above).
        await asyncio.gather(task, return_exceptions=True)


class OwnedService:
    """A service whose one task (`_run`, named `task_name`) runs for the duration of its
    `async with` block (owned_task); `on_end` hears of the task ending on its own."""

    task_name: str

    def __init__(self, on_end: OnEnd) -> None:
        self._on_end = on_end
        self._task: contextlib.AbstractAsyncContextManager[object] | None = None

    def _run(self) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._task = owned_task(self.task_name, self._run(), self._on_end)
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


async def wait_for_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` pass; True when it was set.

    Not `asyncio.wait_for`: on Python 3.11 it can swallow a cancellation that arrives as the
    event is set, and a background loop cancelled at shutdown then runs on, so the worker never
    exits (seen after a database restart: the lease keeper was woken and cancelled at once).
    `asyncio.timeout` passes the cancellation on.
    """
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
