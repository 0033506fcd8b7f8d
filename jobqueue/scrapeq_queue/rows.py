"""Frozen records that cross the queue package boundary: jobs, owners, progress and statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from scrapeq_queue.crawl_memory import PageMemory, PageWrite


@dataclass(frozen=True)
class Owner:
    """The ScrapeJob a row belongs to: its uid (the dedup scope) and namespace/name."""

    uid: str
    namespace: str
    name: str


class RowOptions(TypedDict, total=False):
    """What every row of one enqueue call carries besides its URL. A key left out takes the
    queue's default (producers.DEFAULT_*); a NewJob may still set its own parser_type, payload
    and priority."""

    parser_type: str
    payload: dict[str, Any] | None
    queue: str
    priority: int
    max_retries: int
    backoff_seconds: float
    # How long retention keeps the rows once finished (column retain_for; docs/queue.md,
    # "Retention"); None: a ScrapeJob's rows follow the operator's retention, others stay.
    retain_for: timedelta | None
    # NOTIFY scrapeq_finished when each row finishes (docs/queue.md, "Signals for SQL producers").
    notify_finished: bool


@dataclass(frozen=True)
class ClaimedJob:
    """A row a worker holds: (id, attempt) is the fencing token every later write must present."""

    id: int
    attempt: int
    url: str
    parser_type: str
    payload: dict[str, Any]
    queue: str
    priority: int
    retry_count: int
    max_retries: int
    depth: int
    parent_id: int | None
    owner_uid: str | None
    owner_namespace: str | None
    owner_name: str | None
    run_at: datetime
    claimed_at: datetime
    lease_expires_at: datetime
    # The politeness key of the row's host (hosts.host_key_of); None only for rows claimed
    # before the host columns existed.
    host_key: str | None = None
    # What the row's crawl remembers of its URL, read by the claim itself for a row whose
    # payload names a `crawlKey` (docs/queue.md, "Crawl memory"); None when the crawl never
    # fetched the URL, and for rows without a crawl key.
    memory: PageMemory | None = None
    # The claim checked the payload's options (claim_jobs with reject_invalid_payloads): a
    # worker need not check them again before it reads them.
    options_checked: bool = False

    @property
    def token(self) -> tuple[int, int]:
        """(id, attempt), the pair renew_leases and release_jobs take."""
        return (self.id, self.attempt)


@dataclass(frozen=True)
class FollowUrl:
    """A link found on a page, to enqueue as a child row when its parent completes.

    `payload`/`parser_type` default to the parent's. A `next_page` row is the next page of
    the parent's pagination chain: it has the parent's depth (a chain does not go deeper) and
    the owner's follow limit does not count it (the chain has its own cap, payload `next`).
    """

    url: str
    payload: dict[str, Any] | None = None
    parser_type: str | None = None
    next_page: bool = False


@dataclass(frozen=True)
class NewJob:
    """One row for enqueue_many when rows differ in more than their URL (unset = the defaults)."""

    url: str
    payload: dict[str, Any] | None = None
    parser_type: str | None = None
    priority: int | None = None
    dedup_key: str | None = None


@dataclass(frozen=True)
class Completion:
    """A successful attempt, for complete_many (batched completions)."""

    job_id: int
    attempt: int
    result: dict[str, Any]
    duration_seconds: float
    # A row with a crawl key: what its crawl remembers of the fetch, written in the
    # completion's transaction when the completion is current (docs/queue.md, "Crawl memory").
    memory: PageWrite | None = None


@dataclass(frozen=True)
class ResultPreview:
    """One recent result of an owner, small enough to show in a ScrapeJob status."""

    job_id: int
    url: str
    result: Any
    finished_at: datetime


@dataclass(frozen=True)
class OwnerProgress:
    """Row counts of one owner by state, with the latest error and a few recent results.

    `pending` counts rows never attempted or released; `retrying` counts pending rows that
    already failed at least once; `blocked` counts the pages the site blocked on a session of
    the pool (docs/queue.md, "Sessions"), each retried on another session or, after the
    row's last, failed.
    """

    total: int = 0
    pending: int = 0
    retrying: int = 0
    processing: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    blocked: int = 0
    last_error: str | None = None
    last_error_url: str | None = None
    first_started_at: datetime | None = None
    last_finished_at: datetime | None = None
    preview: tuple[ResultPreview, ...] = field(default=())
    # Completed rows with a crawl key (payload crawlKey): results that changed, that did not
    # (a 304, an equal result, or skipped), fetched from a site that sent no validators, and
    # skipped without a request (recrawlAfterSeconds; counted in `unchanged` too).
    changed: int = 0
    unchanged: int = 0
    without_validators: int = 0
    skipped: int = 0
    # Source rows (a sitemap, a URL list) not finished yet: until their expansions end, more
    # rows may come, so `total` is the number of rows so far, not the job's size.
    expanding: int = 0

    @property
    def finished(self) -> bool:
        """True when every row reached a final state (and there is at least one row)."""
        return self.total > 0 and self.succeeded + self.failed + self.cancelled == self.total


@dataclass(frozen=True)
class QueueBacklog:
    """Work waiting in one queue, as the autoscaler sees it."""

    due_pending: int
    delayed_pending: int
    processing: int
    oldest_due_age_seconds: float | None
    # The due rows per-site politeness lets start now: per host at most its limit less its
    # attempts in flight, none while it is paused (None: not counted).
    startable_due: int | None = None

    @property
    def startable(self) -> int:
        """The due rows that may start now (all of them when not counted per host)."""
        return self.due_pending if self.startable_due is None else self.startable_due


@dataclass(frozen=True)
class QueueStats:
    """Live backlog of one queue plus how many jobs it ever finished per outcome."""

    queue: str
    due_pending: int = 0
    delayed_pending: int = 0
    processing: int = 0
    completed_total: int = 0
    failed_total: int = 0
    cancelled_total: int = 0
    oldest_due_age_seconds: float | None = None


@dataclass(frozen=True)
class FailedJob:
    """A row that failed for good, for `scrapeq jobs`."""

    id: int
    queue: str
    url: str
    retry_count: int
    reason: str | None
    error: str | None
    finished_at: datetime

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> FailedJob:
        """From a row of id, queue, url_to_scrape, retry_count, last_error_reason, last_error,
        finished_at (the column order of every failed-rows query)."""
        return cls(
            id=row[0],
            queue=row[1],
            url=row[2],
            retry_count=row[3],
            reason=row[4],
            error=row[5],
            finished_at=row[6],
        )


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job, from scrapeq_attempts."""

    job_id: int
    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    reason: str | None
    error: str | None
    duration_seconds: float | None


