"""Polling with a deadline for async tests: wait for a condition, never sleep a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

_T = TypeVar("_T")


async def eventually(
    probe: Callable[[], Awaitable[_T]],
    *,
    until: Callable[[_T], bool],
    timeout: float,  # noqa: ASYNC109 - a polling deadline, not a wrapper around one await
    what: str,
    interval: float = 0.05,
) -> _T:
    """Call `probe` until `until(result)` holds; fail the test naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if until(result):
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {result!r}")
        await asyncio.sleep(interval)
