"""Which queues have due rows and no worker pool serving them: pure bookkeeping, no I/O.

A ScrapeJob on a queue that no pool serves would wait in Pending forever without a word. The
autoscaler knows every pool (Deployments labelled scrapeq.io/worker-pool, their
scrapeq.io/queue annotation) and every queue's backlog, so each round it feeds both to a
QueueCoverage; the status sync then marks the ScrapeJobs of the unserved queues
(Stalled=True, reason NoWorkerPool) and the operator logs the change. A grace period keeps a
pool that is being created together with the first ScrapeJob (one `helm install`, one
`kubectl apply -k`) from being reported.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

# The condition a ScrapeJob gets while its rows cannot be claimed by anyone, and its reason.
STALLED_CONDITION: Final = "Stalled"
NO_WORKER_POOL_REASON: Final = "NoWorkerPool"


class Backlog(Protocol):
    """A queue's backlog (the queue package's QueueBacklog fits)."""

    @property
    def due_pending(self) -> int: ...


def no_pool_message(queue: str) -> str:
    """The condition's and Event's message: what is wrong and what fixes it."""
    return (
        f"no worker pool serves queue {queue}: its rows wait until a worker Deployment "
        f"labelled scrapeq.io/worker-pool lists {queue} in its scrapeq.io/queue annotation "
        f"(chart: workers.pools[].queues)"
    )


@dataclass(frozen=True)
class CoverageChange:
    """What one round changed: queues newly reported unserved, and queues no longer reported
    (a pool serves them now, or their due rows are gone)."""

    unserved: tuple[str, ...]
    cleared: tuple[str, ...]


@dataclass
class QueueCoverage:
    """Remembers since when each queue has had due rows and no pool; reports a queue once that
    has lasted `grace_seconds`, and stops reporting it when a pool serves it or it has no due
    rows any more."""

    grace_seconds: float
    # queue -> when it was first seen with due rows and no pool (monotonic seconds).
    _since: dict[str, float] = field(default_factory=dict)
    # The queues reported now.
    reported: frozenset[str] = frozenset()

    def update(
        self, served: Collection[str], backlog: Mapping[str, Backlog], now: float
    ) -> CoverageChange:
        """One round: `served` are the queues some pool serves, `backlog` every queue's rows."""
        waiting = {queue for queue, numbers in backlog.items() if numbers.due_pending > 0} - set(
            served
        )
        self._since = {queue: self._since.get(queue, now) for queue in waiting}
        reported = frozenset(
            queue for queue, since in self._since.items() if now - since >= self.grace_seconds
        )
        change = CoverageChange(
            unserved=tuple(sorted(reported - self.reported)),
            cleared=tuple(sorted(self.reported - reported)),
        )
        self.reported = reported
        return change
