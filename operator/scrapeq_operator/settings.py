"""The operator's configuration, declared once: every knob, its default and why it has it.

Each field of `OperatorSettings` (and of its nested `AutoscalerDefaults`) is one option
(`scrapeq_queue.options.option`): flag if it has one, then its `SCRAPEQ_OPERATOR_*` environment
variable, then the default below. The table in docs/operator.md is generated from these
declarations (`make generate`). Nothing else in the package reads the environment.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrapeq_queue import options
from scrapeq_queue.addresses import IPNetwork, parse_networks
from scrapeq_queue.options import (
    option,
    parse_bool,
    parse_float,
    parse_int,
    parse_names,
    parse_non_negative_int,
    parse_positive_float,
)
from scrapeq_queue.politeness import (
    DEFAULT_MAX_CONCURRENT_PER_SITE,
    parse_site_limit,
)
from scrapeq_queue.sealed_credentials import SealingKeys

from scrapeq_operator.errors import ConfigurationError

PREFIX = "SCRAPEQ_OPERATOR_"


def parse_sealing_keys(text: str) -> SealingKeys | None:
    """SCRAPEQ_SEALING_KEY: a key ring (SealingError, a ValueError, names what is wrong)."""
    return SealingKeys.from_text(text.strip()) if text.strip() else None


def parse_bucket_name(text: str) -> str:
    """An S3 bucket name: 3-63 letters, digits, '.' and '-'."""
    bucket = text.strip()
    if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in ".-" for c in bucket):
        raise ValueError(
            f"must be an S3 bucket name (3-63 letters, digits, '.' and '-'), got {text!r}"
        )
    return bucket


def parse_endpoint_url(text: str) -> str:
    """An http:// or https:// URL with a host, without a trailing slash."""
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {text!r}")
    return url


def parse_output_default(text: str) -> dict[str, Any] | None:
    """SCRAPEQ_OPERATOR_OUTPUT_DEFAULT: a JSON object with spec.output's fields (or empty)."""
    if not text.strip():
        return None
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object with spec.output's fields")
    unknown = set(value) - {"format", "batchRows", "batchSeconds", "prefix", "changesOnly"}
    if unknown:
        raise ValueError(f"unknown spec.output fields: {', '.join(sorted(unknown))}")
    return value


def _env(name: str) -> str:
    return PREFIX + name.upper()


