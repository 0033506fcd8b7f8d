"""The one operator-wide loop that scales worker Deployments to their queue's backlog.

Every `autoscaler_interval_seconds` it lists the Deployments labelled scrapeq.io/worker-pool,
reads the backlog of their queues in one query, lets scaling_policy.decide_replicas choose, and
applies changes through the Deployment's `scale` subresource. Before scaling down it gives idle
pods a lower controller.kubernetes.io/pod-deletion-cost (from the in-flight counts workers
leave in the database), so the ReplicaSet removes idle pods before busy ones. On a database
error it holds every pool where it is. Each decision that changes something is recorded in the
scrapeq.io/autoscaler-decision annotation, an Event and a metric.

It is also the part that knows every pool, so it reports the backlog of every queue with live
rows (not only the served ones) and which queues have due rows and no pool (queue_coverage.py):
the status sync turns that into a Stalled condition and an Event on the affected ScrapeJobs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from scrapeq_queue import DatabaseUnavailable, inspection
from scrapeq_queue.options import parse_names
from scrapeq_queue.politeness import SitePoliteness
from scrapeq_queue.rows import QueueBacklog

from scrapeq_operator import metrics
from scrapeq_operator.cluster import WorkerDeployment
from scrapeq_operator.errors import ConfigurationError
from scrapeq_operator.queue_coverage import QueueCoverage
from scrapeq_operator.scaling_policy import (
    PoolMemory,
    PoolPolicy,
    ScalingDecision,
    ScalingReason,
    decide_replicas,
    deletion_costs,
)
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.vocabulary import (
    DECISION_ANNOTATION,
    POD_DELETION_COST_ANNOTATION,
    QUEUE_ANNOTATION,
    WORKER_POOL_LABEL,
)

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "default"


def queues_of(deployment: WorkerDeployment) -> tuple[str, ...]:
    """The queues a pool serves: its scrapeq.io/queue annotation (comma-separated, as the
    chart writes a pool's queue list), else `default`."""
    return parse_names(deployment.annotations.get(QUEUE_ANNOTATION) or "") or (DEFAULT_QUEUE,)


@dataclass
class _PoolState:
    memory: PoolMemory
    # Whether the last recorded decision was a hold; entering and leaving a hold is recorded.
    holding: bool = False
    bad_policy: str | None = None


def backlog_states(backlog: QueueBacklog) -> dict[str, int]:
    """A queue's live rows by the backlog gauge's states. They do not overlap, so a sum over
    them counts every live row once: the due rows are startable + throttled (held back by
    their site's limit or delay), the pending rest is delayed, and processing is apart."""
    startable = min(backlog.startable, backlog.due_pending)
    return {
        "startable": startable,
        "throttled": backlog.due_pending - startable,
        "delayed": backlog.delayed_pending,
        "processing": backlog.processing,
    }


class Autoscaler:
    """Scale every worker pool to its backlog; `run` loops, `scale_round` is one pass."""

    def __init__(
        self,
        settings: OperatorSettings,
        runtime: OperatorRuntime,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.clock = clock
        self._pools: dict[tuple[str, str], _PoolState] = {}
        self.coverage = QueueCoverage(settings.unserved_queue_grace_seconds)
        # Queues whose backlog gauges were set, so that a queue that emptied reads 0.
        self._reported_queues: set[str] = set()
        # This round's startable due rows per queue for pools whose politeness defaults are not
        # the operator's (annotations scrapeq.io/max-concurrent-per-site and
        # scrapeq.io/site-delay-seconds), by those defaults.
        self._startable_by_defaults: dict[SitePoliteness, dict[str, int]] = {}

    async def run(self) -> None:
        """Run until cancelled; a failing round is logged and counted, never fatal."""
        while True:
            try:
                await self.scale_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("autoscaler").inc()
                logger.exception("autoscaler round failed")
            await asyncio.sleep(self.settings.autoscaler_interval_seconds)

    async def read_backlog(
        self, served: list[str], site_defaults: Collection[SitePoliteness] = ()
    ) -> Mapping[str, QueueBacklog] | None:
        """The backlog of every queue with live rows plus the served ones (zero when empty),
        or None when the database cannot say. Sets the backlog gauges of all of them (their
        startable rows with the operator's per-site limit and no delay), and reads the
        startable rows again for each other politeness default of `site_defaults` that pools
        use."""
        default = self._operator_site_defaults()
        self._startable_by_defaults = {}
        try:
            async with self.runtime.connection() as connection:
                backlog = dict(
                    await inspection.live_queue_backlog(
                        connection, default_max_per_site=default.max_concurrent_per_site
                    )
                )
                for defaults in set(site_defaults) - {default}:
                    self._startable_by_defaults[defaults] = await inspection.startable_due(
                        connection,
                        default_max_per_site=defaults.max_concurrent_per_site,
                        default_delay_seconds=defaults.delay_seconds,
                    )
        except DatabaseUnavailable as error:
            metrics.RECONCILE_ERRORS_TOTAL.labels("autoscaler").inc()
            logger.warning("autoscaler: backlog unavailable, holding every pool: %s", error)
            return None
        for queue in [*served, *self._reported_queues]:
            backlog.setdefault(queue, QueueBacklog(0, 0, 0, None))
        for queue, numbers in backlog.items():
            for state, count in backlog_states(numbers).items():
                metrics.QUEUE_BACKLOG_JOBS.labels(queue, state).set(count)
            metrics.QUEUE_OLDEST_DUE_AGE_SECONDS.labels(queue).set(
                numbers.oldest_due_age_seconds or 0.0
            )
        self._reported_queues.update(backlog)
        return backlog

    def _watch_coverage(
        self, deployments: list[WorkerDeployment], backlog: Mapping[str, QueueBacklog]
    ) -> None:
        """Count the pools of every queue and report queues with due rows and none."""
        pools_per_queue = dict.fromkeys(backlog, 0)
        for deployment in deployments:
            for queue in queues_of(deployment):
                pools_per_queue[queue] = pools_per_queue.get(queue, 0) + 1
        for queue, count in pools_per_queue.items():
            metrics.QUEUE_WORKER_POOLS.labels(queue).set(count)
        served = [queue for queue, count in pools_per_queue.items() if count]
        change = self.coverage.update(served, backlog, self.clock())
        for queue in change.unserved:
            logger.warning(
                "queue %s has %d due rows and no worker pool serves it (no Deployment labelled "
                "%s with %s naming it%s); its ScrapeJobs are marked Stalled (NoWorkerPool)",
                queue,
                backlog[queue].due_pending,
                WORKER_POOL_LABEL,
                QUEUE_ANNOTATION,
                "" if not self.settings.worker_pool_namespaces else " in the pool namespaces",
            )
        for queue in change.cleared:
            logger.info("queue %s is served again (or has no due rows left)", queue)
        self.runtime.unserved_queues = self.coverage.reported

    async def scale_round(self) -> list[ScalingDecision]:
        """Decide and apply the replicas of every worker pool once."""
        deployments = await self.runtime.cluster.list_worker_deployments(
            WORKER_POOL_LABEL, self.settings.worker_pool_namespaces
        )
        backlog = await self.read_backlog(
            sorted({queue for item in deployments for queue in queues_of(item)}),
            {self._site_defaults(item) for item in deployments},
        )
        if backlog is not None:
            self._watch_coverage(deployments, backlog)
        decisions = []
        seen: set[tuple[str, str]] = set()
        for deployment in deployments:
            seen.add((deployment.namespace, deployment.name))
            decision = await self._reconcile(deployment, backlog)
            if decision is not None:
                decisions.append(decision)
        for gone in set(self._pools) - seen:
            del self._pools[gone]
        return decisions

    def _operator_site_defaults(self) -> SitePoliteness:
        """The politeness defaults of a pool that names none: the operator's per-site limit
        and no delay."""
        return SitePoliteness(
            max_concurrent_per_site=self.settings.autoscaler.max_concurrent_per_site
        )

    def _site_defaults(self, deployment: WorkerDeployment) -> SitePoliteness:
        """The pool's politeness defaults (its annotations, else the operator's; a bad policy
        is reported when the pool is reconciled)."""
        try:
            policy = PoolPolicy.from_annotations(deployment.annotations, self.settings.autoscaler)
        except ConfigurationError:
            return self._operator_site_defaults()
        return policy.site_defaults

    async def _reconcile(
        self, deployment: WorkerDeployment, backlog: Mapping[str, QueueBacklog] | None
    ) -> ScalingDecision | None:
        key = (deployment.namespace, deployment.name)
        now = self.clock()
        state = self._pools.setdefault(key, _PoolState(memory=PoolMemory(first_seen_at=now)))
        cluster = self.runtime.cluster
        try:
            policy = PoolPolicy.from_annotations(deployment.annotations, self.settings.autoscaler)
        except ConfigurationError as error:
            if state.bad_policy != str(error):
                state.bad_policy = str(error)
                await cluster.post_event(
                    deployment.ref,
                    type_="Warning",
                    reason="InvalidAutoscalerPolicy",
                    message=f"not scaling this pool: {error}",
                )
            return None
        state.bad_policy = None
        queues = queues_of(deployment)
        queue = ",".join(queues)
        work: int | None = None
        if backlog is not None:
            # Due rows a host's limit holds back would only give new replicas nothing to do;
            # the limit is the pool's own when its defaults differ from the operator's.
            startable = self._startable_by_defaults.get(policy.site_defaults)
            work = sum(
                (numbers.startable if startable is None else startable.get(name, 0))
                + numbers.processing
                for name, numbers in ((name, backlog.get(name)) for name in queues)
                if numbers is not None
            )
        decision = decide_replicas(
            current=deployment.replicas, work=work, now=now, policy=policy, memory=state.memory
        )
        pool = (deployment.namespace, deployment.name)
        metrics.POOL_CURRENT_REPLICAS.labels(*pool).set(decision.current)
        metrics.POOL_DESIRED_REPLICAS.labels(*pool).set(decision.desired)
        metrics.POOL_MAX_REPLICAS.labels(*pool).set(policy.max_replicas)

        if decision.changes_replicas:
            if decision.desired < decision.current:
                await self._mark_idle_pods(deployment, queues)
            await cluster.scale_deployment(deployment.namespace, deployment.name, decision.desired)
            logger.info(
                "scaled %s/%s from %d to %d (%s, work=%s)",
                *pool,
                decision.current,
                decision.desired,
                decision.reason,
                work,
            )
        holding = decision.reason is ScalingReason.DATABASE_UNAVAILABLE
        if decision.changes_replicas or holding != state.holding:
            await self._record(deployment, decision, queue, work)
            state.holding = holding
        return decision

    async def _record(
        self, deployment: WorkerDeployment, decision: ScalingDecision, queue: str, work: int | None
    ) -> None:
        """Annotation + Event + metric for a decision that differs from the last one."""
        metrics.SCALING_DECISIONS_TOTAL.labels(decision.reason.value).inc()
        record = {
            "desired": decision.desired,
            "current": decision.current,
            "recommended": decision.recommended,
            "reason": decision.reason.value,
            "queue": queue,
            "work": work,
            "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        cluster = self.runtime.cluster
        await cluster.annotate_deployment(
            deployment.namespace,
            deployment.name,
            DECISION_ANNOTATION,
            json.dumps(record, separators=(",", ":")),
        )
        if decision.reason is ScalingReason.DATABASE_UNAVAILABLE:
            message = (
                f"holding {decision.current} replicas: the backlog of queue {queue} cannot be read"
            )
            event_type = "Warning"
        else:
            message = (
                f"replicas {decision.current} -> {decision.desired} "
                f"(queue {queue}: {work} due or running)"
            )
            event_type = "Normal"
        await cluster.post_event(
            deployment.ref, type_=event_type, reason=decision.reason.value, message=message
        )

    async def _mark_idle_pods(self, deployment: WorkerDeployment, queues: tuple[str, ...]) -> None:
        """Give idle pods a lower deletion cost than busy ones before a scale-down."""
        cluster = self.runtime.cluster
        pods = await cluster.list_pod_names(deployment.namespace, deployment.selector)
        if not pods:
            return
        try:
            async with self.runtime.connection() as connection:
                in_flight: dict[str, int] = {}
                for queue in queues:
                    for worker, count in (await inspection.busy_workers(connection, queue)).items():
                        in_flight[worker] = in_flight.get(worker, 0) + count
        except DatabaseUnavailable as error:
            logger.warning("autoscaler: cannot read busy workers, not ranking pods: %s", error)
            return
        for pod, cost in deletion_costs(pods, in_flight).items():
            await cluster.annotate_pod(
                deployment.namespace, pod, POD_DELETION_COST_ANNOTATION, str(cost)
            )
