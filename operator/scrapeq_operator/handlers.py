"""kopf handlers: ScrapeJobs become queue rows; deleting one cancels its rows.

Scraping never happens here. Per object the operator only enqueues (create/resume) and cancels
(delete, behind a finalizer); progress is mirrored by the one operator-wide status sync task and
workers are scaled by the one autoscaler task, both started in `start_operator`. A job with
dependencies (spec.dependsOn, urlsFrom.scrapeJob) is enqueued only once they have Succeeded
(depends_on.py); a scheduled job is never enqueued itself, its runs are (schedules.py).

What a spec change does: nothing to run, because the CRD makes the spec immutable (the rows are
already queued); a user deletes the ScrapeJob and creates a new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf
import scrapeq_queue
from kubernetes.client.rest import ApiException
from scrapeq_queue import WEBHOOK_BATCH_EVENT, Connection, DatabaseUnavailable
from scrapeq_queue.output_batches import mark_output_ended, register_output
from scrapeq_queue.payload import validate_payload
from scrapeq_queue.result_urls import urls_from_results
from scrapeq_queue.rows import NewJob, Owner

from scrapeq_operator import metrics
from scrapeq_operator.autoscaler import Autoscaler
from scrapeq_operator.cluster import Cluster, api_unanswered, load_api_client, scrapejob_ref
from scrapeq_operator.credentials import sealed_credentials
from scrapeq_operator.depends_on import DependencyCheck, check_dependencies
from scrapeq_operator.errors import JobBlockedError, JobNotRunnableError
from scrapeq_operator.job_spec import (
    ConfigMapKey,
    ScrapeJobField,
    SitemapSource,
    crawl_payload,
    decode_url_list,
    dependency_names,
    first_url,
    parse_url_list,
    row_options,
    url_source,
)
from scrapeq_operator.job_status import (
    ENQUEUED_REASON,
    format_time,
    make_condition,
    merge_conditions,
    summarize,
)
from scrapeq_operator.kopf_memory import release_idle_bodies
from scrapeq_operator.namespace_caps import NamespaceCapSync
from scrapeq_operator.output_spec import job_output
from scrapeq_operator.output_store import OutputStore
from scrapeq_operator.output_uploader import OutputUploader
from scrapeq_operator.parser_coverage import named_parser, unknown_parser
from scrapeq_operator.queue_access import (
    ADMITTED_CONDITION,
    QUEUE_ALLOWED_REASON,
    JobNotAdmittedError,
    QueuePolicy,
    admission,
    admitted_message,
    read_policy,
)
from scrapeq_operator.retention import Retention
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.site_policy_resync import SitePolicyResync
from scrapeq_operator.site_policy_spec import site_policy
from scrapeq_operator.status_sync import IndexDirectory, JobRef, StatusSync, job_ref
from scrapeq_operator.vocabulary import (
    FINALIZER,
    FORCE_DELETE_ANNOTATION,
    GROUP,
    HANDLED_ANNOTATION_KEY,
    PLURAL,
    SITE_POLICY_PLURAL,
    VERSION,
)
from scrapeq_operator.webhook_delivery import WebhookDelivery
from scrapeq_operator.webhook_recording import record_phase_events, wants_events
from scrapeq_operator.webhook_spec import job_webhooks, targets_for


@kopf.on.startup()
async def start_operator(
    settings: kopf.OperatorSettings,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """Configure kopf, open the database pool and start the operator-wide loops."""
    # kopf passes every index to every handler under its name (the function's name below).
    index: kopf.Index[str, JobRef] = kwargs["scrapejobs_by_uid"]
    config: OperatorSettings = memo["settings"]
    # kopf would keep every ScrapeJob's last body for the two filtered timers (kopf_memory.py).
    release_idle_bodies()
    settings.persistence.finalizer = FINALIZER
    # Keep kopf's bookkeeping in our own annotations, never in status (our schema prunes it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key=HANDLED_ANNOTATION_KEY
    )
    # Each Event is an API write: kopf's own (one per handler retry) are only logged; the
    # operator posts its own, once per condition (see _warn).
    settings.posting.enabled = False
    # No CRD/namespace scanning: the operator needs no RBAC on CRDs or namespaces (install the
    # CRD before starting the operator).
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60

    runtime = OperatorRuntime(config, Cluster(load_api_client()), memo.get("fatal"))
    await runtime.open()
    memo["runtime"] = runtime
    directory = IndexDirectory(index)
    delivery = WebhookDelivery(config, runtime)
    runtime.spawn(
        "status-sync",
        StatusSync(config, directory, runtime, webhook_events_recorded=delivery.wake.set).run(),
    )
    runtime.spawn("webhooks", delivery.run())
    runtime.spawn("retention", Retention(config, runtime).run())
    runtime.spawn("site-policies", SitePolicyResync(runtime).run())
    runtime.spawn("namespace-caps", NamespaceCapSync(config, runtime).run())
    if config.object_store_bucket is not None:
        runtime.spawn("output", OutputUploader(config, runtime, OutputStore(config)).run())
    if config.autoscaler_enabled:
        runtime.spawn("autoscaler", Autoscaler(config, runtime).run())
    logger.info(
        "scrapeq operator started (%s)",
        "all namespaces" if config.clusterwide else ", ".join(config.namespaces),
    )


@kopf.on.cleanup()
async def stop_operator(memo: kopf.Memo, **_: Any) -> None:
    """Stop the loops and close connections before kopf exits."""
    runtime: OperatorRuntime | None = memo.get("runtime")
    if runtime is not None:
        await runtime.close()


@kopf.index(GROUP, VERSION, PLURAL)
async def scrapejobs_by_uid(body: kopf.Body, **_: Any) -> dict[str, JobRef]:
    """Every ScrapeJob by uid with its current status: the status sync's view of the cluster.

    A coroutine on purpose: kopf runs plain functions in a thread pool, a hop per watch event.
    """
    ref = job_ref(body)
    return {ref.uid: ref}


async def _refuse_sites_not_allowed(
    runtime: OperatorRuntime, spec: kopf.Spec, namespace: str, urls: list[str]
) -> None:
    """Raise JobNotRunnableError (SiteNotAllowed, naming the policy) when a site policy refuses
    the job's namespace one of its start URLs' sites (a sitemap's or URL list's own site
    included). Checked again later: a policy change lets the job run."""
    source = url_source(spec)
    start = list(urls)
    if isinstance(source, SitemapSource) and source.kind != "object":
        start.append(source.url)
    sites = sorted({scrapeq_queue.host_key_of(url) for url in start})
    if not sites:
        return
    async with runtime.connection() as connection:
        refused = await scrapeq_queue.refusing_policies(connection, sites, namespace)
    if refused:
        shown = sorted(refused.items())[:3]
        more = f" and {len(refused) - 3} more sites" if len(refused) > 3 else ""
        raise JobNotRunnableError(
            "SiteNotAllowed",
            "; ".join(
                f"site policy {policy} does not let namespace {namespace} crawl {site}"
                for site, policy in shown
            )
            + more,
        )


def _runtime(memo: Any) -> OperatorRuntime:
    runtime: OperatorRuntime = memo["runtime"]
    return runtime


def _now() -> datetime:
    return datetime.now(UTC)


def _already_enqueued(status: Mapping[str, Any], generation: int) -> bool:
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "Ready"
            and condition.get("status") == "True"
            and condition.get("reason") == ENQUEUED_REASON
            and condition.get("observedGeneration") == generation
        ):
            return True
    return False


def _ended_unqueued(status: Mapping[str, Any], generation: int) -> bool:
    """The job was failed before queueing anything: `_not_runnable` recorded a permanent
    JobNotRunnableError (a cycle, a failed dependency, an invalid spec, an upstream job without
    usable URLs) as phase Failed with a Failed condition. The error alone decides permanence;
    this reads its record back."""
    if status.get("phase") != "Failed":
        return False
    return any(
        condition.get("type") == "Failed"
        and condition.get("status") == "True"
        and condition.get("observedGeneration") == generation
        for condition in status.get("conditions") or []
    )


async def await_dependencies(
    name: str, namespace: str, spec: Mapping[str, Any], cluster: Cluster
) -> DependencyCheck:
    """Check spec.dependsOn (and a urlsFrom.scrapeJob source) before anything is queued.

    Returns the check when every dependency has Succeeded; raises JobBlockedError while some
    have not, and a permanent JobNotRunnableError for a cycle or (with onDependencyFailure
    Fail) a failed dependency.
    """

    async def read(job: str) -> Mapping[str, Any] | None:
        return await cluster.read_scrapejob(namespace, job)

    check = await check_dependencies(name, spec, read)
    if check.cycle is not None:
        raise JobNotRunnableError(
            "DependencyCycle",
            "dependency cycle: " + " -> ".join(check.cycle) + "; it can never start",
            permanent=True,
        )
    failed = check.failed
    if failed and spec.get("onDependencyFailure", "Fail") == "Fail":
        names = ", ".join(dependency.describe for dependency in failed)
        raise JobNotRunnableError(
            "DependencyFailed",
            f"dependencies did not succeed: {names} (onDependencyFailure: Fail)",
            permanent=True,
        )
    if not check.satisfied:
        waiting = ", ".join(dependency.describe for dependency in [*failed, *check.waiting])
        raise JobBlockedError(f"waiting for {waiting} to succeed")
    return check


async def resolve_urls(
    spec: Mapping[str, Any],
    namespace: str,
    cluster: Cluster,
    settings: OperatorSettings,
    *,
    database: Callable[[], AbstractAsyncContextManager[Connection]] | None = None,
    dependencies: DependencyCheck | None = None,
) -> list[str]:
    """The job's URLs, reading a urlsFrom ConfigMap or an upstream job's results;
    JobNotRunnableError when it cannot run."""
    source = url_source(spec)
    if isinstance(source, ScrapeJobField):
        uid = dependencies.uid_of(source.name) if dependencies else None
        if uid is None or database is None:
            raise JobBlockedError(f"waiting for {source.name} to succeed")
        return await _urls_from_scrapejob(source, uid, database, settings)
    if isinstance(source, SitemapSource):
        # Workers read it (decision record 13): the operator queues the one source row.
        return [source.url]
    if not isinstance(source, ConfigMapKey):
        return source
    configmap = await cluster.read_configmap(namespace, source.name)
    if configmap is None:
        raise JobNotRunnableError(
            "ConfigMapNotFound",
            f"urlsFrom: ConfigMap {namespace}/{source.name} does not exist "
            f"(the job starts once it is created)",
        )
    where = f"ConfigMap {source.name} key {source.key}"
    if source.key in configmap.data:
        text = configmap.data[source.key]
    elif source.key in configmap.binary_data:
        text = decode_url_list(configmap.binary_data[source.key], where=where)
    else:
        keys = ", ".join(configmap.keys()) or "none"
        raise JobNotRunnableError(
            "ConfigMapKeyNotFound",
            f"urlsFrom: ConfigMap {namespace}/{source.name} has no key {source.key!r} "
            f"(keys: {keys})",
        )
    return parse_url_list(text, max_urls=settings.max_urls_per_job, where=where)


async def _urls_from_scrapejob(
    source: ScrapeJobField,
    uid: str,
    database: Callable[[], AbstractAsyncContextManager[Connection]],
    settings: OperatorSettings,
) -> list[str]:
    where = f"urlsFrom: field {source.field!r} of ScrapeJob {source.name}"
    async with database() as connection:
        found = await urls_from_results(
            connection, uid, source.field, limit=settings.max_urls_per_job
        )
    if found.truncated:
        raise JobNotRunnableError(
            "TooManyURLs",
            f"{where} holds more than {settings.max_urls_per_job} values; "
            "the operator accepts that many",
            permanent=True,
        )
    if not found.urls:
        skipped = f" ({found.skipped} values were not http(s) URLs)" if found.skipped else ""
        raise JobNotRunnableError("NoURLs", f"{where} holds no URLs{skipped}", permanent=True)
    return found.urls


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
async def enqueue_scrapejob(
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    body: kopf.Body,
    uid: str,
    namespace: str | None,
    name: str,
    patch: kopf.Patch,
    memo: Any,
    retry: int,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Queue one row per URL, idempotently (rows are keyed by the ScrapeJob's uid).

    An operator restart or a repeated event never duplicates rows. A job that cannot run gets
    Ready=False with a reason and an Event, and is retried later; a database outage is retried
    without marking the job.
    """
    runtime = _runtime(memo)
    settings = runtime.settings
    namespace = namespace or ""
    generation = int(meta.get("generation") or 1)
    if spec.get("schedule"):
        # A schedule queues nothing itself: each run is a ScrapeJob of its own (schedules.py).
        return
    if _already_enqueued(status, generation) or _ended_unqueued(status, generation):
        return
    conditions = list(status.get("conditions") or [])
    options = row_options(spec)
    dependencies: DependencyCheck | None = None
    admitted: dict[str, Any] | None = None
    try:
        problems = validate_payload(options["payload"])
        if "sealed" in (spec.get("payload") or {}):
            # Only the operator seals, from a Secret of the job's own namespace: a sealed text
            # copied from another job's rows would lend that job's credentials.
            problems.append("payload.sealed is written by the operator: use spec.credentials")
        if "crawlKey" in (spec.get("payload") or {}):
            # The operator namespaces crawl keys: a key written here could read another
            # namespace's crawl memory.
            problems.append("payload.crawlKey is written by the operator: use spec.recrawl.key")
        if problems:
            raise JobNotRunnableError("InvalidSpec", "; ".join(problems), permanent=True)
        policies = await _queue_policies(runtime, body, retry)
        refusal = admission(
            policies, namespace=namespace, queue=options["queue"], priority=options["priority"]
        )
        if refusal is not None:
            raise refusal
        if _was_refused(conditions):
            # Only a job refused before says Admitted=True: the common case costs no write.
            admitted = make_condition(
                ADMITTED_CONDITION,
                True,
                QUEUE_ALLOWED_REASON,
                admitted_message(
                    policies,
                    namespace=namespace,
                    queue=options["queue"],
                    priority=options["priority"],
                ),
                generation=generation,
                now=_now(),
            )
        crawl = crawl_payload(spec, meta, namespace)
        if crawl:
            options["payload"] = {**(options["payload"] or {}), **crawl}
        parser = named_parser(options["payload"])
        if parser is not None:
            async with runtime.connection() as connection:
                published = await scrapeq_queue.queue_parsers(connection, options["queue"])
            missing = unknown_parser(parser, options["queue"], published)
            if missing is not None:
                raise missing
        if dependency_names(spec):
            dependencies = await await_dependencies(name, namespace, spec, runtime.cluster)
        urls = await resolve_urls(
            spec,
            namespace,
            runtime.cluster,
            settings,
            database=runtime.connection,
            dependencies=dependencies,
        )
        await _refuse_sites_not_allowed(runtime, spec, namespace, urls)
        output = job_output(
            spec,
            settings.output_default,
            store_prefix=settings.object_store_prefix,
            namespace=namespace,
            name=name,
            uid=uid,
        )
        if output is not None and settings.object_store_bucket is None:
            raise JobNotRunnableError(
                "NoObjectStore",
                "spec.output needs the operator's object store (SCRAPEQ_OBJECT_STORE_BUCKET, "
                "chart value workers.objectStore.bucket)",
            )
        sealed = await sealed_credentials(
            spec, namespace, urls, runtime.cluster.read_secret_data, settings.sealing_keys
        )
        if sealed is not None:
            options["payload"] = {**(options["payload"] or {}), "sealed": sealed}
    except DatabaseUnavailable as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("enqueue").inc()
        raise kopf.TemporaryError(
            f"cannot read upstream results or published parsers, database unavailable: {error}",
            delay=settings.database_retry_seconds,
        ) from error
    except ApiException as error:
        if not api_unanswered(error):
            raise
        # A Secret, ConfigMap or upstream job could not be read because the API server did
        # not answer: checked again as soon as a job that cannot run yet would be.
        metrics.RECONCILE_ERRORS_TOTAL.labels("enqueue").inc()
        raise kopf.TemporaryError(
            f"cannot check the job yet, the API server did not answer ({error.status}): "
            f"{error.reason}",
            delay=settings.not_ready_retry_seconds,
        ) from error
    except JobNotRunnableError as error:
        if error.permanent:
            await _record_failed_events(runtime, body, spec, status, error, retry)
        await _not_runnable(
            runtime, body, patch, conditions, generation, error, retry, logger, admitted
        )
        if error.permanent:
            return
        delay = (
            settings.dependency_poll_seconds
            if isinstance(error, JobBlockedError)
            else settings.not_ready_retry_seconds
        )
        raise kopf.TemporaryError(error.message, delay=delay) from error

    try:
        owner = Owner(uid=uid, namespace=namespace, name=name)
        source = url_source(spec)
        async with runtime.connection() as connection:
            if output is not None:
                # Before the first row: every row of the job is then inserted undelivered. The
                # webhooks that asked for Batch events are told of each batch uploaded.
                output = replace(
                    output,
                    batch_webhooks=tuple(targets_for(job_webhooks(spec), WEBHOOK_BATCH_EVENT)),
                )
                await register_output(
                    connection,
                    owner_uid=uid,
                    owner_namespace=namespace,
                    owner_name=name,
                    settings=output,
                )
            if isinstance(source, SitemapSource):
                # One source row; workers queue its URLs as they read it.
                sitemap_row = NewJob(
                    url=source.url,
                    dedup_key=source.dedup_key,
                    payload={**(options.get("payload") or {}), "source": source.payload()},
                )
                inserted = len(
                    await scrapeq_queue.enqueue_many(
                        connection, [sitemap_row], owner=owner, **options
                    )
                )
            else:
                inserted = await scrapeq_queue.enqueue_for_owner(connection, owner, urls, **options)
    except DatabaseUnavailable as error:
        raise await runtime.retry_later(
            error,
            doing="queue rows",
            target=scrapejob_ref(body),
            retry=retry,
            reason="DatabaseUnavailable",
            step="enqueue",
        ) from error
    metrics.JOBS_ENQUEUED_TOTAL.inc(inserted)
    logger.info("queued %d new rows (%d URLs) on queue %s", inserted, len(urls), options["queue"])
    updates = [] if admitted is None else [admitted]
    if dependencies is not None:
        names = ", ".join(dependency.name for dependency in dependencies.dependencies)
        unblocked = make_condition(
            "Blocked",
            False,
            "DependenciesSucceeded",
            f"{names} succeeded",
            generation=generation,
            now=_now(),
        )
        updates.append(unblocked)
    if updates:
        patch.status["conditions"] = merge_conditions(conditions, updates)
    # Status (Ready=True, counts, phase) is written by the status sync in one PATCH with the
    # first counts, saving an API write per job. Only a urlsFrom job's first URL is known here
    # alone.
    if first_url(spec) is None and urls:
        patch.status["firstURL"] = urls[0]
    if not patch.status:
        runtime.created_without_status.add(uid)


