"""What kopf keeps per ScrapeJob, cut to what a ScrapeJob needs.

kopf (1.45) keeps, for every object of a resource that has any timer or daemon handler, the
object's latest body in its per-object memory (`live_fresh_body`), so that a timer sees the
object as it is now. It keeps it whether or not a timer matches the object. ScrapeJobs have two
timers, both filtered to the few objects that ask for them (a `spec.schedule`, the
`scrapeq.io/retry-failed` annotation), so every plain ScrapeJob kept its last watch event:
about 19 KB of Python objects each (the parsed JSON, `managedFields` included), 190 MB at
10,000 ScrapeJobs (docs/benchmarks.md, "What the operator keeps per job").

`release_idle_bodies` wraps kopf's per-event spawning step: after it, an object none of whose
timers runs lets go of that body. Nothing reads it then: kopf builds the handlers' body from
each event while the memory holds none, and keeps it again the moment a timer is spawned for
the object (the annotation appears, a schedule is set), for as long as one runs.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Final

from kopf._core.reactor import processing

logger = logging.getLogger(__name__)

# The wrapped step and the keyword that carries the object's memory (a ResourceMemory).
_STEP: Final = "process_spawning_cause"
_MEMORY: Final = "memory"
_MARK: Final = "__scrapeq_releases_idle_bodies__"

SpawningStep = Callable[..., Awaitable[Collection[float]]]


def releasing(step: SpawningStep) -> SpawningStep:
    """`step` (kopf's spawning step), then drop the object's kept body if no timer of it runs."""

    @functools.wraps(step)
    async def wrapper(*args: Any, **kwargs: Any) -> Collection[float]:
        delays = await step(*args, **kwargs)
        daemons = kwargs[_MEMORY].daemons_memory
        if not daemons.running_daemons:
            daemons.live_fresh_body = None
        return delays

    setattr(wrapper, _MARK, True)
    return wrapper


def release_idle_bodies() -> bool:
    """Install `releasing` around kopf's spawning step, once; whether it is installed. A kopf
    whose step is not the one this was written for is left as it is (and said so): the
    operator then keeps the bodies, as kopf does, and works the same."""
    step = getattr(processing, _STEP, None)
    if step is None or not inspect.iscoroutinefunction(step):
        logger.warning("kopf has no %s step: ScrapeJob bodies stay in its memory", _STEP)
        return False
    if getattr(step, _MARK, False):
        return True
    if _MEMORY not in inspect.signature(step).parameters:
        logger.warning("kopf's %s takes no %s: ScrapeJob bodies stay in its memory", _STEP, _MEMORY)
        return False
    setattr(processing, _STEP, releasing(step))
    return True
