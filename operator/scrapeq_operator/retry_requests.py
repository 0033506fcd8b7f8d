"""`kubectl annotate scrapejob NAME scrapeq.io/retry-failed=<anything>`: re-queue a ScrapeJob's
failed rows from Kubernetes, the way `scrapeq retry --owner NAMESPACE/NAME` does from a shell.

Why a timer filtered by the annotation, not an update handler: kopf keeps its own bookkeeping in
`scrapeq.io/*` annotations and leaves every annotation under that prefix out of the object's
"essence", so adding `scrapeq.io/retry-failed` is no change to an update handler. A timer with
an annotation filter exists only while an object carries the annotation — it is started when the
annotation appears and stopped when the operator removes it, a few seconds later — so the rule
"no timer or daemon per ScrapeJob" still holds for every ScrapeJob that asked for nothing.
Unlike an event handler, a timer also retries when PostgreSQL is down.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import kopf
import scrapeq_queue
from scrapeq_queue import DatabaseUnavailable

from scrapeq_operator.cluster import ObjectRef
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.vocabulary import GROUP, PLURAL, RETRY_FAILED_ANNOTATION, VERSION

# Seconds between two runs of the timer of one annotated ScrapeJob. A run that succeeds removes
# the annotation, which stops the timer long before this: it only matters if that removal did
# not reach the API server (the object was deleted meanwhile, say).
RECHECK_SECONDS: Final = 60.0

REQUEUED_REASON: Final = "FailedRowsRequeued"


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    annotations={RETRY_FAILED_ANNOTATION: kopf.PRESENT},
    interval=RECHECK_SECONDS,
)
async def retry_failed_rows(
    meta: kopf.Meta,
    uid: str,
    namespace: str | None,
    name: str,
    patch: kopf.Patch,
    memo: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """Re-queue the failed rows of this ScrapeJob once, say so in an Event, drop the annotation.

    The rows are this object's (its uid): a ScrapeJob re-created under the same name never
    revives its predecessor's failures. They become pending with a full retry budget
    (`scrapeq_queue.retry_failed`); the status sync sees them change and shows the job Running
    again, then Succeeded or Failed as the workers finish them.

    Once per annotation: the removal goes out in kopf's patch after this function returns.
    A crash (or a failed patch) between the re-queue and the removal leaves the annotation, so
    the next operator run acts again — and re-queues only rows that are *failed again* by then
    (the rows re-queued the first time are pending, running or completed, and no longer match).
    Those rows failed after the user's request, so running them once more is what the request
    asked for anyway: the repetition is harmless, never a duplicate of a live row. The same
    holds when the annotation is set again later: each setting is one more request.

    A database outage is retried every `database_retry_seconds` with one Warning Event; the
    annotation stays until the rows are re-queued.
    """
    runtime: OperatorRuntime = memo["runtime"]
    # kopf passes the attempt number to every handler; its TimerFn protocol does not name it.
    retry = int(kwargs.get("retry") or 0)
    value = str((meta.get("annotations") or {}).get(RETRY_FAILED_ANNOTATION, ""))
    target = ObjectRef(f"{GROUP}/{VERSION}", "ScrapeJob", namespace or "", name, uid)
    try:
        async with runtime.connection() as connection:
            requeued = await scrapeq_queue.retry_failed(connection, owner_uid=uid)
    except DatabaseUnavailable as error:
        raise await runtime.retry_later(
            error,
            doing="re-queue failed rows",
            target=target,
            retry=retry,
            reason="RetryFailedPending",
            step="retry_failed",
        ) from error
    logger.info("re-queued %d failed rows (%s=%r)", requeued, RETRY_FAILED_ANNOTATION, value)
    message = (
        f"re-queued {requeued} failed row(s) as asked by {RETRY_FAILED_ANNOTATION}"
        if requeued
        else f"no failed rows to re-queue ({RETRY_FAILED_ANNOTATION})"
    )
    await _post(runtime, target, "Normal", REQUEUED_REASON, message)
    patch.metadata.annotations[RETRY_FAILED_ANNOTATION] = None


async def _post(
    runtime: OperatorRuntime, target: ObjectRef, type_: str, reason: str, message: str
) -> None:
    """An Event about the ScrapeJob (never fails the request)."""
    await runtime.cluster.announce(target, type_=type_, reason=reason, message=message)
