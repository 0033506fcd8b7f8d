"""What a ScrapeJob's status says, decided from its rows' counts: pure functions, no I/O.

The status sync feeds these with the queue's per-owner progress and patches only the keys that
changed, so every rule about phases, conditions and what "done" means lives here and is
unit-tested without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, Protocol

from scrapeq_operator.queue_coverage import (
    NO_WORKER_POOL_REASON,
    STALLED_CONDITION,
    no_pool_message,
)

# Status must stay small (etcd objects are capped near 1.5 MB, and every watcher receives the
# whole object): a few results, each cut short.
PREVIEW_ITEMS = 3
PREVIEW_RESULT_CHARS = 200
LAST_ERROR_CHARS = 1024

# Reason of the Ready condition once the job's rows are in the queue.
ENQUEUED_REASON = "Enqueued"

# status.reason / status.message (the REASON and MESSAGE columns of `kubectl get`) repeat the
# condition that best explains a job that is not progressing or did not succeed, in this
# order; the message is cut to stay one readable line (the condition keeps all of it).
SUMMARY_CONDITIONS: Final = (
    ("Failed", "True"),
    ("Ready", "False"),
    ("Blocked", "True"),
    (STALLED_CONDITION, "True"),
    ("RunSkipped", "True"),
)
SUMMARY_MESSAGE_CHARS: Final = 120

# The status keys the status sync owns; it never touches others (firstURL, Ready condition).
SYNCED_KEYS = (
    "phase",
    "progress",
    "total",
    "expanding",
    "pending",
    "retrying",
    "processing",
    "succeeded",
    "failed",
    "cancelled",
    "blocked",
    "startTime",
    "completionTime",
    "lastError",
    "preview",
    "recrawl",
    "observedGeneration",
    "conditions",
    "reason",
    "message",
)


class Phase(StrEnum):
    """A ScrapeJob's lifecycle phase, as `kubectl get scrapejobs` shows it."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    # A ScrapeJob with spec.schedule: it never runs itself, its runs are ScrapeJobs of their
    # own (see schedules.py), so it never reaches a terminal phase.
    SCHEDULED = "Scheduled"
    SUSPENDED = "Suspended"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


class PreviewItem(Protocol):
    """One recent result (the queue's ResultPreview fits)."""

    @property
    def url(self) -> str: ...

    @property
    def result(self) -> Any: ...


