"""How many workers a pool should run, decided from its queue's backlog: pure, clock passed in.

The rules (documented in docs/operator.md):

* recommended = clamp(ceil((startable due + processing) / jobs per replica), min, max), where
  startable due counts a host's due rows only up to its per-site limit less its rows in flight;
* scale up at once to the recommendation;
* scale down only to the highest recommendation seen during the stabilisation window, so a
  short lull does not kill workers that the next burst needs (the HPA's rule);
* scale to zero only when the queue has had nothing due or running for the cool-down;
  until then keep one replica;
* no backlog reading (database error): hold the current replicas, never scale to zero.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scrapeq_queue.politeness import (
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_CONCURRENT_PER_SITE,
    SitePoliteness,
    site_delay_problem,
    site_limit_problem,
)

from scrapeq_operator.errors import ConfigurationError
from scrapeq_operator.settings import AutoscalerDefaults
from scrapeq_operator.vocabulary import (
    JOBS_PER_REPLICA_ANNOTATION,
    MAX_CONCURRENT_PER_SITE_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    MIN_REPLICAS_ANNOTATION,
    RENAMED_ANNOTATIONS,
    SCALE_DOWN_WINDOW_ANNOTATION,
    SCALE_TO_ZERO_COOLDOWN_ANNOTATION,
    SITE_DELAY_SECONDS_ANNOTATION,
)


class ScalingReason(StrEnum):
    """Why the autoscaler chose its number (recorded in the annotation, Event and metric)."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    SCALE_TO_ZERO = "ScaleToZero"
    STEADY = "Steady"
    STABILIZING = "ScaleDownStabilizing"
    COOLING_DOWN = "ScaleToZeroCoolingDown"
    DATABASE_UNAVAILABLE = "HoldDatabaseUnavailable"


@dataclass(frozen=True)
class PoolPolicy:
    """One worker pool's bounds and timings."""

    min_replicas: int
    max_replicas: int
    jobs_per_replica: int
    scale_down_window_seconds: float
    scale_to_zero_cooldown_seconds: float
    # The per-site limit of the pool's workers for rows that set none: how many of one site's
    # due rows the pool can start at once.
    max_concurrent_per_site: int = DEFAULT_MAX_CONCURRENT_PER_SITE
    # The pool's per-site delay for rows that set none: with a delay, a claim hands out one row
    # of a site at a time.
    site_delay_seconds: float = DEFAULT_DELAY_SECONDS

    @property
    def site_defaults(self) -> SitePoliteness:
        """The pool's politeness defaults, as its workers' claims apply them."""
        return SitePoliteness(
            max_concurrent_per_site=self.max_concurrent_per_site,
            delay_seconds=self.site_delay_seconds,
        )

    @classmethod
    def from_annotations(
        cls, annotations: Mapping[str, str], defaults: AutoscalerDefaults
    ) -> PoolPolicy:
        """The Deployment's annotations over the operator's defaults.

        Raises ConfigurationError naming the annotation that is not a valid number, or that
        has been renamed (with its name now).
        """
        for old, new in RENAMED_ANNOTATIONS.items():
            if old in annotations:
                raise ConfigurationError(f"annotation {old} is now {new}")

        def number(name: str, default: float, *, integer: bool) -> float:
            raw = annotations.get(name)
            if raw is None:
                return default
            try:
                value = int(raw) if integer else float(raw)
            except ValueError as error:
                raise ConfigurationError(f"annotation {name}={raw!r} is not a number") from error
            if value < 0:
                raise ConfigurationError(f"annotation {name}={raw!r} must not be negative")
            return value

        policy = cls(
            min_replicas=int(number(MIN_REPLICAS_ANNOTATION, defaults.min_replicas, integer=True)),
            max_replicas=int(number(MAX_REPLICAS_ANNOTATION, defaults.max_replicas, integer=True)),
            jobs_per_replica=int(
                number(JOBS_PER_REPLICA_ANNOTATION, defaults.jobs_per_replica, integer=True)
            ),
            scale_down_window_seconds=number(
                SCALE_DOWN_WINDOW_ANNOTATION, defaults.scale_down_window_seconds, integer=False
            ),
            scale_to_zero_cooldown_seconds=number(
                SCALE_TO_ZERO_COOLDOWN_ANNOTATION,
                defaults.scale_to_zero_cooldown_seconds,
                integer=False,
            ),
            max_concurrent_per_site=int(
                number(
                    MAX_CONCURRENT_PER_SITE_ANNOTATION,
                    defaults.max_concurrent_per_site,
                    integer=True,
                )
            ),
            site_delay_seconds=number(
                SITE_DELAY_SECONDS_ANNOTATION, DEFAULT_DELAY_SECONDS, integer=False
            ),
        )
        if problem := site_limit_problem(policy.max_concurrent_per_site):
            raise ConfigurationError(f"annotation {MAX_CONCURRENT_PER_SITE_ANNOTATION} {problem}")
        if problem := site_delay_problem(policy.site_delay_seconds):
            raise ConfigurationError(f"annotation {SITE_DELAY_SECONDS_ANNOTATION} {problem}")
        if policy.jobs_per_replica < 1:
            raise ConfigurationError(f"annotation {JOBS_PER_REPLICA_ANNOTATION} must be >= 1")
        if policy.min_replicas > policy.max_replicas:
            raise ConfigurationError(
                f"min replicas ({policy.min_replicas}) exceed max replicas ({policy.max_replicas})"
            )
        return policy


