"""The suite's one way to wait: poll with a deadline, return what was awaited, fail naming it."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.waiting import eventually, eventually_blocking


async def test_eventually_awaits_a_coroutine_probe_until_the_condition_holds() -> None:
    counter = itertools.count()

    async def probe() -> int:
        return next(counter)

    assert await eventually(probe, until=lambda n: n >= 3, within=5, what="three", every=0) == 3


async def test_eventually_takes_a_plain_probe_and_waits_for_a_truthy_result() -> None:
    answers = iter([None, "", "found"])
    assert await eventually(lambda: next(answers), within=5, what="an answer", every=0) == "found"


async def test_eventually_fails_naming_what_it_waited_for_and_the_last_answer() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"waiting for the moon \(last: 'not yet'\)"):
        await eventually(
            lambda: "not yet", until=lambda answer: answer == "now", within=0.2, what="the moon"
        )
    assert time.monotonic() - started < 2


def test_eventually_blocking_returns_what_a_probe_found_instead_of_none() -> None:
    answers = iter([None, False, {"phase": "Succeeded"}])
    found = eventually_blocking(lambda: next(answers), within=5, what="a phase", every=0)
    assert found == {"phase": "Succeeded"}


def test_eventually_blocking_fails_at_its_deadline() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.1s waiting for never"):
        eventually_blocking(lambda: 0, until=lambda n: n > 0, within=0.1, what="never", every=0)
