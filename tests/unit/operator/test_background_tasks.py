"""A background loop of the operator that dies stops the operator instead of leaving it
running without that loop (status sync, retention, autoscaler)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from scrapeq_operator.runtime import FatalTasks, OperatorRuntime
from scrapeq_operator.settings import OperatorSettings

pytestmark = pytest.mark.timeout(30)


class StopRecorder:
    def __init__(self) -> None:
        self.stopped = asyncio.Event()

    def __call__(self) -> None:
        self.stopped.set()


class ClosedCluster:
    """Stands in for the API client: the runtime only closes it here."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def runtime_with(fatal: FatalTasks, cluster: ClosedCluster | None = None) -> OperatorRuntime:
    # No database and no API server are touched: the pool is never opened.
    settings = OperatorSettings(database_url="postgresql://db/x")
    return OperatorRuntime(settings, cast(Any, cluster or ClosedCluster()), fatal)


async def test_a_background_task_that_dies_stops_the_operator_and_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = StopRecorder()
    fatal = FatalTasks(stop)
    runtime = runtime_with(fatal)

    async def broken_loop() -> None:
        raise RuntimeError("a bug outside the loop's own error handling")

    runtime.spawn("status-sync", broken_loop())

    await asyncio.wait_for(stop.stopped.wait(), 10)
    assert fatal.died == ["status-sync"]
    assert "background task status-sync died" in caplog.text
    assert "a bug outside the loop's own error handling" in caplog.text


async def test_a_task_that_ends_cleanly_or_is_cancelled_does_not_stop_the_operator() -> None:
    stop = StopRecorder()
    fatal = FatalTasks(stop)
    cluster = ClosedCluster()
    runtime = runtime_with(fatal, cluster)
    finished = asyncio.Event()
    never = asyncio.Event()

    async def turned_off() -> None:  # retention with a prune interval of 0 returns at once
        finished.set()

    async def waiting() -> None:
        await never.wait()

    runtime.spawn("retention", turned_off())
    runtime.spawn("autoscaler", waiting())
    await asyncio.wait_for(finished.wait(), 10)
    await runtime.close()  # cancels the autoscaler

    assert fatal.died == []
    assert not stop.stopped.is_set()
    assert cluster.closed


async def test_the_shutdown_completes_although_a_task_died() -> None:
    """kopf retries a failing cleanup handler for a minute: a dead task's error must not
    surface again from close()."""
    stop = StopRecorder()
    cluster = ClosedCluster()
    runtime = runtime_with(FatalTasks(stop), cluster)

    async def broken_loop() -> None:
        raise RuntimeError("a bug")

    runtime.spawn("retention", broken_loop())
    await asyncio.wait_for(stop.stopped.wait(), 10)

    await asyncio.wait_for(runtime.close(), 10)
    assert cluster.closed


async def test_the_status_sync_ends_when_its_listen_task_dies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scrapeq_operator import status_sync

    async def broken_listener(*_: Any, **__: Any) -> None:
        raise RuntimeError("the LISTEN loop hit a bug")

    class Rounds(status_sync.StatusSync):
        async def sync_round(self, *, wait: bool = True) -> int:
            return 0

    monkeypatch.setattr(status_sync.notifications, "listen_and_wake", broken_listener)
    settings = OperatorSettings(database_url="postgresql://db/x", status_poll_seconds=60)
    sync = Rounds(settings, cast(Any, None), runtime_with(FatalTasks(StopRecorder())))

    # Without the listener the loop would poll every 60 s unnoticed; it must end instead.
    loop = asyncio.create_task(sync.run())
    done, _ = await asyncio.wait({loop}, timeout=10)
    if not done:
        loop.cancel()
        pytest.fail("the status sync went on without its LISTEN task")
    with pytest.raises(RuntimeError, match="the LISTEN loop hit a bug"):
        loop.result()


async def test_a_loop_that_loses_a_cancel_is_cancelled_again_and_the_shutdown_completes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What Python 3.11's asyncio.wait_for does to a cancel that lands as its wait completes:
    the loop carries on. close() must not wait for it forever."""
    from scrapeq_operator import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "CANCEL_GRACE_SECONDS", 0.2)
    cluster = ClosedCluster()
    runtime = runtime_with(FatalTasks(StopRecorder()), cluster)
    cancels_seen: list[int] = []
    started = asyncio.Event()

    async def loses_the_first_cancel() -> None:
        started.set()
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancels_seen.append(1)
                if len(cancels_seen) > 1:
                    raise

    runtime.spawn("autoscaler", loses_the_first_cancel())
    await asyncio.wait_for(started.wait(), 10)

    await asyncio.wait_for(runtime.close(), 10)
    assert len(cancels_seen) == 2
    assert cluster.closed
    assert "background task autoscaler still runs" in caplog.text
