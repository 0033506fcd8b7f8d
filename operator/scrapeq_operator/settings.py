"""The operator's configuration, declared once: every knob, its default and why it has it.

Values come from flags (see `commands.py`), which default to `SCRAPEQ_OPERATOR_*` environment
variables, which default to the values below. Nothing else in the package reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from scrapeq_operator.errors import ConfigurationError

# The API group every scrapeq resource, label and annotation lives under.
GROUP = "scrapeq.io"
VERSION = "v1alpha1"
PLURAL = "scrapejobs"

# Finalizer that keeps a deleted ScrapeJob until its rows are cancelled in PostgreSQL.
FINALIZER = f"{GROUP}/cancel-rows"
# Set to "true" on a ScrapeJob to let it go even though its rows could not be cancelled
# (for example, the database is gone for good). Rows may then be scraped after deletion.
FORCE_DELETE_ANNOTATION = f"{GROUP}/force-delete"
# Set (to any value) on a ScrapeJob to re-queue its failed rows once; the operator removes it
# when done (see retry_requests.py).
RETRY_FAILED_ANNOTATION = f"{GROUP}/retry-failed"

# Worker Deployments that carry this label are scaled by the operator; its value names the pool.
WORKER_POOL_LABEL = f"{GROUP}/worker-pool"
# Per-Deployment overrides of the autoscaler defaults.
QUEUE_ANNOTATION = f"{GROUP}/queue"
MIN_REPLICAS_ANNOTATION = f"{GROUP}/min-replicas"
MAX_REPLICAS_ANNOTATION = f"{GROUP}/max-replicas"
JOBS_PER_REPLICA_ANNOTATION = f"{GROUP}/jobs-per-replica"
SCALE_DOWN_WINDOW_ANNOTATION = f"{GROUP}/scale-down-stabilization-seconds"
SCALE_TO_ZERO_COOLDOWN_ANNOTATION = f"{GROUP}/scale-to-zero-cooldown-seconds"
# Where the autoscaler records its last decision (JSON) on the Deployment.
DECISION_ANNOTATION = f"{GROUP}/autoscaler-decision"
POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def _env(environ: Mapping[str, str], name: str, default: str) -> str:
    return environ.get(f"SCRAPEQ_OPERATOR_{name}", default)


def _float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = _env(environ, name, str(default))
    try:
        return float(raw)
    except ValueError as error:
        raise ConfigurationError(f"SCRAPEQ_OPERATOR_{name}={raw!r} is not a number") from error


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = _env(environ, name, str(default))
    try:
        return int(raw)
    except ValueError as error:
        raise ConfigurationError(f"SCRAPEQ_OPERATOR_{name}={raw!r} is not an integer") from error


def _bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _env(environ, name, "true" if default else "false").strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"SCRAPEQ_OPERATOR_{name}={raw!r} is not a boolean")


@dataclass(frozen=True)
class AutoscalerDefaults:
    """Autoscaler policy used when a worker Deployment does not override it by annotation."""

    # A single busy pool should not take the cluster; Deployments raise it by annotation.
    max_replicas: int = 10
    # Zero: a pool with no work costs nothing.
    min_replicas: int = 0
    # One worker process renders several pages at once; 10 rows keeps each one busy.
    jobs_per_replica: int = 10
    # Like the HPA's default of 5 minutes, shortened: batch backlogs drain in bursts.
    scale_down_window_seconds: float = 120.0
    # KEDA's default cool-down before scaling to zero is 300 s.
    scale_to_zero_cooldown_seconds: float = 300.0


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator can be told; one instance per process."""

    database_url: str
    # Empty means every namespace (cluster-wide).
    namespaces: tuple[str, ...] = ()
    # Run the queue migrations at start (under the queue's advisory lock). When false, the
    # operator refuses to start unless the schema is already current.
    migrate: bool = True
    # The status sync wakes on NOTIFY at once; this sweep catches anything a lost notification
    # (reconnect, a producer without NOTIFY) missed.
    status_sweep_seconds: float = 30.0
    # Completions send no NOTIFY (that would serialise workers' commits), so the sync also asks
    # every second which owners' rows changed: one indexed query.
    status_poll_seconds: float = 1.0
    # Debounce: collect notifications for this long so a burst of row changes costs one query.
    status_debounce_seconds: float = 0.5
    # At most this many ScrapeJobs are read and patched per round, so a 100k-row burst cannot
    # flood the API server; the rest follow in the next round.
    status_batch_size: int = 200
    # At most one status PATCH per unfinished ScrapeJob per this interval, counted from its
    # creation (finished phases are written at once). A job done within it costs one status
    # write in all; a 100k-URL job's ever-changing counts cost one write per interval.
    status_min_interval_seconds: float = 3.0
    # Concurrent status PATCH requests in one round (each waits on the API server, not on us).
    status_patch_concurrency: int = 16
    # The autoscaler's loop period; the goal is a reaction under 5 s (KEDA polls every 30 s).
    autoscaler_interval_seconds: float = 2.0
    autoscaler_enabled: bool = True
    autoscaler: AutoscalerDefaults = field(default_factory=AutoscalerDefaults)
    # A queue with due rows and no worker pool is reported (Stalled condition, Event, log)
    # once that has lasted this long: a pool created together with the first ScrapeJob (one
    # `helm install`) appears within it and is never reported.
    unserved_queue_grace_seconds: float = 30.0
    # Delay before retrying a handler whose database call failed (the finalizer stays).
    database_retry_seconds: float = 5.0
    # Delay before re-checking a ScrapeJob that cannot run yet (missing ConfigMap).
    not_ready_retry_seconds: float = 30.0
    # Delay before re-checking a ScrapeJob blocked by spec.dependsOn (how soon it starts after
    # its last dependency succeeded).
    dependency_poll_seconds: float = 5.0
    # How often each scheduled ScrapeJob (spec.schedule) checks whether a run is due: the
    # lateness of a run at worst, and the shortest useful @every (5 s, its minimum).
    schedule_check_seconds: float = 5.0
    # Most URLs read from one urlsFrom ConfigMap key (a ConfigMap holds at most 1 MiB).
    max_urls_per_job: int = 200_000
    # Retention (see retention.py): how often finished rows are pruned; 0 turns it off. Hourly
    # keeps each prune small (a few batches) without letting the table grow for long.
    prune_interval_seconds: float = 3600.0
    # Completed and cancelled rows are deleted this many days after they finished: long enough
    # to export results and investigate a job from the past week.
    retain_completed_days: float = 7.0
    # Failed rows are a dead-letter queue: the newest this many per queue are kept for
    # `scrapeq jobs failed` and `scrapeq retry`, older ones deleted; 0 keeps every failed row.
    retain_failed_last: int = 10_000
    # Port of the liveness endpoint (kopf's /healthz); 0 disables it.
    liveness_port: int = 8081
    # Port of the Prometheus /metrics endpoint; 0 disables it.
    metrics_port: int = 9102
    # Bind address of both endpoints.
    listen_host: str = "0.0.0.0"

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, validate: bool = True
    ) -> OperatorSettings:
        """Build settings from `SCRAPEQ_OPERATOR_*` variables (DATABASE_URL as a fallback).

        With validate=False the caller may still lay flags on top and must validate after.
        """
        env = os.environ if environ is None else environ
        database_url = env.get("SCRAPEQ_OPERATOR_DATABASE_URL") or env.get("DATABASE_URL", "")
        namespaces = tuple(
            name.strip() for name in _env(env, "NAMESPACES", "").split(",") if name.strip()
        )
        defaults = AutoscalerDefaults()
        autoscaler = AutoscalerDefaults(
            max_replicas=_int(env, "MAX_REPLICAS", defaults.max_replicas),
            min_replicas=_int(env, "MIN_REPLICAS", defaults.min_replicas),
            jobs_per_replica=_int(env, "JOBS_PER_REPLICA", defaults.jobs_per_replica),
            scale_down_window_seconds=_float(
                env, "SCALE_DOWN_WINDOW_SECONDS", defaults.scale_down_window_seconds
            ),
            scale_to_zero_cooldown_seconds=_float(
                env, "SCALE_TO_ZERO_COOLDOWN_SECONDS", defaults.scale_to_zero_cooldown_seconds
            ),
        )
        base = cls(database_url=database_url)
        settings = cls(
            database_url=database_url,
            namespaces=namespaces,
            migrate=_bool(env, "MIGRATE", base.migrate),
            status_sweep_seconds=_float(env, "STATUS_SWEEP_SECONDS", base.status_sweep_seconds),
            status_poll_seconds=_float(env, "STATUS_POLL_SECONDS", base.status_poll_seconds),
            status_debounce_seconds=_float(
                env, "STATUS_DEBOUNCE_SECONDS", base.status_debounce_seconds
            ),
            status_batch_size=_int(env, "STATUS_BATCH_SIZE", base.status_batch_size),
            status_min_interval_seconds=_float(
                env, "STATUS_MIN_INTERVAL_SECONDS", base.status_min_interval_seconds
            ),
            status_patch_concurrency=_int(
                env, "STATUS_PATCH_CONCURRENCY", base.status_patch_concurrency
            ),
            autoscaler_interval_seconds=_float(
                env, "AUTOSCALER_INTERVAL_SECONDS", base.autoscaler_interval_seconds
            ),
            autoscaler_enabled=_bool(env, "AUTOSCALER_ENABLED", base.autoscaler_enabled),
            autoscaler=autoscaler,
            unserved_queue_grace_seconds=_float(
                env, "UNSERVED_QUEUE_GRACE_SECONDS", base.unserved_queue_grace_seconds
            ),
            database_retry_seconds=_float(
                env, "DATABASE_RETRY_SECONDS", base.database_retry_seconds
            ),
            not_ready_retry_seconds=_float(
                env, "NOT_READY_RETRY_SECONDS", base.not_ready_retry_seconds
            ),
            dependency_poll_seconds=_float(
                env, "DEPENDENCY_POLL_SECONDS", base.dependency_poll_seconds
            ),
            schedule_check_seconds=_float(
                env, "SCHEDULE_CHECK_SECONDS", base.schedule_check_seconds
            ),
            max_urls_per_job=_int(env, "MAX_URLS_PER_JOB", base.max_urls_per_job),
            prune_interval_seconds=_float(
                env, "PRUNE_INTERVAL_SECONDS", base.prune_interval_seconds
            ),
            retain_completed_days=_float(env, "RETAIN_COMPLETED_DAYS", base.retain_completed_days),
            retain_failed_last=_int(env, "RETAIN_FAILED_LAST", base.retain_failed_last),
            liveness_port=_int(env, "LIVENESS_PORT", base.liveness_port),
            metrics_port=_int(env, "METRICS_PORT", base.metrics_port),
            listen_host=_env(env, "LISTEN_HOST", base.listen_host),
        )
        if validate:
            settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ConfigurationError naming the first setting that cannot work."""
        if not self.database_url:
            raise ConfigurationError(
                "no database: set DATABASE_URL (or SCRAPEQ_OPERATOR_DATABASE_URL), "
                "or pass --database-url"
            )
        positive = {
            "status sweep interval": self.status_sweep_seconds,
            "status poll interval": self.status_poll_seconds,
            "status batch size": self.status_batch_size,
            "status patch concurrency": self.status_patch_concurrency,
            "autoscaler interval": self.autoscaler_interval_seconds,
            "jobs per replica": self.autoscaler.jobs_per_replica,
            "schedule check interval": self.schedule_check_seconds,
            "dependency poll interval": self.dependency_poll_seconds,
        }
        for what, value in positive.items():
            if value <= 0:
                raise ConfigurationError(f"the {what} must be positive, got {value}")
        # Zero means "off" (interval) or "keep all" (failed rows), so zero is allowed here.
        not_negative = {
            "prune interval (SCRAPEQ_OPERATOR_PRUNE_INTERVAL_SECONDS)": self.prune_interval_seconds,
            "completed-row retention (SCRAPEQ_OPERATOR_RETAIN_COMPLETED_DAYS)": (
                self.retain_completed_days
            ),
            "failed-row retention (SCRAPEQ_OPERATOR_RETAIN_FAILED_LAST)": self.retain_failed_last,
            "unserved-queue grace (SCRAPEQ_OPERATOR_UNSERVED_QUEUE_GRACE_SECONDS)": (
                self.unserved_queue_grace_seconds
            ),
        }
        for what, value in not_negative.items():
            if value < 0:
                raise ConfigurationError(f"the {what} must be 0 or more, got {value}")
        if not 0 <= self.autoscaler.min_replicas <= self.autoscaler.max_replicas:
            raise ConfigurationError(
                "replica bounds need 0 <= min <= max, got "
                f"min={self.autoscaler.min_replicas} max={self.autoscaler.max_replicas}"
            )
