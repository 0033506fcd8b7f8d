"""The Grafana dashboard, built from code so every panel's query is one reviewed string.

`python -m scripts.generate` writes it to deploy/grafana/scrapeq-dashboard.json (and the
chart's copy); tests run every query against a real Prometheus that scraped a real worker and
operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Grafana substitutes these; PANEL_VARIABLES gives the values a test uses to run the queries
# against Prometheus directly.
# The namespace label comes from Prometheus' Kubernetes discovery (ServiceMonitor); `=~".*"`
# also matches series without it, as in a plain scrape.
NAMESPACE_FILTER = 'namespace=~"$namespace"'
QUEUE_FILTER = f'queue=~"$queue", {NAMESPACE_FILTER}'
RATE_WINDOW = "$__rate_interval"
PANEL_VARIABLES = {"$queue": ".*", "$namespace": ".*", "$__rate_interval": "1m"}


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[tuple[str, str], ...]  # (legend, PromQL)
    unit: str = "short"
    kind: str = "timeseries"


PANELS = (
    Panel(
        "Backlog by queue and state",
        "Live jobs per queue by state: startable now, throttled (due, held back by their site's "
        "limit or delay), delayed (by backoff or schedule) and processing. The states do not "
        "overlap: stacked, they are the whole backlog.",
        (("{{queue}} {{state}}", f"sum by (queue, state) (scrapeq_operator_queue_backlog_jobs{{{QUEUE_FILTER}}})"),),
    ),
    Panel(
        "Due vs delayed",
        "Pending jobs that are due (startable or throttled) against those waiting for their run_at.",
        (
            ("due", f'sum(scrapeq_operator_queue_backlog_jobs{{{QUEUE_FILTER}, state=~"startable|throttled"}})'),
            ("delayed", f'sum(scrapeq_operator_queue_backlog_jobs{{{QUEUE_FILTER}, state="delayed"}})'),
        ),
    ),
    Panel(
        "Oldest due job age",
        "How long the oldest runnable row has waited: the backlog's latency.",
        (("{{queue}}", f"max by (queue) (scrapeq_operator_queue_oldest_due_age_seconds{{{QUEUE_FILTER}}})"),),
        unit="s",
    ),
    Panel(
        "Throughput",
        "Jobs claimed, completed, retried and failed per second.",
        (
            ("claimed", f"sum(rate(scrapeq_worker_jobs_claimed_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
            ("completed", f"sum(rate(scrapeq_worker_jobs_completed_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
            ("retried", f"sum(rate(scrapeq_worker_jobs_retried_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
            ("failed", f"sum(rate(scrapeq_worker_jobs_failed_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
        ),
        unit="ops",
    ),
    Panel(
        "Job duration",
        "Time from claim to outcome, 50th and 95th percentile.",
        (
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(scrapeq_worker_job_duration_seconds_bucket{{{QUEUE_FILTER}}}[{RATE_WINDOW}])))"),
            ("p95", f"histogram_quantile(0.95, sum by (le) (rate(scrapeq_worker_job_duration_seconds_bucket{{{QUEUE_FILTER}}}[{RATE_WINDOW}])))"),
        ),
        unit="s",
    ),
    Panel(
        "Claim latency",
        "Time from a row becoming due to a worker claiming it, 50th and 95th percentile.",
        (
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(scrapeq_worker_claim_latency_seconds_bucket{{{QUEUE_FILTER}}}[{RATE_WINDOW}])))"),
            ("p95", f"histogram_quantile(0.95, sum by (le) (rate(scrapeq_worker_claim_latency_seconds_bucket{{{QUEUE_FILTER}}}[{RATE_WINDOW}])))"),
        ),
        unit="s",
    ),
    Panel(
        "Worker replicas: desired vs current",
        "What the autoscaler wants per pool against what the Deployment has; a pool's namespace is its Deployment's.",
        (
            ("desired {{namespace}}/{{deployment}}", f"sum by (namespace, deployment) (scrapeq_operator_pool_desired_replicas{{{NAMESPACE_FILTER}}})"),
            ("current {{namespace}}/{{deployment}}", f"sum by (namespace, deployment) (scrapeq_operator_pool_current_replicas{{{NAMESPACE_FILTER}}})"),
        ),
    ),
    Panel(
        "Pages in flight",
        "Pages being rendered or fetched right now, by engine.",
        (("{{engine}}", f"sum by (engine) (scrapeq_worker_pages_in_flight{{{NAMESPACE_FILTER}}})"),),
    ),
    Panel(
        "Browser restarts",
        "Chromium recycled or restarted, by reason.",
        (("{{reason}}", f"sum by (reason) (increase(scrapeq_worker_browser_restarts_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),),
    ),
    Panel(
        "Errors by reason",
        "Retries and permanent failures per second, by reason.",
        (
            ("retry {{reason}}", f"sum by (reason) (rate(scrapeq_worker_jobs_retried_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
            ("fail {{reason}}", f"sum by (reason) (rate(scrapeq_worker_jobs_failed_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
        ),
        unit="ops",
    ),
    Panel(
        "Jobs pruned by retention",
        "Finished jobs the operator's retention deleted (completed past their age, failed beyond the newest N per queue).",
        (("pruned", f"sum(increase(scrapeq_operator_retention_pruned_jobs_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),),
    ),
    Panel(
        "Output delivered",
        "Finished rows and batches the operator put into object storage per second (spec.output), "
        "and outputs whose last upload failed (the store unreachable or refusing).",
        (
            ("rows", f"sum(rate(scrapeq_operator_output_rows_delivered_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),
            ("batches", f"sum(rate(scrapeq_operator_output_batches_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),
            ("failing outputs", f"sum(scrapeq_operator_output_failing_outputs{{{NAMESPACE_FILTER}}})"),
        ),
    ),
    Panel(
        "Output delivery lag",
        "From a batch being cut to its object being in the bucket, 50th and 95th percentile.",
        (
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(scrapeq_operator_output_delivery_lag_seconds_bucket{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}])))"),
            ("p95", f"histogram_quantile(0.95, sum by (le) (rate(scrapeq_operator_output_delivery_lag_seconds_bucket{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}])))"),
        ),
        unit="s",
    ),
    Panel(
        "Blocked pages and sessions",
        "Pages the sites refused (by what recognised the block: status or marker), and pages that "
        "used a session of the pool by outcome (ok, blocked, proxy_failed).",
        (
            ("blocked by {{rule}}", f"sum by (rule) (rate(scrapeq_worker_pages_blocked_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),
            ("session {{outcome}}", f"sum by (outcome) (rate(scrapeq_worker_session_pages_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),
        ),
        unit="ops",
    ),
    Panel(
        "Sessions and proxies retired",
        "Sessions retired on a site after their blocks there, and upstream proxies retired for every worker, by proxy id (never its address).",
        (
            ("sessions {{proxy}}", f"sum by (proxy) (increase(scrapeq_worker_sessions_retired_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),
            ("proxy {{proxy}}", f"sum by (proxy) (increase(scrapeq_worker_proxies_retired_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),
        ),
    ),
    Panel(
        "Recrawl outcomes",
        "Completed pages of crawls with a memory, by what it made of them: new, changed, unchanged, not_modified (a 304) or skipped.",
        (("{{outcome}}", f"sum by (outcome) (rate(scrapeq_worker_recrawl_pages_total{{{QUEUE_FILTER}}}[{RATE_WINDOW}]))"),),
        unit="ops",
    ),
    Panel(
        "Webhook deliveries",
        "Webhook delivery attempts per second by outcome: delivered, retry, refused, dead.",
        (("{{outcome}}", f"sum by (outcome) (rate(scrapeq_operator_webhook_deliveries_total{{{NAMESPACE_FILTER}}}[{RATE_WINDOW}]))"),),
        unit="ops",
    ),
)  # fmt: skip


def build_dashboard() -> dict[str, Any]:
    """Return the dashboard as Grafana's JSON model."""
    panels = []
    for index, panel in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": panel.kind,
                "title": panel.title,
                "description": panel.description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {
                        "refId": chr(ord("A") + number),
                        "expr": expression,
                        "legendFormat": legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    }
                    for number, (legend, expression) in enumerate(panel.queries)
                ],
            }
        )
    return {
        "uid": "scrapeq-overview",
        "title": "scrapeq",
        "description": "Backlog, throughput, latency and scaling of scrapeq queues and workers.",
        "tags": ["scrapeq"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                },
                {
                    "name": "namespace",
                    "type": "query",
                    "label": "Namespace",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": "label_values(scrapeq_operator_queue_backlog_jobs, namespace)",
                        "refId": "namespaces",
                    },
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
                {
                    "name": "queue",
                    "type": "query",
                    "label": "Queue",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": 'label_values(scrapeq_operator_queue_backlog_jobs{namespace=~"$namespace"}, queue)',
                        "refId": "queues",
                    },
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }
