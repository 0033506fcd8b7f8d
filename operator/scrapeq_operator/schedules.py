"""kopf handlers for scheduled ScrapeJobs (spec.schedule): runs as child ScrapeJobs.

Modelled on CronJob -> Job. A scheduled ScrapeJob queues no rows itself; a timer checks it
every few seconds (SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS) and, when a fire time has come,
creates a run: a child ScrapeJob `<parent>-<unix seconds of the fire time>` with the parent's
spec minus the schedule fields, labelled `scrapeq.io/schedule: <parent>` and controlled by the
parent. The run is an ordinary ScrapeJob from then on (handlers.py queues it, the status sync
follows it). The timer also applies concurrencyPolicy, deletes finished runs beyond the
history limits (the objects only: their rows stay until retention takes them, docs/queue.md
"Retention") and keeps the parent's status (phase Scheduled,
lastScheduleTime, nextScheduleTime, active, lastSuccessfulTime) current. The decisions are
pure functions in schedule_plan.py; this module only reads, acts and patches.

One timer per *scheduled* ScrapeJob, not per ScrapeJob: the field filter keeps every other
ScrapeJob (runs included) from getting one, and schedules are few (each run is a ScrapeJob
and rows of its own). Every action is idempotent: a run's name is fixed by its fire time, so
a repeated check after a restart or with a stale status is a harmless AlreadyExists.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
import scrapeq_queue
from kubernetes.client.rest import ApiException
from scrapeq_queue import DatabaseUnavailable

from scrapeq_operator import metrics
from scrapeq_operator.cluster import scrapejob_ref
from scrapeq_operator.cron import CronError, parse_schedule
from scrapeq_operator.job_status import format_time, parse_time, status_changes
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.schedule_plan import (
    DEFAULT_FAILED_RUNS_HISTORY_LIMIT,
    DEFAULT_SUCCESSFUL_RUNS_HISTORY_LIMIT,
    INVALID_SCHEDULE_REASON,
    RUN_SKIPPED_CONDITION,
    SCHEDULE_LABEL,
    ConcurrencyPolicy,
    Plan,
    Run,
    applied_schedule,
    invalid_schedule_status,
    owned_runs,
    plan_check,
    run_manifest,
    run_name,
    schedule_anchor,
    schedule_status,
)
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.vocabulary import GROUP, PLURAL, VERSION

# kopf fixes a timer's interval when the handler is registered (at import), before the
# settings object reaches the memo; commands.py has already validated these same settings.
CHECK_SECONDS = OperatorSettings.from_environment(validate=False).schedule_check_seconds


def _runtime(memo: Any) -> OperatorRuntime:
    runtime: OperatorRuntime = memo["runtime"]
    return runtime


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return {}


async def _event(
    runtime: OperatorRuntime,
    body: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
) -> None:
    """An Event about the scheduled ScrapeJob (never fails the check)."""
    await runtime.cluster.announce(scrapejob_ref(body), type_=type_, reason=reason, message=message)


def _apply(patch: kopf.Patch, previous: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    """Put only the changed status keys into kopf's patch: no change, no API call."""
    for key, value in status_changes(previous, wanted).items():
        patch.status[key] = value


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    id="schedule",
    interval=CHECK_SECONDS,
    field="spec.schedule",
    value=kopf.PRESENT,
)
async def check_schedule(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    uid: str,
    namespace: str | None,
    name: str,
    patch: kopf.Patch,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Start the run that is due (if any), prune the history and refresh the parent's status.

    A failing API or database call is logged and counted; the next check tries again.
    """
    runtime = _runtime(memo)
    namespace = namespace or ""
    generation = int(meta.get("generation") or 1)
    now = datetime.now(UTC)
    schedule_text = str(spec.get("schedule", ""))
    time_zone = spec.get("timeZone")
    try:
        schedule = parse_schedule(schedule_text, time_zone)
    except CronError as error:
        message = f"spec.{'timeZone' if str(error).startswith('timeZone') else 'schedule'}: {error}"
        if _condition(status, "Ready").get("message") != message:
            await _event(runtime, body, "Warning", INVALID_SCHEDULE_REASON, message)
        _apply(
            patch,
            status,
            invalid_schedule_status(
                previous=status, message=message, generation=generation, now=now
            ),
        )
        return

    policy = ConcurrencyPolicy(spec.get("concurrencyPolicy") or ConcurrencyPolicy.FORBID.value)
    suspended = bool(spec.get("suspend", False))
    try:
        listed = await runtime.cluster.list_scrapejobs(namespace, f"{SCHEDULE_LABEL}={name}")
    except ApiException as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("schedule").inc()
        logger.warning("cannot list the runs of this schedule: %s", error)
        return
    runs = owned_runs(listed, uid)
    created_at = parse_time(meta.get("creationTimestamp"))
    applied = applied_schedule(
        status,
        schedule_text=schedule_text,
        time_zone=time_zone,
        suspended=suspended,
        created_at=created_at,
        now=now,
    )
    if applied != status.get("appliedSchedule") and status.get("appliedSchedule"):
        logger.info("schedule changed to %s; in effect from now", applied)
    anchor = schedule_anchor({**status, "appliedSchedule": applied}, created_at, runs, now)
    plan = plan_check(
        schedule,
        policy,
        anchor=anchor,
        now=now,
        runs=runs,
        successful_limit=int(
            spec.get("successfulRunsHistoryLimit", DEFAULT_SUCCESSFUL_RUNS_HISTORY_LIMIT)
        ),
        failed_limit=int(spec.get("failedRunsHistoryLimit", DEFAULT_FAILED_RUNS_HISTORY_LIMIT)),
        suspended=suspended,
    )
    try:
        runs_after = await _act(runtime, body, plan, runs, logger)
    except ApiException as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("schedule").inc()
        logger.warning("schedule check failed, retrying at the next check: %s", error)
        return
    wanted = schedule_status(
        previous=status,
        schedule_text=schedule_text,
        schedule=schedule,
        policy=policy,
        plan=plan,
        runs_after=runs_after,
        suspended=suspended,
        applied=applied,
        generation=generation,
        now=now,
    )
    skipped = _condition(wanted, RUN_SKIPPED_CONDITION)
    if plan.skipped is not None and skipped.get("message") != _condition(
        status, RUN_SKIPPED_CONDITION
    ).get("message"):
        # One Event per skipped fire time (the message names it), not one per check.
        await _event(runtime, body, "Normal", "RunSkipped", str(skipped["message"]))
    _apply(patch, status, wanted)


async def _act(
    runtime: OperatorRuntime,
    body: Mapping[str, Any],
    plan: Plan,
    runs: list[Run],
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> list[Run]:
    """Replace, start and prune as planned; return the runs as they stand afterwards."""
    meta = body["metadata"]
    namespace = str(meta.get("namespace", ""))
    gone: set[str] = set()
    for run in plan.replace:
        # The run's own delete handler cancels its live rows (a worker mid-page is fenced).
        await runtime.cluster.delete_scrapejob(namespace, run.name, uid=run.uid)
        gone.add(run.uid)
        await _event(
            runtime,
            body,
            "Normal",
            "RunReplaced",
            f"deleted the active run {run.name} (concurrencyPolicy Replace)",
        )
    started: list[Run] = []
    if plan.start is not None:
        manifest = run_manifest(body, plan.start, runs)
        created = await runtime.cluster.create_scrapejob(namespace, manifest)
        started.append(
            Run(
                name=run_name(str(meta["name"]), plan.start),
                uid="",
                scheduled_at=plan.start,
                phase=None,
                completion_time=None,
                deleting=False,
            )
        )
        if created:
            logger.info("started run %s for %s", manifest["metadata"]["name"], plan.start)
            await _event(
                runtime,
                body,
                "Normal",
                "RunStarted",
                f"started run {manifest['metadata']['name']} due at {format_time(plan.start)}",
            )
    gone.update(await _prune(runtime, namespace, plan.prune, logger))
    return [run for run in runs if run.uid not in gone] + started


async def _prune(
    runtime: OperatorRuntime,
    namespace: str,
    doomed: tuple[Run, ...],
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> set[str]:
    """Delete the objects of finished runs beyond the history limits; return the uids deleted.

    Their rows stay: results nobody exported yet must not go with an object the user never
    deleted; retention takes them after the run's own spec.retention or the operator's default
    (docs/queue.md, "Retention"). A run whose rows are live again (retried meanwhile) is kept
    for now; while PostgreSQL is down nothing is pruned (that cannot be told)."""
    if not doomed:
        return set()
    deleted: set[str] = set()
    try:
        async with runtime.connection() as connection:
            progress = await scrapeq_queue.owner_progress(
                connection, [run.uid for run in doomed], preview_limit=0
            )
            for run in doomed:
                counts = progress.get(run.uid)
                if counts is not None and counts.pending + counts.retrying + counts.processing:
                    logger.info("run %s has live rows again; kept for now", run.name)
                    continue
                finished = counts.total if counts is not None else 0
                logger.info(
                    "history limit: deleting run %s; its %d rows stay until retention",
                    run.name,
                    finished,
                )
                await runtime.cluster.delete_scrapejob(namespace, run.name, uid=run.uid)
                deleted.add(run.uid)
    except DatabaseUnavailable as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("schedule").inc()
        logger.warning("cannot prune the run history, database unavailable: %s", error)
    return deleted


@kopf.on.delete(GROUP, VERSION, PLURAL, id="delete-runs", field="spec.schedule", value=kopf.PRESENT)
async def delete_scheduled_runs(
    uid: str,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Delete the runs of a deleted scheduled ScrapeJob (each run's own finalizer cancels its
    live rows). A cluster's garbage collector would follow the ownerReferences too; a control
    plane without one (envtest) relies on this."""
    runtime = _runtime(memo)
    namespace = namespace or ""
    try:
        listed = await runtime.cluster.list_scrapejobs(namespace, f"{SCHEDULE_LABEL}={name}")
        runs = owned_runs(listed, uid)
        for run in runs:
            if not run.deleting:
                await runtime.cluster.delete_scrapejob(namespace, run.name, uid=run.uid)
    except ApiException as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("schedule").inc()
        raise kopf.TemporaryError(
            f"cannot delete the runs: {error}", delay=runtime.settings.database_retry_seconds
        ) from error
    logger.info("deleted %d runs", len(runs))
    # The runs' crawl memory goes with its schedule (a job naming spec.recrawl.key keeps its
    # own: other jobs may share it; the age bound takes it).
    try:
        async with runtime.connection() as connection:
            forgotten = await scrapeq_queue.forget_crawl(
                connection, scrapeq_queue.schedule_crawl_key(namespace, name, uid)
            )
    except DatabaseUnavailable as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("schedule").inc()
        raise kopf.TemporaryError(
            f"cannot forget the schedule's crawl memory, database unavailable: {error}",
            delay=runtime.settings.database_retry_seconds,
        ) from error
    if forgotten:
        logger.info("forgot the crawl memory of %d URLs", forgotten)