@dataclass(frozen=True)
class ExportRow:
    """One completed page for `scrapeq export`: its URL, job status, when it finished, and the
    extracted fields (the result's `fields` object, or the whole result when it is a flat
    object without one)."""

    url: str
    status: str
    finished_at: datetime
    fields: dict[str, Any]


@dataclass(frozen=True)
class SiteState:
    """One site's politeness state, as the claim sees it (`host_key` is the site)."""

    host_key: str
    in_flight: int  # attempts handed out and still running
    max_in_flight: int | None  # its site policy's limit (None: the claiming pool's default)
    delay_seconds: float | None  # its site policy's delay (None: the claiming pool's default)
    crawl_delay_seconds: float
    next_allowed_at: datetime
    paused_until: datetime | None
    pause_reason: str | None
    # Server errors among the site's recent responses (its window, when not too old).
    recent_server_errors: int
    # Times in a row its server-error breaker tripped (0: closed).
    breaker_trips: int
    # Where its policy makes the limit adaptive (docs/queue.md, "Adaptive concurrency"): the
    # limit it may grow to, the limit reached (max_in_flight is its whole part) and the latency
    # it follows; None where the limit does not adapt.
    adaptive_ceiling: int | None = None
    adaptive_limit: float | None = None
    latency_seconds: float | None = None