@dataclass(frozen=True)
class AutoscalerDefaults:
    """Autoscaler policy used when a worker Deployment does not override it by annotation."""

    # A single busy pool should not take the cluster; Deployments raise it by annotation.
    max_replicas: int = option(
        10,
        env=_env("max_replicas"),
        parse=parse_int,
        help="Most replicas of a worker pool (per pool: annotation scrapeq.io/max-replicas).",
    )
    # Zero: a pool with no work costs nothing.
    min_replicas: int = option(
        0,
        env=_env("min_replicas"),
        parse=parse_int,
        help="Fewest replicas of a worker pool (annotation scrapeq.io/min-replicas).",
    )
    # One worker process renders several pages at once; 10 rows keeps each one busy.
    jobs_per_replica: int = option(
        10,
        env=_env("jobs_per_replica"),
        parse=parse_int,
        help="Due and running rows per replica (annotation scrapeq.io/jobs-per-replica).",
    )
    # Like the HPA's default of 5 minutes, shortened: batch backlogs drain in bursts.
    scale_down_window_seconds: float = option(
        120.0,
        env=_env("scale_down_window_seconds"),
        parse=parse_float,
        help="Scale-down stabilisation: the highest wish of this window wins.",
    )
    # KEDA's default cool-down before scaling to zero is 300 s.
    scale_to_zero_cooldown_seconds: float = option(
        300.0,
        env=_env("scale_to_zero_cooldown_seconds"),
        parse=parse_float,
        help="Idle time before a pool goes to 0 replicas.",
    )
    # The workers' own default (--max-concurrent-per-site): a backlog on one site can keep only
    # that many pages busy, whatever the number of replicas.
    max_concurrent_per_site: int = option(
        DEFAULT_MAX_CONCURRENT_PER_SITE,
        env=_env("max_concurrent_per_site"),
        renamed_from=(_env("max_concurrent_per_host"),),
        parse=parse_site_limit,
        help="The worker pools' per-site limit for rows that set none (per pool: annotation "
        "scrapeq.io/max-concurrent-per-site): the autoscaler counts only the due rows the "
        "sites' limits let start.",
    )


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator can be told; one instance per process."""

    database_url: str = option(
        "",
        flag="--database-url",
        env=_env("database_url"),
        fallback_env=("DATABASE_URL",),
        parse=str,
        help="PostgreSQL connection string of the queue (required).",
    )
    # LISTEN keeps a session: behind a pooler in transaction mode it must reach PostgreSQL
    # directly (docs/operator.md, "Database connections").
    database_listen_url: str = option(
        "",
        flag="--database-listen-url",
        env=_env("database_listen_url"),
        fallback_env=("DATABASE_LISTEN_URL",),
        parse=str,
        help="PostgreSQL connection string of the LISTEN session, when --database-url goes "
        "through a pooler in transaction mode (default: --database-url).",
    )
    database_pooled: bool = option(
        False,
        flag="--database-pooled",
        env=_env("database_pooled"),
        fallback_env=("DATABASE_POOLED",),
        parse=parse_bool,
        help="--database-url goes through a pooler in transaction mode (PgBouncer): "
        "no prepared statements on its connections.",
    )
    # Empty means every namespace (cluster-wide).
    namespaces: tuple[str, ...] = option(
        (),
        flag="--namespace",
        env=_env("namespaces"),
        parse=parse_names,
        help="Namespaces to watch, comma-separated; the flag may be repeated.",
        repeatable=True,
        shown_default="all",
    )
    # Where the autoscaler finds worker Deployments. Empty means the watched namespaces (every
    # namespace when cluster-wide); the chart names its own namespace, so that the operator's
    # Deployment and Pod rights are a Role there, not cluster-wide (docs/operator.md, RBAC).
    pool_namespaces: tuple[str, ...] = option(
        (),
        flag="--pool-namespace",
        env=_env("pool_namespaces"),
        parse=parse_names,
        help="Namespaces holding worker Deployments, comma-separated; the flag may be repeated.",
        repeatable=True,
        shown_default="the watched ones",
    )
    # Run the queue migrations at start (under the queue's advisory lock). When false, the
    # operator refuses to start unless the schema is already current.
    migrate: bool = option(
        True,
        flag="--migrate",
        negative_flag="--no-migrate",
        env=_env("migrate"),
        parse=parse_bool,
        help="Apply queue migrations at start; without, refuse to start when the schema is "
        "behind (see Schema).",
        switch=True,
    )
    # PostgreSQL often starts beside the operator (the chart's own database, a fresh
    # namespace): waiting in-process starts the operator as soon as it answers, where exiting
    # would cost the kubelet's restart back-off (10 s, 20 s, 40 s ...). Below the liveness
    # probe's 60 s, which only begins to answer once the operator runs.
    database_wait_seconds: int = option(
        45,
        flag="--database-wait-seconds",
        env=_env("database_wait_seconds"),
        parse=parse_non_negative_int,
        help="How long to wait at start for PostgreSQL to answer before exiting with code 3 "
        "(0 = do not wait).",
    )
    # Port of the liveness endpoint (kopf's /healthz); 0 disables it.
    liveness_port: int = option(
        8081,
        flag="--liveness-port",
        env=_env("liveness_port"),
        parse=parse_int,
        help="Port of kopf's /healthz (0 = off).",
    )
    # Port of the Prometheus /metrics endpoint; 0 disables it.
    metrics_port: int = option(
        9102,
        flag="--metrics-port",
        env=_env("metrics_port"),
        parse=parse_int,
        help="Port of /metrics (0 = off).",
    )
    # Bind address of both endpoints.
    listen_host: str = option(
        "0.0.0.0",
        flag="--listen-host",
        env=_env("listen_host"),
        parse=str,
        help="Address both endpoints bind to.",
    )
    autoscaler_enabled: bool = option(
        True,
        negative_flag="--no-autoscaler",
        env=_env("autoscaler_enabled"),
        parse=parse_bool,
        help="Scale worker Deployments (--no-autoscaler: leave them alone).",
        switch=True,
    )
    # Completions send no NOTIFY (that would serialise workers' commits), so the sync also asks
    # every second which owners' rows changed: one indexed query.
    status_poll_seconds: float = option(
        1.0,
        env=_env("status_poll_seconds"),
        parse=parse_float,
        help="How often the status task asks which jobs' rows changed.",
    )
    # The status sync wakes on NOTIFY at once; this sweep catches anything a lost notification
    # (reconnect, a producer without NOTIFY) missed.
    status_sweep_seconds: float = option(
        30.0,
        env=_env("status_sweep_seconds"),
        parse=parse_float,
        help="Full sweep of unfinished jobs.",
    )
    # Debounce: collect notifications for this long so a burst of row changes costs one query.
    status_debounce_seconds: float = option(
        0.5,
        env=_env("status_debounce_seconds"),
        parse=parse_float,
        help="Gather a burst of NOTIFYs into one round.",
    )
    # At most one status PATCH per unfinished ScrapeJob per this interval, counted from its
    # creation or, if later, from when the status sync first saw its rows (finished phases are
    # written at once). A job done within it costs one status write in all; a 100k-URL job's
    # ever-changing counts cost one write per interval.
    status_min_interval_seconds: float = option(
        3.0,
        env=_env("status_min_interval_seconds"),
        parse=parse_float,
        help="Least time between status writes of an unfinished job, from its rows' arrival.",
    )
    # The progress of at most this many ScrapeJobs is read per query, so that a round over
    # thousands of jobs holds a connection for short reads only.
    status_batch_size: int = option(
        200,
        env=_env("status_batch_size"),
        parse=parse_int,
        help="Jobs whose progress one query reads.",
    )
    # Status PATCH requests on the wire at once (each waits on the API server, not on us), the
    # same bound however many rounds queued them: it keeps a burst of finished jobs from
    # flooding the API server.
    status_patch_concurrency: int = option(
        16,
        env=_env("status_patch_concurrency"),
        parse=parse_int,
        help="Concurrent status PATCHes (finished jobs first).",
    )
    # The autoscaler's loop period; the goal is a reaction under 5 s (KEDA polls every 30 s).
    autoscaler_interval_seconds: float = option(
        2.0,
        env=_env("autoscaler_interval_seconds"),
        parse=parse_float,
        help="Autoscaler period.",
    )
    autoscaler: AutoscalerDefaults = field(default_factory=AutoscalerDefaults)
    # A queue with due rows and no worker pool is reported (Stalled condition, Event, log)
    # once that has lasted this long: a pool created together with the first ScrapeJob (one
    # `helm install`) appears within it and is never reported.
    unserved_queue_grace_seconds: float = option(
        30.0,
        env=_env("unserved_queue_grace_seconds"),
        parse=parse_float,
        help="How long a queue has due rows and no worker pool before its ScrapeJobs are "
        "marked Stalled (a pool installed with the first job is not reported).",
    )
    # Delay before retrying a handler whose database call failed (the finalizer stays).
    database_retry_seconds: float = option(
        5.0,
        env=_env("database_retry_seconds"),
        parse=parse_float,
        help="Retry delay of a handler that hit a database error.",
    )
    # How long a handler or loop waits for a pooled connection before it treats PostgreSQL as
    # unavailable (Events, the autoscaler's hold, kopf's retry). A refused connection is only
    # reported after this wait, so it is also how long an outage takes to be noticed; the
    # pool's default of 30 s would hold a handler slot that long. Raise it for a database
    # whose connections are slow to set up (far away, TLS through a proxy).
    database_timeout_seconds: float = option(
        5.0,
        env=_env("database_timeout_seconds"),
        parse=parse_positive_float,
        help="How long a handler waits for a database connection before treating PostgreSQL "
        "as unavailable.",
    )
    # Delay before re-checking a ScrapeJob that cannot run yet (missing ConfigMap).
    not_ready_retry_seconds: float = option(
        30.0,
        env=_env("not_ready_retry_seconds"),
        parse=parse_float,
        help="Re-check delay of a job that cannot run.",
    )
    # How often the QueuePolicies' caps on rows in flight per namespace are written to the
    # queue (namespace_caps.py): a changed cap holds for new claims within this long.
    queue_policy_sync_seconds: float = option(
        10.0,
        env=_env("queue_policy_sync_seconds"),
        parse=parse_float,
        help="How often the QueuePolicies' namespace caps are written to the queue.",
    )
    # Delay before re-checking a ScrapeJob blocked by spec.dependsOn (how soon it starts after
    # its last dependency succeeded).
    dependency_poll_seconds: float = option(
        5.0,
        env=_env("dependency_poll_seconds"),
        parse=parse_float,
        help="Re-check delay of a job blocked by dependsOn / urlsFrom.scrapeJob (one API "
        "write per check).",
    )
    # Most URLs read from one urlsFrom ConfigMap key (a ConfigMap holds at most 1 MiB).
    max_urls_per_job: int = option(
        200_000,
        env=_env("max_urls_per_job"),
        parse=parse_int,
        help="Largest urlsFrom list.",
    )
    # How often each scheduled ScrapeJob (spec.schedule) checks whether a run is due: the
    # lateness of a run at worst, and the shortest useful @every (5 s, its minimum).
    schedule_check_seconds: float = option(
        5.0,
        env=_env("schedule_check_seconds"),
        parse=parse_float,
        help="How often each scheduled ScrapeJob checks whether a run is due.",
    )
    # Retention (see retention.py): how often finished rows are pruned; 0 turns it off. Hourly
    # keeps each prune small (a few batches) without letting the table grow for long.
    prune_interval_seconds: float = option(
        3600.0,
        env=_env("prune_interval_seconds"),
        parse=parse_float,
        help="Retention period (0 = never prune); see Retention.",
    )
    # Completed and cancelled rows of ScrapeJobs that set no retention of their own are deleted
    # this many days after they finished: long enough to export results and investigate a job
    # from the past week. Rows of SQL producers are not concerned (docs/queue.md, "Retention").
    retain_completed_days: float = option(
        7.0,
        env=_env("retain_completed_days"),
        parse=parse_float,
        help="Completed and cancelled rows of ScrapeJobs without spec.retention are deleted "
        "this long after they finished.",
    )
    # Failed rows of ScrapeJobs that set no retention of their own are a dead-letter queue: the
    # newest this many per queue are kept for
    # `scrapeq jobs failed` and `scrapeq retry`, older ones deleted; 0 keeps every failed row.
    retain_failed_last: int = option(
        10_000,
        env=_env("retain_failed_last"),
        parse=parse_int,
        help="Failed rows kept per queue, newest first (0 = keep every failed row).",
    )
    # The politeness state of a site (its limits, pause, robots.txt's Crawl-delay) is deleted
    # once it has had nothing pending or in flight and no claim for this many days; 0 keeps
    # every site's. Above a day, the time workers keep a robots.txt, so a pruned Crawl-delay is
    # always read again before the site's next request.
    retain_idle_sites_days: float = option(
        7.0,
        env=_env("retain_idle_sites_days"),
        renamed_from=(_env("retain_idle_hosts_days"),),
        parse=parse_float,
        help="A site's politeness state is deleted after this many days idle (0 = keep every "
        "site's).",
    )
    # A recurring crawl's memory of a URL (its validators and hashes, docs/queue.md "Crawl
    # memory") is deleted once no run fetched the URL for this many days; 0 keeps it until its
    # schedule is deleted. Three months outlasts any schedule that still runs.
    retain_crawl_memory_days: float = option(
        90.0,
        env=_env("retain_crawl_memory_days"),
        parse=parse_float,
        help="A crawl's memory of a URL is deleted after this many days without a fetch (0 = "
        "keep it until its schedule is deleted).",
    )
    # Webhooks (webhook_delivery.py, docs/webhooks.md). An endpoint whose host resolves into a
    # loopback, private, link-local or cluster network is refused unless it lies inside one of
    # these networks: none by default, as the worker's SCRAPEQ_ALLOW_NETWORKS; tests and a demo
    # that receive on localhost allow 127.0.0.0/8 explicitly.
    webhook_allow_networks: tuple[IPNetwork, ...] = option(
        (),
        env=_env("webhook_allow_networks"),
        parse=parse_networks,
        help="CIDRs a webhook endpoint may resolve into although private, comma-separated.",
        shown_default="none",
    )
    # How often the delivery loop looks for due events when nothing woke it: the lateness of a
    # retry at worst (a ScrapeJob reaching its phase wakes it at once).
    webhook_poll_seconds: float = option(
        5.0,
        env=_env("webhook_poll_seconds"),
        parse=parse_positive_float,
        help="How often the webhook delivery loop looks for due events.",
    )
    # One POST, connection included. A receiver should answer at once and work afterwards;
    # 10 s is what GitHub gives its webhook receivers.
    webhook_timeout_seconds: float = option(
        10.0,
        env=_env("webhook_timeout_seconds"),
        parse=parse_positive_float,
        help="Time limit of one webhook POST, connecting included.",
    )
    # The first retry's delay; each further one doubles, up to the maximum, with jitter.
    webhook_retry_base_seconds: float = option(
        5.0,
        env=_env("webhook_retry_base_seconds"),
        parse=parse_positive_float,
        help="Delay before a failed webhook event's first retry (doubling after each).",
    )
    # Five minutes between tries at most: a receiver back from an outage hears within that.
    webhook_retry_max_seconds: float = option(
        300.0,
        env=_env("webhook_retry_max_seconds"),
        parse=parse_positive_float,
        help="Longest delay between two tries of a webhook event.",
    )
    # A day covers a receiver's weekend-night outage; an event older than that is news nobody
    # acts on, and the ScrapeJob's status still says what happened.
    webhook_max_age_seconds: float = option(
        86_400.0,
        env=_env("webhook_max_age_seconds"),
        parse=parse_positive_float,
        help="How long a webhook event is retried before it is given up (WebhookUndelivered).",
    )
    # Object-storage output (output_uploader.py, docs/operator.md "Output to object storage"):
    # the same bucket settings as the workers' (and the same environment variables, so one
    # chart value serves both). Credentials are never options: the S3 client reads
    # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the chart fills them from the workers' Secret)
    # and otherwise its default chain (a web identity token as IRSA mounts it, instance
    # metadata). Without a bucket, ScrapeJobs with spec.output wait with Ready=False NoObjectStore.
    object_store_bucket: str | None = option(
        None,
        env="SCRAPEQ_OBJECT_STORE_BUCKET",
        parse=parse_bucket_name,
        help="S3 bucket the output of ScrapeJobs with spec.output is written to (unset: none).",
        shown_default="none",
    )
    object_store_endpoint: str | None = option(
        None,
        env="SCRAPEQ_OBJECT_STORE_ENDPOINT",
        parse=parse_endpoint_url,
        help="URL of an S3-compatible endpoint; unset: AWS S3 of the region.",
        shown_default="none",
    )
    object_store_region: str | None = option(
        None,
        env="SCRAPEQ_OBJECT_STORE_REGION",
        parse=str,
        help="Region the object store signs requests for (unset: AWS_REGION, else us-east-1).",
        shown_default="none",
    )
    # The workers' prefix too: one bucket holds artifacts and outputs under one folder.
    object_store_prefix: str = option(
        "scrapeq",
        env="SCRAPEQ_OBJECT_STORE_PREFIX",
        parse=lambda text: text.strip("/"),
        help="Key prefix of every object; outputs go to <prefix>/<output prefix>/...",
    )
    object_store_path_style: bool = option(
        False,
        env="SCRAPEQ_OBJECT_STORE_PATH_STYLE",
        parse=parse_bool,
        help="Address the bucket as ENDPOINT/BUCKET/KEY instead of BUCKET.ENDPOINT/KEY.",
    )
    # How often the uploader looks at outputs: with a job's batchSeconds, the longest a
    # finished row waits before its batch is cut.
    output_poll_seconds: float = option(
        1.0,
        env=_env("output_poll_seconds"),
        parse=parse_positive_float,
        help="How often the output uploader looks for rows to put into batches.",
    )
    # A store that fails is tried again after this, doubling up to the maximum: an outage of
    # minutes is caught up within a minute of its end.
    output_retry_base_seconds: float = option(
        2.0,
        env=_env("output_retry_base_seconds"),
        parse=parse_positive_float,
        help="Delay before an output's upload is tried again after a failure (doubling).",
    )
    output_retry_max_seconds: float = option(
        60.0,
        env=_env("output_retry_max_seconds"),
        parse=parse_positive_float,
        help="Longest delay between two tries of an output's upload.",
    )
    # The pool's default spec.output (chart: operator.outputDefault), as JSON: a ScrapeJob
    # without spec.output gets this one; spec.output fields win, `enabled: false` opts out.
    output_default: dict[str, Any] | None = option(  # noqa: RUF009 - a field declaration, not a shared default
        None,
        env=_env("output_default"),
        parse=parse_output_default,
        help="JSON object: the spec.output of ScrapeJobs that have none (unset: no default).",
        shown_default="none",
    )
    # The key ring that seals spec.credentials into rows, shared with the workers; without it
    # ScrapeJobs with credentials wait with Ready=False NoSealingKey.
    sealing_keys: SealingKeys | None = option(  # noqa: RUF009 - a field declaration, not a shared default
        None,
        env="SCRAPEQ_SEALING_KEY",
        parse=parse_sealing_keys,
        help="Comma-separated base64 AES-256 keys, newest first, that seal spec.credentials.",
        shown_default="none",
    )

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def worker_pool_namespaces(self) -> tuple[str, ...]:
        """Where the autoscaler lists worker Deployments (empty: every namespace)."""
        return self.pool_namespaces or self.namespaces

    @classmethod
    def read(
        cls,
        flags: argparse.Namespace | Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        validate: bool = True,
    ) -> OperatorSettings:
        """Flags (from a parser that `add_arguments` set up), then `SCRAPEQ_OPERATOR_*`
        variables (DATABASE_URL as a fallback), then the defaults. A value that does not parse
        raises ConfigurationError naming its flag or variable; so does, unless `validate` is
        false, a combination that cannot work."""
        settings = options.read_settings(
            cls, flags, os.environ if environ is None else environ, error=ConfigurationError
        )
        if validate:
            settings.validate()
        return settings

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, validate: bool = True
    ) -> OperatorSettings:
        """Settings from the environment alone (see `read`)."""
        return cls.read(None, environ, validate=validate)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """One flag per option that has one (see docs/operator.md)."""
        options.add_arguments(parser, OperatorSettings)

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
            "queue policy sync interval": self.queue_policy_sync_seconds,
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
            "idle-site retention (SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS)": (
                self.retain_idle_sites_days
            ),
            "crawl memory retention (SCRAPEQ_OPERATOR_RETAIN_CRAWL_MEMORY_DAYS)": (
                self.retain_crawl_memory_days
            ),
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
