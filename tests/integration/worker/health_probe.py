"""Asking a running worker's /healthz from outside its event loop.

The worker runs in the test's own event loop, so a probe on that loop would wait out any stall
with it and never see one; this probe asks from a thread of its own and times each answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

# The worker's health endpoint answers within this, every time it is asked during a run.
HEALTH_WITHIN_SECONDS = 1.0


class HealthProbe:
    """Asks a URL every 100 ms from its own thread; records each answer's status (0: no
    connection) and how long it took. `async with`: the end waits for the thread off the
    event loop, which the question in flight may need for its answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def __aenter__(self) -> HealthProbe:
        self._thread.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 10)

    @property
    def answered(self) -> list[float]:
        """How long each answer with status 200 took, in seconds."""
        return [seconds for status, seconds in self.answers if status == 200]

    @property
    def slowest_seconds(self) -> float:
        """The longest any question took, answered or not (a refused connection is quick)."""
        return max((seconds for _, seconds in self.answers), default=0.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    status = response.status
            except OSError:
                status = 0
            self.answers.append((status, time.monotonic() - started))
            self._stop.wait(0.1)