async def _queue_policies(
    runtime: OperatorRuntime, body: kopf.Body, retry: int
) -> list[QueuePolicy] | None:
    """Every QueuePolicy, read from the API server at each check (they are few, and a policy
    the admin just changed applies to the next job at once); None when the resource is not
    installed. An API error other than 404 retries the job later, never admits it."""
    try:
        listed = await runtime.cluster.list_queue_policies()
    except ApiException as error:
        metrics.RECONCILE_ERRORS_TOTAL.labels("enqueue").inc()
        if retry == 0:
            await _warn(
                runtime,
                body,
                "QueuePoliciesUnreadable",
                f"cannot read the QueuePolicies ({error.status} {error.reason}); the job is "
                "checked again later",
            )
        raise kopf.TemporaryError(
            f"cannot read the QueuePolicies: {error.status} {error.reason}",
            delay=runtime.settings.not_ready_retry_seconds,
        ) from error
    if listed is None:
        return None
    return [read_policy(item) for item in listed]


def _was_refused(conditions: list[Mapping[str, Any]]) -> bool:
    return any(
        condition.get("type") == ADMITTED_CONDITION and condition.get("status") == "False"
        for condition in conditions
    )


async def _record_failed_events(
    runtime: OperatorRuntime,
    body: kopf.Body,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    error: JobNotRunnableError,
    retry: int,
) -> None:
    """The Failed event of a job that can never run, for its webhooks, before the status says
    Failed (a restart before the patch records it again, and nothing twice)."""
    webhooks = job_webhooks(spec)
    if status.get("phase") == "Failed" or not wants_events(webhooks, "Failed"):
        return
    meta = body.get("metadata", {})
    try:
        async with runtime.connection() as connection:
            await record_phase_events(
                connection,
                uid=str(meta.get("uid")),
                namespace=str(meta.get("namespace")),
                name=str(meta.get("name")),
                webhooks=webhooks,
                event_type="Failed",
                reason=error.reason,
                finished_at=_now(),
            )
    except DatabaseUnavailable as database_error:
        raise await runtime.retry_later(
            database_error,
            doing="record the job's webhook events",
            target=scrapejob_ref(body),
            retry=retry,
            reason="DatabaseUnavailable",
            step="enqueue",
        ) from database_error


