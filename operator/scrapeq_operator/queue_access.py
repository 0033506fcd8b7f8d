"""Which namespaces may use which queues, up to which priority: the cluster admin's QueuePolicies
read into a decision about one ScrapeJob (docs/operator.md, "Queue access"; why:
docs/architecture.md, record 17).

A ScrapeJob is admitted when at least one QueuePolicy names its namespace (or `*`) and its queue
(or `*`) with a `maxPriority` at least the job's priority: policies only grant, so the admin
tightens access by narrowing the grants (the chart's default grants everything). With no
QueuePolicy at all, or the resource not installed, every namespace may use every queue at any
priority: an operator started without the chart behaves as it always did.

The decision is pure bookkeeping on the policies the caller read; the handler turns a refusal into
Admitted=False, an Event, and a check again after the not-ready delay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from scrapeq_operator.errors import JobNotRunnableError

# What a policy's list names to mean every namespace or every queue.
EVERY: Final = "*"
# A ScrapeJob's highest priority (the CRD's bound), and a policy's maxPriority when not given.
MAX_PRIORITY: Final = 1000
# The condition that says whether a ScrapeJob may use its queue at its priority.
ADMITTED_CONDITION: Final = "Admitted"
QUEUE_NOT_ALLOWED_REASON: Final = "QueueNotAllowed"
PRIORITY_NOT_ALLOWED_REASON: Final = "PriorityNotAllowed"
QUEUE_ALLOWED_REASON: Final = "QueueAllowed"
# Policy names a refusal lists: enough to find the one to change, short enough for an Event.
MAX_LISTED_POLICIES: Final = 10


@dataclass(frozen=True)
class QueuePolicy:
    """One QueuePolicy's grant, as the operator reads it."""

    name: str
    namespaces: frozenset[str]
    queues: frozenset[str]
    max_priority: int = MAX_PRIORITY
    # Most rows of each namespace the policy names in flight at once (None: no cap).
    max_rows_in_flight: int | None = None

    def covers(self, namespace: str, queue: str) -> bool:
        """Whether the policy names the namespace and the queue (each by name or `*`)."""
        return (EVERY in self.namespaces or namespace in self.namespaces) and (
            EVERY in self.queues or queue in self.queues
        )


class JobNotAdmittedError(JobNotRunnableError):
    """No QueuePolicy lets the ScrapeJob's namespace use its queue at its priority; checked
    again after the not-ready delay (a policy may change)."""


def read_policy(body: Mapping[str, Any]) -> QueuePolicy:
    """A QueuePolicy object (as the API server returns it) as a grant. The CRD's schema
    validated it; a field the schema would refuse is read as granting nothing rather than
    raising, so one broken object never blocks the check of every job."""
    spec = body.get("spec") or {}

    def names(key: str) -> frozenset[str]:
        value = spec.get(key)
        if not isinstance(value, list):
            return frozenset()
        return frozenset(str(item) for item in value if isinstance(item, str))

    raw_priority = spec.get("maxPriority", MAX_PRIORITY)
    max_priority = raw_priority if isinstance(raw_priority, int) else -MAX_PRIORITY - 1
    raw_cap = spec.get("maxRowsInFlightPerNamespace")
    # A cap the schema would refuse caps as tightly as it can: one row at a time.
    max_rows = None if raw_cap is None else max(raw_cap, 1) if isinstance(raw_cap, int) else 1
    return QueuePolicy(
        name=str((body.get("metadata") or {}).get("name") or "?"),
        namespaces=names("namespaces"),
        queues=names("queues"),
        max_priority=max_priority,
        max_rows_in_flight=max_rows,
    )


def _listed(policies: Iterable[QueuePolicy]) -> str:
    names = sorted(policy.name for policy in policies)
    listed = ", ".join(names[:MAX_LISTED_POLICIES]) or "none"
    if len(names) > MAX_LISTED_POLICIES:
        listed += f" and {len(names) - MAX_LISTED_POLICIES} more"
    return listed


def admission(
    policies: Sequence[QueuePolicy] | None, *, namespace: str, queue: str, priority: int
) -> JobNotAdmittedError | None:
    """The refusal of a ScrapeJob of `namespace` asking for `queue` at `priority`, or None when
    it is admitted. `policies` None means the QueuePolicy resource is not installed; like an
    empty list, that admits everything."""
    if not policies:
        return None
    covering = [policy for policy in policies if policy.covers(namespace, queue)]
    if any(priority <= policy.max_priority for policy in covering):
        return None
    consulted = f"QueuePolicies consulted: {_listed(policies)}"
    if not covering:
        return JobNotAdmittedError(
            QUEUE_NOT_ALLOWED_REASON,
            f"namespace {namespace} may not use queue {queue}: no QueuePolicy grants it "
            f"({consulted}); the job starts once one does",
        )
    highest = max(policy.max_priority for policy in covering)
    return JobNotAdmittedError(
        PRIORITY_NOT_ALLOWED_REASON,
        f"namespace {namespace} may use queue {queue} up to priority {highest}, not {priority} "
        f"(granted by {_listed(covering)}; {consulted}); the job starts once a policy allows "
        "it",
    )


def admitted_message(
    policies: Sequence[QueuePolicy] | None, *, namespace: str, queue: str, priority: int
) -> str:
    """What the Admitted=True condition says: which policies grant the job its queue."""
    if not policies:
        return f"no QueuePolicy exists: namespace {namespace} may use every queue"
    granting = [
        policy
        for policy in policies
        if policy.covers(namespace, queue) and priority <= policy.max_priority
    ]
    return f"namespace {namespace} may use queue {queue} at priority {priority} (granted by " + (
        f"{_listed(granting)})"
    )


def namespace_caps(policies: Sequence[QueuePolicy] | None) -> dict[str, int]:
    """The caps on rows in flight the policies set, for the claim (scrapeq_queue's
    set_namespace_limits): per namespace a policy names, and `*` for every namespace. Caps
    restrict, so the lowest of the policies naming a namespace (by name or `*`) holds."""
    caps: dict[str, int] = {}
    for policy in policies or []:
        if policy.max_rows_in_flight is None:
            continue
        for namespace in policy.namespaces:
            caps[namespace] = min(
                caps.get(namespace, policy.max_rows_in_flight), policy.max_rows_in_flight
            )
    every = caps.get(EVERY)
    if every is not None:
        caps = {namespace: min(cap, every) for namespace, cap in caps.items()}
    return caps
