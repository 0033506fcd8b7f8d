"""The operator's Prometheus metrics, served on /metrics.

Labels are low-cardinality on purpose: a queue name, a worker pool's namespace and deployment
(the labels kube-state-metrics gives a Deployment, so the two join `on (namespace, deployment)`),
a state, an outcome or a component — never a URL or a ScrapeJob. A "job" in a name is one row
of the queue table (one URL to scrape), as in the worker's metrics; a ScrapeJob is many.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

QUEUE_BACKLOG_JOBS = Gauge(
    "scrapeq_operator_queue_backlog_jobs",
    "Live rows of a queue by state; the states do not overlap, so their sum is every live "
    "row: startable (due, and its site's limit and delay let it start now), throttled (due, "
    "held back by its site's limit or delay), delayed (pending, waiting for run_at) and "
    "processing. Due rows are startable + throttled.",
    ["queue", "state"],
    registry=REGISTRY,
)
QUEUE_OLDEST_DUE_AGE_SECONDS = Gauge(
    "scrapeq_operator_queue_oldest_due_age_seconds",
    "How long the oldest due row of a queue has been waiting to be claimed (0 when none).",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_WORKER_POOLS = Gauge(
    "scrapeq_operator_queue_worker_pools",
    "Worker pools (Deployments labelled scrapeq.io/worker-pool) serving a queue, for every queue "
    "with live rows or a pool; 0 means its rows wait for a pool that does not exist.",
    ["queue"],
    registry=REGISTRY,
)
POOL_DESIRED_REPLICAS = Gauge(
    "scrapeq_operator_pool_desired_replicas",
    "Replicas the autoscaler wants for a worker pool (its Deployment).",
    ["namespace", "deployment"],
    registry=REGISTRY,
)
POOL_CURRENT_REPLICAS = Gauge(
    "scrapeq_operator_pool_current_replicas",
    "Replicas a worker pool's Deployment asked for when the autoscaler last looked.",
    ["namespace", "deployment"],
    registry=REGISTRY,
)
POOL_MAX_REPLICAS = Gauge(
    "scrapeq_operator_pool_max_replicas",
    "The most replicas a worker pool may have (its policy); alerts compare it with current.",
    ["namespace", "deployment"],
    registry=REGISTRY,
)
SCALING_DECISIONS_TOTAL = Counter(
    "scrapeq_operator_scaling_decisions_total",
    "Autoscaler decisions that changed or held a pool's replicas, by reason.",
    ["reason"],
    registry=REGISTRY,
)
RECONCILE_ERRORS_TOTAL = Counter(
    "scrapeq_operator_reconcile_errors_total",
    "Failed rounds or handler runs, by component (enqueue, cancel, status_sync, autoscaler, "
    "retention, retry_failed, schedule, webhooks, site_policy, namespace_caps).",
    ["component"],
    registry=REGISTRY,
)
STATUS_PATCHES_TOTAL = Counter(
    "scrapeq_operator_status_patches_total",
    "ScrapeJob status PATCH requests by outcome (applied, conflict, gone, error).",
    ["outcome"],
    registry=REGISTRY,
)
JOBS_ENQUEUED_TOTAL = Counter(
    "scrapeq_operator_jobs_enqueued_total",
    "Rows the operator inserted for ScrapeJobs (rows that already existed are not counted).",
    registry=REGISTRY,
)
RETENTION_PRUNED_JOBS_TOTAL = Counter(
    "scrapeq_operator_retention_pruned_jobs_total",
    "Finished rows (with their attempts) the periodic retention deleted from the queue table.",
    registry=REGISTRY,
)
RETENTION_PRUNED_SITES_TOTAL = Counter(
    "scrapeq_operator_retention_pruned_sites_total",
    "Sites whose politeness state (a row of scrapeq_hosts) the periodic retention deleted after "
    "they were idle for long.",
    registry=REGISTRY,
)

RETENTION_PRUNED_CRAWL_MEMORY_TOTAL = Counter(
    "scrapeq_operator_retention_pruned_crawl_memory_total",
    "URLs whose crawl memory (a row of scrapeq_crawl_memory) the periodic retention deleted "
    "after no run fetched them for long.",
    registry=REGISTRY,
)

WEBHOOK_EVENTS_RECORDED_TOTAL = Counter(
    "scrapeq_operator_webhook_events_recorded_total",
    "Webhook events written to the outbox (events already there are not counted).",
    registry=REGISTRY,
)
WEBHOOK_DELIVERIES_TOTAL = Counter(
    "scrapeq_operator_webhook_deliveries_total",
    "Webhook delivery attempts by outcome (delivered, retry, refused, dead).",
    ["outcome"],
    registry=REGISTRY,
)

OUTPUT_BATCHES_TOTAL = Counter(
    "scrapeq_operator_output_batches_total",
    "Output batch uploads by outcome: uploaded (a batch's object is in the bucket and its rows "
    "delivered) or failed (the store did not take it; the batch is tried again).",
    ["outcome"],
    registry=REGISTRY,
)
OUTPUT_ROWS_DELIVERED_TOTAL = Counter(
    "scrapeq_operator_output_rows_delivered_total",
    "Finished rows put into an uploaded output batch (each row once).",
    registry=REGISTRY,
)
OUTPUT_MANIFESTS_TOTAL = Counter(
    "scrapeq_operator_output_manifests_total",
    "Output manifests written (one per ScrapeJob with spec.output, after its last batch).",
    registry=REGISTRY,
)
OUTPUT_FAILING = Gauge(
    "scrapeq_operator_output_failing_outputs",
    "ScrapeJob outputs whose last upload failed (the store unreachable or refusing).",
    registry=REGISTRY,
)
OUTPUT_DELIVERY_LAG_SECONDS = Histogram(
    "scrapeq_operator_output_delivery_lag_seconds",
    "From a batch being cut to its object being in the bucket and its rows delivered.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)


def serve_metrics(host: str, port: int) -> None:
    """Serve /metrics on a background thread (a no-op for port 0)."""
    if port:
        start_http_server(port, addr=host, registry=REGISTRY)
