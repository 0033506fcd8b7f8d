"""The queue contract: the scraping_jobs table and every SQL statement that touches it.

Producers (the operator, `scrapeq enqueue`, any application doing a plain INSERT) add rows;
workers claim them in batches with SKIP LOCKED, hold them under a renewable lease, and finish
them fenced by attempt number. All functions take an autocommit `psycopg.AsyncConnection` and
run one short transaction each; database failures surface as `DatabaseUnavailable`, an
unmigrated database as `SchemaOutOfDate`. See docs/queue.md.
"""

from scrapeq_queue.claims import (
    INVALID_PAYLOAD_REASON,
    JITTER_RANGE,
    MAX_RETRY_DELAY_SECONDS,
    RetryOutcome,
    backoff_delay_seconds,
    claim_jobs,
    complete_job,
    complete_many,
    fail_job,
    release_jobs,
    renew_leases,
    rescue_expired_leases,
    retry_job,
)
from scrapeq_queue.connections import RECONNECT_MAX_SECONDS, connect, reconnect_delay
from scrapeq_queue.dead_jobs import failed_jobs, retry_failed
from scrapeq_queue.errors import DatabaseUnavailable, InvalidJob, QueueError, SchemaOutOfDate
from scrapeq_queue.exports import (
    CSV_HEADER_SAMPLE_ROWS,
    EXPORT_FORMATS,
    NamedOwner,
    export_results,
    owners_named,
    result_fields,
    write_csv,
    write_jsonl,
)
from scrapeq_queue.hosts import host_key_of
from scrapeq_queue.inspection import (
    busy_workers,
    database_now,
    host_states,
    job_attempts,
    latest_failures,
    owner_progress,
    owners_changed_since,
    queue_backlog,
    queue_stats,
)
from scrapeq_queue.maintenance import prune_finished
from scrapeq_queue.migrations import (
    SCHEMA_VERSION,
    applied_versions,
    migrate,
    require_current_schema,
    schema_is_current,
)
from scrapeq_queue.notifications import (
    NOTIFY_CHANNEL,
    listen,
    listen_and_wake,
    wait_for_notification,
)
from scrapeq_queue.payload import PAYLOAD_OPTIONS, validate_payload
from scrapeq_queue.politeness import (
    DEFAULT_POLITENESS,
    NO_HOST_LIMIT,
    HostPoliteness,
    set_crawl_delay,
)
from scrapeq_queue.producers import (
    cancel_jobs,
    cancel_owner,
    delete_owner_rows,
    enqueue,
    enqueue_for_owner,
    enqueue_many,
)
from scrapeq_queue.rows import (
    AttemptRecord,
    ClaimedJob,
    Completion,
    ExportRow,
    FailedJob,
    FollowUrl,
    HostState,
    NewJob,
    Owner,
    OwnerProgress,
    QueueBacklog,
    QueueStats,
    ResultPreview,
    RowOptions,
)
from scrapeq_queue.urls import normalise_url

__all__ = [
    "CSV_HEADER_SAMPLE_ROWS",
    "DEFAULT_POLITENESS",
    "EXPORT_FORMATS",
    "INVALID_PAYLOAD_REASON",
    "JITTER_RANGE",
    "MAX_RETRY_DELAY_SECONDS",
    "NOTIFY_CHANNEL",
    "NO_HOST_LIMIT",
    "PAYLOAD_OPTIONS",
    "RECONNECT_MAX_SECONDS",
    "SCHEMA_VERSION",
    "AttemptRecord",
    "ClaimedJob",
    "Completion",
    "DatabaseUnavailable",
    "ExportRow",
    "FailedJob",
    "FollowUrl",
    "HostPoliteness",
    "HostState",
    "InvalidJob",
    "NamedOwner",
    "NewJob",
    "Owner",
    "OwnerProgress",
    "QueueBacklog",
    "QueueError",
    "QueueStats",
    "ResultPreview",
    "RetryOutcome",
    "RowOptions",
    "SchemaOutOfDate",
    "applied_versions",
    "backoff_delay_seconds",
    "busy_workers",
    "cancel_jobs",
    "cancel_owner",
    "claim_jobs",
    "complete_job",
    "complete_many",
    "connect",
    "database_now",
    "delete_owner_rows",
    "enqueue",
    "enqueue_for_owner",
    "enqueue_many",
    "export_results",
    "fail_job",
    "failed_jobs",
    "host_key_of",
    "host_states",
    "job_attempts",
    "latest_failures",
    "listen",
    "listen_and_wake",
    "migrate",
    "normalise_url",
    "owner_progress",
    "owners_changed_since",
    "owners_named",
    "prune_finished",
    "queue_backlog",
    "queue_stats",
    "reconnect_delay",
    "release_jobs",
    "renew_leases",
    "require_current_schema",
    "rescue_expired_leases",
    "result_fields",
    "retry_failed",
    "retry_job",
    "schema_is_current",
    "set_crawl_delay",
    "validate_payload",
    "wait_for_notification",
    "write_csv",
    "write_jsonl",
]
