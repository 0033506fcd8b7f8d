"""The operator's connection pool: a cancelled caller stops, and the pool keeps its connection.

Real PostgreSQL. The race is made exact rather than hoped for: a watcher task cancels the
caller in the loop turn after the future it waits on completes, before it runs again, which is
the moment Python 3.11's asyncio.wait_for (the pool's wait for a connection) drops a cancel.
"""

from __future__ import annotations

import asyncio

import pytest
import scrapeq_queue as queue

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


async def cancel_as_its_wait_completes(task: asyncio.Task[None]) -> None:
    """Cancel `task` once the future it awaits is done but before the task has resumed."""
    while not task.done():
        # The task's current wait is not public API; CPython's tasks keep it in _fut_waiter.
        waiting_on = task._fut_waiter  # type: ignore[attr-defined]
        if waiting_on is not None and waiting_on.done():
            task.cancel()
            return
        await asyncio.sleep(0)


async def test_a_caller_cancelled_as_the_pool_hands_it_a_connection_is_cancelled(
    database_url: str,
) -> None:
    pool = queue.ConnectionPool(database_url, max_size=2, timeout=10, name="scrapeq-test")
    used: list[bool] = []

    async def use_a_connection() -> None:
        async with pool.connection() as connection:
            await connection.execute("SELECT 1")
            used.append(True)

    # Opening does not wait, so the first caller waits for the pool's first connection.
    await pool.open()
    try:
        caller = asyncio.create_task(use_a_connection())
        await cancel_as_its_wait_completes(caller)

        with pytest.raises(asyncio.CancelledError):
            await caller
        assert used == [], "the cancelled caller went on to use its connection"

        # Nothing lost: the connection went back and serves the next caller.
        async with asyncio.timeout(10):
            async with pool.connection() as connection:
                cursor = await connection.execute("SELECT 1")
                assert await cursor.fetchone() == (1,)
    finally:
        await pool.close()