async def _not_runnable(
    runtime: OperatorRuntime,
    body: kopf.Body,
    patch: kopf.Patch,
    conditions: list[Mapping[str, Any]],
    generation: int,
    error: JobNotRunnableError,
    retry: int,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    admitted: dict[str, Any] | None = None,
) -> None:
    """Record why a job queues nothing: Blocked while it waits for dependencies, Admitted=False
    when no QueuePolicy lets it use its queue, Ready=False otherwise, and Failed when that can
    never change; one Event per reason. `admitted` is the Admitted=True condition of a job
    refused before and admitted now."""
    now = _now()
    blocked = isinstance(error, JobBlockedError)
    updates = [
        make_condition("Ready", False, error.reason, error.message, generation=generation, now=now)
    ]
    if admitted is not None:
        updates.append(admitted)
    if blocked:
        updates.append(
            make_condition(
                "Blocked", True, error.reason, error.message, generation=generation, now=now
            )
        )
    if isinstance(error, JobNotAdmittedError):
        updates.append(
            make_condition(
                ADMITTED_CONDITION,
                False,
                error.reason,
                error.message,
                generation=generation,
                now=now,
            )
        )
    elif error.permanent:
        updates.append(
            make_condition(
                "Failed", True, error.reason, error.message, generation=generation, now=now
            )
        )
    remove = () if blocked else ("Blocked",)
    patch.status["conditions"] = merge_conditions(conditions, updates, remove=remove)
    patch.status.update(summarize(patch.status["conditions"]))
    patch.status["phase"] = "Failed" if error.permanent else "Pending"
    patch.status["observedGeneration"] = generation
    if error.permanent:
        patch.status["completionTime"] = format_time(now)
    if retry == 0 or _reason_changed(conditions, error.reason):
        await runtime.cluster.announce(
            scrapejob_ref(body),
            type_="Normal" if blocked else "Warning",
            reason=error.reason,
            message=error.message,
        )
    if not blocked:
        metrics.RECONCILE_ERRORS_TOTAL.labels("enqueue").inc()


