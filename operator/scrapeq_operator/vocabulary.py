"""The operator's API vocabulary: the group, version and resource of ScrapeJob, and every
finalizer, label and annotation name it reads or writes on Kubernetes objects."""

from __future__ import annotations

# The API group every scrapeq resource, label and annotation lives under.
GROUP = "scrapeq.io"
VERSION = "v1alpha1"
PLURAL = "scrapejobs"
# The cluster-scoped SitePolicy (docs/operator.md, "Site policies").
SITE_POLICY_PLURAL = "sitepolicies"
# The cluster-scoped QueuePolicy (queue_access.py): which namespaces may use which queues.
QUEUE_POLICY_PLURAL = "queuepolicies"

# Finalizer that keeps a deleted ScrapeJob until its rows are cancelled in PostgreSQL.
FINALIZER = f"{GROUP}/cancel-rows"
# Set to "true" on a ScrapeJob to let it go even though its rows could not be cancelled
# (for example, the database is gone for good). Rows may then be scraped after deletion.
FORCE_DELETE_ANNOTATION = f"{GROUP}/force-delete"
# kopf records here what it last handled (its diff base): written in kopf's own PATCH once the
# create handler has succeeded.
HANDLED_ANNOTATION_KEY = "last-handled-configuration"
HANDLED_ANNOTATION = f"{GROUP}/{HANDLED_ANNOTATION_KEY}"
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
# The pool's per-site limit for rows that set none (its workers' --max-concurrent-per-site).
MAX_CONCURRENT_PER_SITE_ANNOTATION = f"{GROUP}/max-concurrent-per-site"
# The pool's per-site delay for rows that set none (its workers' --site-delay-seconds).
SITE_DELAY_SECONDS_ANNOTATION = f"{GROUP}/site-delay-seconds"
# Their names before 0.1.0, refused with the name now rather than silently ignored.
RENAMED_ANNOTATIONS = {
    f"{GROUP}/max-concurrent-per-host": MAX_CONCURRENT_PER_SITE_ANNOTATION,
    f"{GROUP}/host-delay-seconds": SITE_DELAY_SECONDS_ANNOTATION,
}
# Where the autoscaler records its last decision (JSON) on the Deployment.
DECISION_ANNOTATION = f"{GROUP}/autoscaler-decision"
POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