class RowCounts(Protocol):
    """A ScrapeJob's rows counted by state (the queue's OwnerProgress fits)."""

    @property
    def total(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def retrying(self) -> int: ...
    @property
    def processing(self) -> int: ...
    @property
    def succeeded(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def cancelled(self) -> int: ...
    @property
    def blocked(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def first_started_at(self) -> datetime | None: ...
    @property
    def last_finished_at(self) -> datetime | None: ...
    @property
    def preview(self) -> Sequence[PreviewItem]: ...
    @property
    def changed(self) -> int: ...
    @property
    def unchanged(self) -> int: ...
    @property
    def without_validators(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def expanding(self) -> int: ...


def decide_phase(counts: RowCounts, allowed_failure_percent: int) -> Phase:
    """Return the phase the rows put the job in.

    A job is complete only when no row is pending, retrying or processing: a row waiting for a
    retry keeps it Running. All terminal: Cancelled if any row was cancelled, Failed if more
    than `allowed_failure_percent` of the rows failed, else Succeeded. No rows yet: Pending.
    """
    live = counts.pending + counts.retrying + counts.processing
    if counts.total <= 0:
        return Phase.PENDING
    if live > 0:
        started = counts.total - counts.pending > 0
        return Phase.RUNNING if started else Phase.PENDING
    if counts.cancelled > 0:
        return Phase.CANCELLED
    if counts.failed * 100 > allowed_failure_percent * counts.total:
        return Phase.FAILED
    return Phase.SUCCEEDED


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime | None:
    """A Kubernetes RFC 3339 time (e.g. metadata.creationTimestamp), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def patch_due(
    *,
    terminal: bool,
    last_patch_at: datetime | None,
    created_at: datetime | None,
    now: datetime,
    min_interval_seconds: float,
    rows_seen_at: datetime | None = None,
) -> bool:
    """Whether an unfinished job's changed status may be patched now.

    At most one patch per `min_interval_seconds` per job, counted from its creation or, when
    the operator saw its rows later (it was busy, the job waited for a dependency), from when
    it saw them: counts of a big job change constantly, and a short job is seen once,
    finished, so its whole lifecycle costs one status write however late it was queued. A
    terminal phase is always written at once.
    """
    if terminal:
        return True
    starts = [time for time in (created_at, rows_seen_at) if time is not None]
    since = last_patch_at or (max(starts) if starts else None)
    if since is None:
        return True
    return (now - since).total_seconds() >= min_interval_seconds


def progress_text(counts: RowCounts) -> str:
    """The DONE column: finished rows (succeeded, failed or cancelled) out of all rows, `n/N`.

    While a source row of the job is unfinished its expansion may add rows, so N is only the
    rows so far and is written `N+`; once every source row has finished, N is the job's size.
    """
    done = counts.succeeded + counts.failed + counts.cancelled
    more = "+" if counts.expanding > 0 else ""
    return f"{done}/{counts.total}{more}"


def make_condition(
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """A metav1.Condition-shaped dict (`status` None means Unknown)."""
    text = "Unknown" if status is None else ("True" if status else "False")
    return {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": format_time(now),
    }


def merge_conditions(
    previous: Sequence[Mapping[str, Any]],
    updates: Sequence[Mapping[str, Any]],
    *,
    remove: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Return `previous` with `updates` applied by type, and the types in `remove` dropped.

    A condition whose status did not change keeps its lastTransitionTime, as metav1 requires;
    order is stable (existing types first, new types appended).
    """
    by_type = {str(update["type"]): update for update in updates}
    merged: list[dict[str, Any]] = []
    seen: set[str] = set()
    for condition in previous:
        kind = str(condition.get("type"))
        if kind in remove or kind in seen:
            continue
        seen.add(kind)
        update = by_type.get(kind)
        if update is None:
            merged.append(dict(condition))
            continue
        fresh = dict(update)
        if condition.get("status") == update["status"]:
            fresh["lastTransitionTime"] = condition.get(
                "lastTransitionTime", update["lastTransitionTime"]
            )
        merged.append(fresh)
    for kind, update in by_type.items():
        if kind not in seen and kind not in remove:
            merged.append(dict(update))
    return merged


def _completion_time(
    counts: RowCounts, phase: Phase, previous: Mapping[str, Any], now: datetime
) -> str | None:
    """When the last row finished; stable across rounds once set."""
    if not phase.terminal:
        return None
    if counts.last_finished_at is not None:
        return format_time(counts.last_finished_at)
    earlier = previous.get("completionTime")
    return str(earlier) if earlier else format_time(now)


def _preview(counts: RowCounts) -> list[dict[str, str]]:
    items: list[dict[str, str]] = []
    for item in list(counts.preview)[:PREVIEW_ITEMS]:
        text = (
            item.result
            if isinstance(item.result, str)
            else json.dumps(item.result, separators=(",", ":"), sort_keys=True, default=str)
        )
        if len(text) > PREVIEW_RESULT_CHARS:
            text = text[: PREVIEW_RESULT_CHARS - 1] + "…"
        items.append({"url": item.url[:2048], "result": text})
    return items


def _recrawl(counts: RowCounts) -> dict[str, int] | None:
    """The pages of a recurring crawl by what its memory made of them; None for a job whose
    rows name no crawl."""
    if counts.changed + counts.unchanged == 0:
        return None
    return {
        "changed": counts.changed,
        "unchanged": counts.unchanged,
        "withoutValidators": counts.without_validators,
        "skipped": counts.skipped,
    }


def build_status(
    counts: RowCounts,
    *,
    previous: Mapping[str, Any],
    generation: int,
    allowed_failure_percent: int,
    queue: str,
    now: datetime,
    queue_unserved: bool = False,
) -> dict[str, Any]:
    """The full synced part of a ScrapeJob's status (the keys in SYNCED_KEYS).

    Rows exist, so the job is Ready (reason Enqueued); Complete and Failed follow the phase;
    Stalled (NoWorkerPool) is True while rows wait on a queue that no worker pool serves
    (`queue_unserved`) and is removed otherwise; other conditions in `previous` are carried
    over unchanged. reason/message summarise the conditions (see summarize).
    """
    phase = decide_phase(counts, allowed_failure_percent)
    status: dict[str, Any] = {
        "phase": phase.value,
        "progress": progress_text(counts),
        "total": counts.total,
        "expanding": counts.expanding or None,
        "pending": counts.pending,
        "retrying": counts.retrying,
        "processing": counts.processing,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "cancelled": counts.cancelled,
        "blocked": counts.blocked,
        "observedGeneration": generation,
        "startTime": format_time(counts.first_started_at) if counts.first_started_at else None,
        "completionTime": _completion_time(counts, phase, previous, now),
        "lastError": (counts.last_error or "")[:LAST_ERROR_CHARS] or None,
        "preview": _preview(counts) or None,
        "recrawl": _recrawl(counts),
    }
    updates: list[dict[str, Any]] = []
    remove: list[str] = []
    if counts.total > 0:
        message = f"{counts.total} URLs queued on queue {queue}"
        if counts.expanding > 0:
            message += f" so far; sources still expanding: {counts.expanding}"
        updates.append(
            make_condition("Ready", True, ENQUEUED_REASON, message, generation=generation, now=now)
        )
    if phase is Phase.SUCCEEDED:
        message = f"{counts.succeeded} of {counts.total} URLs scraped"
        if counts.failed:
            message += f"; {counts.failed} failed, within allowedFailurePercent"
        updates.append(
            make_condition("Complete", True, "Succeeded", message, generation=generation, now=now)
        )
        remove.append("Failed")
    elif phase is Phase.FAILED:
        message = f"{counts.failed} of {counts.total} URLs failed"
        if counts.last_error:
            message += f"; last error: {counts.last_error[:LAST_ERROR_CHARS]}"
        updates.append(
            make_condition("Failed", True, "URLsFailed", message, generation=generation, now=now)
        )
        remove.append("Complete")
    elif phase is Phase.CANCELLED:
        message = f"{counts.cancelled} of {counts.total} URLs were cancelled"
        updates.append(
            make_condition("Failed", True, "Cancelled", message, generation=generation, now=now)
        )
        remove.append("Complete")
    else:
        remove.extend(("Complete", "Failed"))
    if queue_unserved and counts.pending + counts.retrying > 0:
        updates.append(
            make_condition(
                STALLED_CONDITION,
                True,
                NO_WORKER_POOL_REASON,
                no_pool_message(queue),
                generation=generation,
                now=now,
            )
        )
    else:
        remove.append(STALLED_CONDITION)
    status["conditions"] = merge_conditions(
        previous.get("conditions") or [], updates, remove=remove
    )
    status.update(summarize(status["conditions"]))
    return status


def summarize(conditions: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """status.reason and status.message: the first condition of SUMMARY_CONDITIONS present in
    `conditions`, its message cut to one line; both None for a job that progresses normally."""
    found = {(str(item.get("type")), str(item.get("status"))): item for item in conditions}
    for key in SUMMARY_CONDITIONS:
        condition = found.get(key)
        if condition is not None:
            message = " ".join(str(condition.get("message") or "").split())
            if len(message) > SUMMARY_MESSAGE_CHARS:
                message = message[: SUMMARY_MESSAGE_CHARS - 1] + "…"
            return {
                "reason": str(condition.get("reason") or "") or None,
                "message": message or None,
            }
    return {"reason": None, "message": None}


def status_changes(previous: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The merge-patch body turning `previous` into `wanted` for the keys `wanted` names.

    A key whose wanted value is None is deleted (merge-patch null) only if it is present.
    An empty result means no API call is needed.
    """
    changes: dict[str, Any] = {}
    for key, value in wanted.items():
        current = previous.get(key)
        if value is None:
            if current is not None:
                changes[key] = None
        elif current != value:
            changes[key] = value
    return changes