async def _warn(runtime: OperatorRuntime, body: kopf.Body, reason: str, message: str) -> None:
    """A Warning Event about the ScrapeJob (never fails the handler)."""
    await runtime.cluster.announce(
        scrapejob_ref(body), type_="Warning", reason=reason, message=message
    )


def _reason_changed(conditions: list[Mapping[str, Any]], reason: str) -> bool:
    for condition in conditions:
        if condition.get("type") == "Ready":
            return bool(condition.get("reason") != reason)
    return True


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def cancel_scrapejob_rows(
    uid: str,
    meta: kopf.Meta,
    body: kopf.Body,
    memo: Any,
    retry: int,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Cancel the job's live rows, then let kopf remove the finalizer.

    While PostgreSQL is down the finalizer stays and the cancel is retried, unless the
    ScrapeJob carries the annotation scrapeq.io/force-delete: "true" (its rows may then still
    be scraped).
    """
    runtime = _runtime(memo)
    try:
        async with runtime.connection() as connection:
            cancelled = await scrapeq_queue.cancel_owner(connection, uid)
            # Its output gets its last batch (the cancelled rows) and its manifest.
            await mark_output_ended(connection, uid)
    except DatabaseUnavailable as error:
        forced = str(meta.get("annotations", {}).get(FORCE_DELETE_ANNOTATION, "")).lower()
        if forced == "true":
            metrics.RECONCILE_ERRORS_TOTAL.labels("cancel").inc()
            await _warn(
                runtime,
                body,
                "ForceDeleted",
                f"deleted without cancelling its rows ({FORCE_DELETE_ANNOTATION}): {error}",
            )
            return
        raise await runtime.retry_later(
            error,
            doing="cancel rows",
            target=scrapejob_ref(body),
            retry=retry,
            reason="CancelPending",
            step="cancel",
        ) from error
    logger.info("cancelled %d live rows", cancelled)


@kopf.on.event(GROUP, VERSION, SITE_POLICY_PLURAL)
async def sync_site_policy(
    event: kopf.RawEvent,
    name: str,
    spec: kopf.Spec,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Write a SitePolicy into the queue (docs/operator.md, "Site policies"): the database
    resolves every known site's policy again in the same transaction.

    A raw event handler: it needs only get, list and watch on SitePolicies (no finalizer, no
    bookkeeping annotations). Every policy comes again as the operator starts (kopf lists them
    first), so a restart resyncs them all; while PostgreSQL is down the write is retried here,
    since kopf does not retry event handlers.
    """
    runtime = _runtime(memo)
    deleted = event.get("type") == "DELETED"
    try:
        policy = None if deleted else site_policy(name, spec)
    except ValueError as error:
        # The CRD's schema refuses most of this; a policy kept as it was is better than none.
        metrics.RECONCILE_ERRORS_TOTAL.labels("site_policy").inc()
        logger.error("site policy %s is kept as it was: %s", name, error)
        return
    while True:
        try:
            async with runtime.connection() as connection:
                if policy is None:
                    changed = await scrapeq_queue.delete_site_policy(connection, name)
                else:
                    changed = await scrapeq_queue.apply_site_policy(connection, policy)
        except DatabaseUnavailable as error:
            metrics.RECONCILE_ERRORS_TOTAL.labels("site_policy").inc()
            logger.warning("site policy %s not written yet, database unavailable: %s", name, error)
            await asyncio.sleep(runtime.settings.database_retry_seconds)
            continue
        logger.info(
            "site policy %s %s: %d sites changed",
            name,
            "removed" if deleted else "applied",
            changed,
        )
        return