def recommended_replicas(work: int, policy: PoolPolicy) -> int:
    """clamp(ceil(work / jobs per replica), min, max), where work = the due pending rows the
    per-site limits let start + processing."""
    wanted = math.ceil(max(work, 0) / policy.jobs_per_replica)
    return max(policy.min_replicas, min(policy.max_replicas, wanted))


@dataclass
class PoolMemory:
    """What the autoscaler remembers about one pool between rounds (monotonic seconds)."""

    first_seen_at: float
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    last_busy_at: float | None = None


@dataclass(frozen=True)
class ScalingDecision:
    """The replicas a pool should have now, and why."""

    current: int
    desired: int
    recommended: int | None
    reason: ScalingReason

    @property
    def changes_replicas(self) -> bool:
        return self.desired != self.current


def decide_replicas(
    *,
    current: int,
    work: int | None,
    now: float,
    policy: PoolPolicy,
    memory: PoolMemory,
) -> ScalingDecision:
    """Decide the pool's replicas; `work` None means the backlog could not be read.

    Updates `memory` (recommendation history, last time the queue had work).
    """
    if work is None:
        return ScalingDecision(current, current, None, ScalingReason.DATABASE_UNAVAILABLE)
    recommended = recommended_replicas(work, policy)
    if work > 0:
        memory.last_busy_at = now
    memory.recommendations.append((now, recommended))
    horizon = now - policy.scale_down_window_seconds
    while memory.recommendations and memory.recommendations[0][0] < horizon:
        memory.recommendations.popleft()

    if recommended > current:
        return ScalingDecision(current, recommended, recommended, ScalingReason.SCALE_UP)
    if recommended == current:
        return ScalingDecision(current, current, recommended, ScalingReason.STEADY)

    stabilised = max(count for _, count in memory.recommendations)
    target = min(current, stabilised)
    if target >= current:
        return ScalingDecision(current, current, recommended, ScalingReason.STABILIZING)
    if target == 0:
        idle_since = (
            memory.last_busy_at if memory.last_busy_at is not None else memory.first_seen_at
        )
        if now - idle_since < policy.scale_to_zero_cooldown_seconds:
            target = 1
            if target >= current:
                return ScalingDecision(current, current, recommended, ScalingReason.COOLING_DOWN)
            return ScalingDecision(current, target, recommended, ScalingReason.SCALE_DOWN)
        return ScalingDecision(current, 0, recommended, ScalingReason.SCALE_TO_ZERO)
    return ScalingDecision(current, target, recommended, ScalingReason.SCALE_DOWN)


# Below the default cost of 0 of pods nobody annotated: idle pods go first.
IDLE_POD_DELETION_COST = -1


def pod_of_worker(worker_id: str, pod_names: Collection[str]) -> str | None:
    """The pod a worker id belongs to: the pod name itself, or `<pod name>-<pid>` (the
    worker's default id), or None for a worker outside these pods."""
    if worker_id in pod_names:
        return worker_id
    prefix, _, suffix = worker_id.rpartition("-")
    if suffix.isdigit() and prefix in pod_names:
        return prefix
    return None


def deletion_costs(pod_names: list[str], in_flight: Mapping[str, int]) -> dict[str, int]:
    """controller.kubernetes.io/pod-deletion-cost per pod: idle pods are cheapest to delete.

    Busy pods cost their number of rows in flight (summed over the worker processes in the
    pod), so the ReplicaSet removes idle pods first and, among busy ones, the least busy.
    """
    busy: dict[str, int] = dict.fromkeys(pod_names, 0)
    for worker_id, count in in_flight.items():
        pod = pod_of_worker(worker_id, busy)
        if pod is not None:
            busy[pod] += count
    return {pod: count if count > 0 else IDLE_POD_DELETION_COST for pod, count in busy.items()}
