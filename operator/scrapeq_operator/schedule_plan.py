"""What a scheduled ScrapeJob should do now: pure decisions, no I/O (schedules.py acts on them).

A scheduled ScrapeJob (spec.schedule) never scrapes itself. Like a CronJob creating Jobs, it
creates runs: child ScrapeJobs named `<parent>-<unix seconds of the fire time>`, labelled with
the parent's name and owned by it. Every rule about when a run is due, what concurrencyPolicy
does, which finished runs the history limits drop and what the parent's status says lives here
and is unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from scrapeq_operator.cron import Schedule, latest_fire, next_fire
from scrapeq_operator.job_status import (
    Phase,
    format_time,
    make_condition,
    merge_conditions,
    parse_time,
    summarize,
)
from scrapeq_operator.vocabulary import GROUP, VERSION

# Label on every run: the name of the scheduled ScrapeJob that created it.
SCHEDULE_LABEL: Final = f"{GROUP}/schedule"
# Annotation on every run: the fire time it was started for (RFC 3339, UTC).
SCHEDULED_TIME_ANNOTATION: Final = f"{GROUP}/scheduled-time"
# Spec fields of the parent that say when to run; a run gets the rest of the spec.
SCHEDULE_FIELDS: Final = (
    "schedule",
    "timeZone",
    "concurrencyPolicy",
    "successfulRunsHistoryLimit",
    "failedRunsHistoryLimit",
    "suspend",
)
# The CRD's defaults (repeated for objects created before the fields had defaults).
DEFAULT_SUCCESSFUL_RUNS_HISTORY_LIMIT: Final = 3
DEFAULT_FAILED_RUNS_HISTORY_LIMIT: Final = 1

# Reasons of the parent's conditions and Events.
SCHEDULED_REASON: Final = "Scheduled"
SUSPENDED_REASON: Final = "Suspended"
INVALID_SCHEDULE_REASON: Final = "InvalidSchedule"
FORBIDDEN_REASON: Final = "ConcurrencyForbidden"
# A condition that is True while a due run was not started because another one is active.
RUN_SKIPPED_CONDITION: Final = "RunSkipped"

# The status keys of a scheduled ScrapeJob that schedules.py owns.
SCHEDULE_STATUS_KEYS: Final = (
    "phase",
    "lastScheduleTime",
    "nextScheduleTime",
    "active",
    "lastSuccessfulTime",
    "appliedSchedule",
    "observedGeneration",
    "conditions",
    "reason",
    "message",
)

# urlsFrom's switch that gives each run of a schedule the previous successful run's fire time
# as its sitemap's lastmodAfter (the run's spec holds the time, not the switch).
CHANGED_SINCE_PREVIOUS_RUN: Final = "changedSincePreviousRun"
_FINISHED_PHASES: Final = {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value}


class ConcurrencyPolicy(StrEnum):
    """What to do when a run is due while an earlier one is still active (as a CronJob's)."""

    FORBID = "Forbid"
    ALLOW = "Allow"
    REPLACE = "Replace"


@dataclass(frozen=True)
class Run:
    """One run (child ScrapeJob) of a scheduled ScrapeJob, as listed from the API server."""

    name: str
    uid: str
    scheduled_at: datetime | None
    phase: str | None
    completion_time: datetime | None
    deleting: bool

    @property
    def finished(self) -> bool:
        return self.phase in _FINISHED_PHASES

    @property
    def active(self) -> bool:
        """Not yet terminal and not being deleted (a replaced run no longer counts)."""
        return not self.deleting and not self.finished

    @property
    def succeeded(self) -> bool:
        return self.phase == Phase.SUCCEEDED.value


@dataclass(frozen=True)
class Plan:
    """What one check of a scheduled ScrapeJob decided."""

    # The fire time to start a run for now; None when nothing is due (or it is skipped).
    start: datetime | None
    # Active runs to delete before starting (concurrencyPolicy Replace).
    replace: tuple[Run, ...]
    # Due but not started because these runs are active (concurrencyPolicy Forbid).
    skipped: datetime | None
    blocked_by: tuple[Run, ...]
    # Finished runs beyond the history limits, oldest first.
    prune: tuple[Run, ...]
    # The anchor after this check: the fire time of the latest run started (for @every too).
    last_schedule_time: datetime


def previous_success(runs: Sequence[Run], *, before: datetime) -> datetime | None:
    """The fire time of the latest run before `before` that succeeded (None: there is none)."""
    times = [
        run.scheduled_at
        for run in runs
        if run.succeeded and run.scheduled_at is not None and run.scheduled_at < before
    ]
    return max(times, default=None)


def run_name(parent: str, fire_time: datetime) -> str:
    """The run's name: deterministic, so starting it twice is a harmless AlreadyExists."""
    return f"{parent}-{int(fire_time.timestamp())}"


def run_from_body(body: Mapping[str, Any]) -> Run:
    """A Run from a child ScrapeJob object as the API server returns it."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    name = str(meta.get("name", ""))
    scheduled_at = parse_time((meta.get("annotations") or {}).get(SCHEDULED_TIME_ANNOTATION))
    if scheduled_at is None:
        _, _, suffix = name.rpartition("-")
        if suffix.isdigit():
            scheduled_at = datetime.fromtimestamp(int(suffix), UTC)
    phase = status.get("phase")
    return Run(
        name=name,
        uid=str(meta.get("uid", "")),
        scheduled_at=scheduled_at,
        phase=str(phase) if phase else None,
        completion_time=parse_time(status.get("completionTime")),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def owned_runs(bodies: Sequence[Mapping[str, Any]], parent_uid: str) -> list[Run]:
    """The runs among `bodies` whose controller is the parent with this uid, oldest first.

    The label alone is not enough: a parent deleted and created again under the same name
    must not adopt its predecessor's runs.
    """
    runs = []
    for body in bodies:
        references = (body.get("metadata") or {}).get("ownerReferences") or []
        if any(ref.get("uid") == parent_uid and ref.get("controller") for ref in references):
            runs.append(run_from_body(body))
    return sorted(runs, key=_age_key)


def _age_key(run: Run) -> tuple[datetime, str]:
    return (run.scheduled_at or datetime.min.replace(tzinfo=UTC), run.name)


def applied_schedule(
    previous: Mapping[str, Any],
    *,
    schedule_text: str,
    time_zone: str | None,
    suspended: bool,
    created_at: datetime | None,
    now: datetime,
) -> dict[str, Any]:
    """status.appliedSchedule: the schedule, time zone and suspension in effect, and since when.

    Unchanged since the last check: kept as it was. Changed on the live object (schedule,
    timeZone or suspend): in effect from now, so fire times before the change, such as those
    that passed while suspended, are not caught up. None recorded yet: in effect since the
    ScrapeJob was created.
    """
    wanted = {"schedule": schedule_text, "timeZone": time_zone or "UTC", "suspend": suspended}
    earlier = previous.get("appliedSchedule") or {}
    if earlier and all(earlier.get(key) == value for key, value in wanted.items()):
        return dict(earlier)
    since = now if earlier or created_at is None else created_at
    return {**wanted, "since": format_time(since)}


def schedule_anchor(
    status: Mapping[str, Any], created_at: datetime | None, runs: Sequence[Run], now: datetime
) -> datetime:
    """Where to count fire times from: the latest run started, else the parent's creation, but
    never before the current schedule took effect (status.appliedSchedule.since).

    The runs themselves count as well as status.lastScheduleTime: the status a check sees may
    predate the previous check's patch, and the runs listed from the API server never do.
    """
    applied = status.get("appliedSchedule") or {}
    moments = [
        parse_time(status.get("lastScheduleTime")),
        created_at,
        parse_time(applied.get("since")),
    ]
    moments += [run.scheduled_at for run in runs]
    known = [moment for moment in moments if moment is not None]
    return max(known) if known else now


def history_to_prune(runs: Sequence[Run], successful_limit: int, failed_limit: int) -> list[Run]:
    """Finished runs beyond the history limits, oldest first.

    Succeeded runs count against `successful_limit`; Failed and Cancelled ones (a replaced run
    ends Cancelled) against `failed_limit`. Active runs and runs being deleted never count.
    """
    doomed: list[Run] = []
    for kept, limit in (
        ([run for run in runs if not run.deleting and run.succeeded], successful_limit),
        (
            [run for run in runs if not run.deleting and run.finished and not run.succeeded],
            failed_limit,
        ),
    ):
        ordered = sorted(kept, key=_age_key)
        doomed.extend(ordered[: max(0, len(ordered) - max(0, limit))])
    return sorted(doomed, key=_age_key)


def plan_check(
    schedule: Schedule,
    policy: ConcurrencyPolicy,
    *,
    anchor: datetime,
    now: datetime,
    runs: Sequence[Run],
    successful_limit: int,
    failed_limit: int,
    suspended: bool,
) -> Plan:
    """Decide one check: which run to start (if any), what to replace, skip and prune.

    Only the latest fire time in (anchor, now] is considered: fire times missed while the
    operator was away collapse into one run. A fire time whose run already exists is done.
    A skipped fire time (Forbid) does not move the anchor, so once the active run finishes
    the latest missed fire time starts at once, as with a CronJob.
    """
    prune = tuple(history_to_prune(runs, successful_limit, failed_limit))
    due = None if suspended else latest_fire(schedule, anchor, now)
    last = anchor
    if due is None or any(run.scheduled_at == due for run in runs):
        return Plan(None, (), None, (), prune, last)
    active = tuple(run for run in runs if run.active)
    if active and policy is ConcurrencyPolicy.FORBID:
        return Plan(None, (), due, active, prune, last)
    replace = active if policy is ConcurrencyPolicy.REPLACE else ()
    return Plan(due, replace, None, (), prune, due)


def run_manifest(
    parent: Mapping[str, Any], fire_time: datetime, runs: Sequence[Run] = ()
) -> dict[str, Any]:
    """The child ScrapeJob for one fire time: the parent's spec without the schedule fields,
    labelled with the parent's name and controlled by it (a cluster's garbage collector then
    deletes runs with their parent).

    With `urlsFrom.changedSincePreviousRun`, the run's sitemap source gets `lastmodAfter`: the
    fire time of the latest run in `runs` that succeeded (none: the run reads everything)."""
    meta = parent.get("metadata") or {}
    spec = {
        key: value
        for key, value in (parent.get("spec") or {}).items()
        if key not in SCHEDULE_FIELDS
    }
    urls_from = spec.get("urlsFrom")
    if isinstance(urls_from, Mapping) and CHANGED_SINCE_PREVIOUS_RUN in urls_from:
        source = {k: v for k, v in urls_from.items() if k != CHANGED_SINCE_PREVIOUS_RUN}
        previous = previous_success(runs, before=fire_time)
        if urls_from[CHANGED_SINCE_PREVIOUS_RUN] and previous is not None:
            source["lastmodAfter"] = format_time(previous)
        spec["urlsFrom"] = source
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScrapeJob",
        "metadata": {
            "name": run_name(str(meta["name"]), fire_time),
            "namespace": meta.get("namespace"),
            "labels": {SCHEDULE_LABEL: str(meta["name"])},
            "annotations": {SCHEDULED_TIME_ANNOTATION: format_time(fire_time)},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ScrapeJob",
                    "name": str(meta["name"]),
                    "uid": str(meta["uid"]),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def schedule_status(
    *,
    previous: Mapping[str, Any],
    schedule_text: str,
    schedule: Schedule,
    policy: ConcurrencyPolicy,
    plan: Plan,
    runs_after: Sequence[Run],
    suspended: bool,
    applied: Mapping[str, Any],
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The parent's status after a check (the keys in SCHEDULE_STATUS_KEYS).

    `runs_after` are the runs as they stand once the check acted (replaced and pruned runs
    removed, the started one added).
    """
    active = [run.name for run in runs_after if run.active]
    # Runs pruned in this very check count too: with a history limit of 0 a run may be
    # deleted in the check that first sees it Succeeded.
    finished_at = [run.completion_time for run in [*runs_after, *plan.prune] if run.succeeded]
    finished_at.append(parse_time(previous.get("lastSuccessfulTime")))
    last_success = max((moment for moment in finished_at if moment is not None), default=None)
    next_time = None if suspended else next_fire(schedule, now, since=plan.last_schedule_time)
    if suspended:
        ready = make_condition(
            "Ready",
            True,
            SUSPENDED_REASON,
            "suspended (spec.suspend): no runs are started",
            generation=generation,
            now=now,
        )
    else:
        ready = make_condition(
            "Ready",
            True,
            SCHEDULED_REASON,
            f"runs on schedule {schedule_text!r} ({applied.get('timeZone', 'UTC')}), "
            f"concurrencyPolicy {policy.value}",
            generation=generation,
            now=now,
        )
    updates = [ready]
    remove: list[str] = []
    if plan.skipped is not None:
        names = ", ".join(run.name for run in plan.blocked_by)
        updates.append(
            make_condition(
                RUN_SKIPPED_CONDITION,
                True,
                FORBIDDEN_REASON,
                f"the run due at {format_time(plan.skipped)} was not started: {names} still "
                f"active (concurrencyPolicy Forbid)",
                generation=generation,
                now=now,
            )
        )
    elif plan.start is not None:
        remove.append(RUN_SKIPPED_CONDITION)
    last_schedule = parse_time(previous.get("lastScheduleTime"))
    if plan.start is not None and (last_schedule is None or plan.start > last_schedule):
        last_schedule = plan.start
    conditions = merge_conditions(previous.get("conditions") or [], updates, remove=remove)
    return {
        "phase": (Phase.SUSPENDED if suspended else Phase.SCHEDULED).value,
        "lastScheduleTime": format_time(last_schedule) if last_schedule else None,
        "nextScheduleTime": format_time(next_time) if next_time else None,
        "active": active or None,
        "lastSuccessfulTime": format_time(last_success) if last_success else None,
        "appliedSchedule": dict(applied),
        "observedGeneration": generation,
        "conditions": conditions,
        **summarize(conditions),
    }


def invalid_schedule_status(
    *, previous: Mapping[str, Any], message: str, generation: int, now: datetime
) -> dict[str, Any]:
    """The parent's status when its schedule or time zone cannot be used: Failed, with
    Ready=False InvalidSchedule; no run is started until the spec is fixed."""
    not_ready = make_condition(
        "Ready", False, INVALID_SCHEDULE_REASON, message, generation=generation, now=now
    )
    conditions = merge_conditions(previous.get("conditions") or [], [not_ready])
    return {
        "phase": Phase.FAILED.value,
        "lastScheduleTime": previous.get("lastScheduleTime"),
        "nextScheduleTime": None,
        "active": None,
        "lastSuccessfulTime": previous.get("lastSuccessfulTime"),
        "appliedSchedule": previous.get("appliedSchedule"),
        "observedGeneration": generation,
        "conditions": conditions,
        **summarize(conditions),
    }
