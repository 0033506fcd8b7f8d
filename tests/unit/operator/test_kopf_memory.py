"""What kopf keeps per object once the operator let go of idle bodies (kopf_memory.py), driven
through kopf's own event processing: an object no timer matches keeps no body, one whose timer
runs keeps it for the timer, and lets it go once the timer has stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import ephemera, references
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.engines.daemons import DaemonsMemory
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing
from scrapeq_operator.kopf_memory import release_idle_bodies

pytestmark = pytest.mark.timeout(30)

ASK = "example.com/ask"
FINALIZER = "example.com/finalizer"
RESOURCE = references.Resource("example.com", "v1", "things", namespaced=True)


class Operator:
    """kopf's event processing for one resource with one annotation-filtered timer."""

    def __init__(self) -> None:
        self.registry = registries.OperatorRegistry()
        self.ticks: list[str] = []
        self.ticked = asyncio.Event()
        self.settings = kopf.OperatorSettings()
        self.settings.persistence.finalizer = FINALIZER
        self.memories = inventory.ResourceMemories()

        @kopf.timer(
            "example.com", "v1", "things", registry=self.registry, interval=3600,
            annotations={ASK: kopf.PRESENT},
        )  # fmt: skip
        async def tick(name: str, **_: Any) -> None:
            self.ticks.append(name)
            self.ticked.set()

    async def event(self, kind: str, body: dict[str, Any]) -> DaemonsMemory:
        """Process one watch event; the object's timer memory afterwards."""
        await processing.process_resource_event(
            lifecycle=lifecycles.all_at_once,
            indexers=indexing.OperatorIndexers(),
            registry=self.registry,
            settings=self.settings,
            memories=self.memories,
            memobase=ephemera.AnyMemo(kopf.Memo()),
            resource=RESOURCE,
            raw_event={"type": kind, "object": body},
            event_queue=asyncio.Queue(),
            no_throttling=True,
        )
        memory = await self.memories.recall(body)
        return memory.daemons_memory

    async def stop(self) -> None:
        for memory in list(self.memories._items.values()):
            for daemon in list(memory.daemons_memory.running_daemons.values()):
                daemon.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await daemon.task


def thing(name: str, *, version: int, asks: bool) -> dict[str, Any]:
    """An object as the watch delivers it; one that asks for the timer carries the finalizer
    kopf adds for a timer (kopf would otherwise patch it in, over the API)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "resourceVersion": str(version),
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:url": {}}}}],
    }
    if asks:
        metadata["annotations"] = {ASK: "yes"}
        metadata["finalizers"] = [FINALIZER]
    return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": metadata, "spec": {}}


@pytest.fixture
async def operator() -> AsyncIterator[Operator]:
    assert release_idle_bodies(), "kopf's spawning step is not the one kopf_memory.py wraps"
    running = Operator()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
def kopf_as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's spawning step without the release."""
    release_idle_bodies()
    monkeypatch.setattr(
        processing, "process_spawning_cause", processing.process_spawning_cause.__wrapped__
    )


async def test_an_object_no_timer_matches_keeps_no_body(operator: Operator) -> None:
    memory = await operator.event("ADDED", thing("plain", version=1, asks=False))
    assert memory.running_daemons == {}
    assert memory.live_fresh_body is None


async def test_kopf_as_shipped_keeps_the_body_of_an_object_no_timer_matches(
    kopf_as_shipped: None,
) -> None:
    # What the release is for: without it, the plain object's whole body stays.
    running = Operator()
    try:
        memory = await running.event("ADDED", thing("plain", version=1, asks=False))
        assert memory.running_daemons == {}
        assert memory.live_fresh_body is not None
        assert memory.live_fresh_body["metadata"]["managedFields"]
    finally:
        await running.stop()


async def test_a_timer_keeps_its_object_s_body_while_it_runs_and_lets_it_go_after(
    operator: Operator,
) -> None:
    memory = await operator.event("ADDED", thing("asks", version=1, asks=True))
    assert set(memory.running_daemons) == {"Operator.__init__.<locals>.tick"}
    assert memory.live_fresh_body is not None
    async with asyncio.timeout(10):
        await operator.ticked.wait()
    assert operator.ticks == ["asks"]

    # The annotation goes: kopf stops the timer; the body stays until the timer has ended.
    memory = await operator.event("MODIFIED", thing("asks", version=2, asks=False))
    tasks = [daemon.task for daemon in memory.running_daemons.values()]
    async with asyncio.timeout(10):
        await asyncio.gather(*tasks, return_exceptions=True)
    memory = await operator.event("MODIFIED", thing("asks", version=3, asks=False))
    assert memory.running_daemons == {}
    assert memory.live_fresh_body is None


def test_the_release_is_installed_once() -> None:
    assert release_idle_bodies()
    wrapped = processing.process_spawning_cause
    assert release_idle_bodies()
    assert processing.process_spawning_cause is wrapped
    assert not hasattr(wrapped.__wrapped__, "__wrapped__")


def test_a_kopf_whose_spawning_step_changed_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def other_step(cause: object) -> list[float]:
        return []

    monkeypatch.setattr(processing, "process_spawning_cause", other_step)
    assert not release_idle_bodies()
    assert processing.process_spawning_cause is other_step
    assert "bodies stay in its memory" in caplog.text
