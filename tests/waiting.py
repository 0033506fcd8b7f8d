"""How every test waits for a condition: poll it with a deadline, never sleep through a fixed
window.

`eventually` serves coroutine tests (the probe may be a plain function or a coroutine
function); `eventually_blocking` serves tests that are not coroutines (subprocesses, kubectl).
Both take the same arguments, return the probe's last result, and fail the test with the same
message naming what was awaited and what the probe last said.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, overload

_T = TypeVar("_T")


def _truthy(value: object) -> bool:
    return bool(value)


class _Deadline:
    def __init__(self, within: float, what: str) -> None:
        self.within = within
        self.what = what
        self.end = time.monotonic() + within

    def check(self, last: object) -> None:
        if time.monotonic() >= self.end:
            raise AssertionError(
                f"timed out after {self.within:g}s waiting for {self.what} (last: {last!r})"
            )


@overload
async def eventually(
    probe: Callable[[], Awaitable[_T]],
    *,
    until: Callable[[_T], object] = ...,
    within: float,
    what: str,
    every: float = ...,
) -> _T: ...


@overload
async def eventually(
    probe: Callable[[], _T],
    *,
    until: Callable[[_T], object] = ...,
    within: float,
    what: str,
    every: float = ...,
) -> _T: ...


async def eventually(
    probe: Callable[[], Any],
    *,
    until: Callable[[Any], object] = _truthy,
    within: float,
    what: str,
    every: float = 0.05,
) -> Any:
    """Call (and await, if it is a coroutine function) `probe` every `every` seconds until
    `until(result)` holds — by default until the result is truthy — and return that result;
    fail the test naming `what` once `within` seconds have passed."""
    deadline = _Deadline(within, what)
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if until(value):
            return value
        deadline.check(value)
        await asyncio.sleep(every)


@overload
def eventually_blocking(
    probe: Callable[[], _T | Literal[False] | None],
    *,
    within: float,
    what: str,
    every: float = ...,
) -> _T: ...


@overload
def eventually_blocking(
    probe: Callable[[], _T],
    *,
    until: Callable[[_T], object],
    within: float,
    what: str,
    every: float = ...,
) -> _T: ...


def eventually_blocking(
    probe: Callable[[], Any],
    *,
    until: Callable[[Any], object] = _truthy,
    within: float,
    what: str,
    every: float = 0.2,
) -> Any:
    """`eventually` for a test that is not a coroutine: blocks its thread between probes.
    Without `until` it waits for a truthy result, so a probe answering "not yet" with None or
    False returns what it found."""
    deadline = _Deadline(within, what)
    while True:
        value = probe()
        if until(value):
            return value
        deadline.check(value)
        time.sleep(every)
