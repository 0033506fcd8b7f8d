"""The one operator-wide task that mirrors queue progress into ScrapeJob status.

Not a timer or daemon per ScrapeJob: one loop for the whole operator. It wakes when the queue
NOTIFYs (new rows) and polls the owners whose rows changed since its last look (a cheap query on
a partial index), plus a full sweep of every unfinished ScrapeJob now and then to repair what
anything else missed. For each candidate it computes the status (job_status.build_status) and
PATCHes only the keys that differ from what the object already shows, in bounded batches with
bounded concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import scrapeq_queue
from scrapeq_queue import DatabaseUnavailable, WebhookEventType, inspection, notifications
from scrapeq_queue.output_batches import mark_output_ended

from scrapeq_operator import metrics
from scrapeq_operator.cluster import ObjectRef, is_conflict, is_not_found
from scrapeq_operator.job_spec import first_url
from scrapeq_operator.job_status import (
    SYNCED_KEYS,
    Phase,
    build_status,
    parse_time,
    patch_due,
    status_changes,
)
from scrapeq_operator.queue_coverage import STALLED_CONDITION
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.vocabulary import GROUP, HANDLED_ANNOTATION, VERSION
from scrapeq_operator.webhook_recording import record_phase_events, wants_events
from scrapeq_operator.webhook_spec import JobWebhook, job_webhooks

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)

# Rows updated in a transaction that commits later carry an updated_at before the commit; the
# changed-owners query looks back this far past its last watermark so such rows are not missed.
CHANGE_WATERMARK_OVERLAP = timedelta(seconds=5)
# How long an owner whose rows changed is looked for in the index before it is ignored.
UNKNOWN_OWNER_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class JobRef:
    """What the status sync knows of one ScrapeJob (kept in a kopf index, fed by the watch).

    One per ScrapeJob for as long as it exists, so it is kept small: the status is kept as its
    JSON text (one string, not a tree of dicts and strings) and read only for the jobs the sync
    patches; the phase and observed generation, which every sweep reads, are fields."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    generation: int
    allowed_failure_percent: int
    deleting: bool
    queue: str = "default"
    created_at: datetime | None = None
    # The first inline URL (None for urlsFrom: the create handler records that one).
    first_url: str | None = None
    status_json: str = "{}"
    phase: str | None = None
    observed_generation: int | None = None
    webhooks: tuple[JobWebhook, ...] = ()
    # kopf has marked the object handled (HANDLED_ANNOTATION): no PATCH of kopf's is due.
    handled: bool = True

    @property
    def status(self) -> dict[str, Any]:
        """The status as the watch showed it (a fresh copy at each call)."""
        status: dict[str, Any] = json.loads(self.status_json)
        return status

    @property
    def finished(self) -> bool:
        """Terminal phase for the current generation: no sweep needs to look again."""
        return (
            self.phase in {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value}
            and self.observed_generation == self.generation
        )


def job_ref(body: Mapping[str, Any]) -> JobRef:
    """A JobRef from a ScrapeJob object as the watch delivers it."""
    meta = body.get("metadata", {})
    spec = body.get("spec", {})
    status = body.get("status") or {}
    phase = status.get("phase")
    observed = status.get("observedGeneration")
    return JobRef(
        uid=str(meta.get("uid")),
        # Shared by many jobs: one string each, not one per job.
        namespace=sys.intern(str(meta.get("namespace"))),
        name=str(meta.get("name")),
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation") or 1),
        allowed_failure_percent=int(spec.get("allowedFailurePercent") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        queue=sys.intern(str(spec.get("queue") or "default")),
        created_at=parse_time(meta.get("creationTimestamp")),
        first_url=first_url(spec),
        status_json=json.dumps(status, separators=(",", ":")),
        phase=str(phase) if phase else None,
        observed_generation=observed if isinstance(observed, int) else None,
        webhooks=job_webhooks(spec),
        handled=HANDLED_ANNOTATION in (meta.get("annotations") or {}),
    )


# How long the sync waits for kopf to mark a new job handled before it writes the job's
# status anyway (a create handler that queued rows and then failed marks nothing), counted on
# the operator's clock from the round that first saw the job's rows: the API server's
# creationTimestamp would make the wait depend on the two clocks agreeing.
HANDLED_WAIT_SECONDS = 10.0


class JobDirectory(Protocol):
    """Where the sync looks ScrapeJobs up: the kopf index in production."""

    def get(self, uid: str) -> JobRef | None: ...

    def all(self) -> Iterable[JobRef]: ...


class IndexDirectory:
    """A JobDirectory over the kopf index `scrapejobs_by_uid` (uid -> store of JobRef)."""

    def __init__(self, index: Mapping[str, Iterable[JobRef]]) -> None:
        self._index = index

    def get(self, uid: str) -> JobRef | None:
        store = self._index.get(uid)
        if store is None:
            return None
        refs = list(store)
        return refs[-1] if refs else None

    def all(self) -> Iterator[JobRef]:
        for uid in list(self._index):
            ref = self.get(uid)
            if ref is not None:
                yield ref


class StatusSync:
    """Mirror row progress into ScrapeJob status; `run` is the loop, `sync_round` one pass."""

    def __init__(
        self,
        settings: OperatorSettings,
        directory: JobDirectory,
        runtime: OperatorRuntime,
        *,
        webhook_events_recorded: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.directory = directory
        self.runtime = runtime
        # Wakes the webhook delivery loop when this sync put events in the outbox.
        self.webhook_events_recorded = webhook_events_recorded
        self._wake = asyncio.Event()
        self._watermark: datetime | None = None
        self._next_sweep = 0.0
        # Owners whose patch must be retried (conflict, API error) in the next round.
        self._retry: set[str] = set()
        # uid -> the resourceVersion we last patched from. While the watch has not delivered
        # our own patch yet, the index still shows that version: wait instead of patching
        # again from stale data (which could only end in a 409).
        self._patched_from: dict[str, str] = {}
        # uid -> when an owner with changed rows was first missing from the index.
        self._unknown: dict[str, float] = {}
        # uid -> when its status was last patched (unfinished jobs only), for patch_due.
        self._last_patch_at: dict[str, datetime] = {}
        # uid -> when the sync first saw rows of the job (unfinished jobs only), for patch_due.
        self._rows_seen_at: dict[str, datetime] = {}
        # The unserved queues (runtime.unserved_queues) the last round saw: when they change,
        # the unfinished jobs of the queues that changed are looked at again at once.
        self._unserved: frozenset[str] = frozenset()

    async def run(self) -> None:
        """Run until cancelled; a failing round is logged and counted, never fatal."""
        # Wakes the loop on every NOTIFY, and after every reconnection (a sign that the
        # database is back); reconnects within about a second of the server's return.
        listener = asyncio.create_task(
            notifications.listen_and_wake(
                self.settings.database_listen_url or self.settings.database_url,
                self._wake.set,
                application_name="scrapeq-operator-status",
            ),
            name="status-sync-listen",
        )
        listener.add_done_callback(lambda _: self._wake.set())
        try:
            while True:
                if listener.done():
                    # listen_and_wake runs until cancelled: without it this loop would fall
                    # back to polling unnoticed, so it ends too (and the runtime stops the
                    # operator, see FatalTasks).
                    listener.result()
                    raise RuntimeError("the status sync's LISTEN task ended")
                try:
                    await self.sync_round()
                except asyncio.CancelledError:
                    raise
                except DatabaseUnavailable as error:
                    metrics.RECONCILE_ERRORS_TOTAL.labels("status_sync").inc()
                    logger.warning("status sync: database unavailable: %s", error)
                except Exception:
                    metrics.RECONCILE_ERRORS_TOTAL.labels("status_sync").inc()
                    logger.exception("status sync round failed")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.status_poll_seconds):
                        await self._wake.wait()
                if self._wake.is_set():
                    # A burst of notifications costs one round: gather them for a moment.
                    await asyncio.sleep(self.settings.status_debounce_seconds)
                    self._wake.clear()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    def _sweep_due(self) -> bool:
        return time.monotonic() >= self._next_sweep

    async def sync_round(self) -> int:
        """One pass: find candidates, read their progress, patch what changed; return patches.

        The database connection is held only while reading, never during API calls. If the
        round fails, its candidates are kept for the next one and the watermark stays put.
        """
        candidates = set(self._retry)
        self._retry.clear()
        try:
            async with self.runtime.connection() as connection:
                now = await inspection.database_now(connection)
                # First round: the sweep below covers every unfinished job, so the history
                # before this start need not be scanned.
                since = (self._watermark or now) - CHANGE_WATERMARK_OVERLAP
                changed = await inspection.owners_changed_since(connection, since)
            candidates.update(owner.uid for owner in changed)
            unserved = self.runtime.unserved_queues
            if unserved != self._unserved:
                flipped = unserved ^ self._unserved
                candidates.update(
                    ref.uid
                    for ref in self.directory.all()
                    if ref.queue in flipped and not ref.finished
                )
                self._unserved = unserved
            if self._sweep_due():
                candidates.update(ref.uid for ref in self.directory.all() if not ref.finished)
                self._next_sweep = time.monotonic() + self.settings.status_sweep_seconds
                self._forget_delivered_patches()
            refs = []
            for uid in sorted(candidates):
                ref = self.directory.get(uid)
                if ref is None:
                    self._remember_unknown(uid)
                elif not ref.deleting:
                    self._unknown.pop(uid, None)
                    refs.append(ref)
            patched = 0
            started = time.monotonic()
            for start in range(0, len(refs), self.settings.status_batch_size):
                batch = refs[start : start + self.settings.status_batch_size]
                async with self.runtime.connection() as connection:
                    progress = await inspection.owner_progress(
                        connection, [ref.uid for ref in batch]
                    )
                patched += await self._patch_batch(batch, progress)
        except BaseException:
            self._retry.update(candidates)
            raise
        self._watermark = now
        if patched:
            logger.info(
                "status sync: patched %d of %d ScrapeJobs in %.2f s",
                patched,
                len(refs),
                time.monotonic() - started,
            )
        return patched

    def _forget_delivered_patches(self) -> None:
        """Drop the patch memory of jobs that are gone or whose patch the watch delivered
        (finished and deleted jobs are not looked at again, so nothing else would drop it)."""
        for uid, resource_version in list(self._patched_from.items()):
            ref = self.directory.get(uid)
            if ref is None or ref.resource_version != resource_version:
                del self._patched_from[uid]
        for memory in (self._last_patch_at, self._rows_seen_at):
            for uid in [uid for uid in memory if self.directory.get(uid) is None]:
                del memory[uid]

    def _remember_unknown(self, uid: str) -> None:
        """Retry an owner the index does not know for a while: right after a start the watch
        may not have listed it yet. Owners outside the watched namespaces, or deleted, are
        forgotten after UNKNOWN_OWNER_RETRY_SECONDS."""
        first_seen = self._unknown.setdefault(uid, time.monotonic())
        if time.monotonic() - first_seen < UNKNOWN_OWNER_RETRY_SECONDS:
            self._retry.add(uid)
        else:
            self._unknown.pop(uid, None)

    async def _patch_batch(self, refs: list[JobRef], progress: Mapping[str, Any]) -> int:
        limit = asyncio.Semaphore(self.settings.status_patch_concurrency)
        now = datetime.now(UTC)

        async def patch_one(ref: JobRef) -> int:
            counts = progress.get(ref.uid)
            if counts is None or counts.total == 0:
                # Not queued yet (the create handler owns the status until then).
                return 0
            rows_seen_at = self._rows_seen_at.setdefault(ref.uid, now)
            if not ref.handled and (now - rows_seen_at).total_seconds() < HANDLED_WAIT_SECONDS:
                # kopf marks the object handled in a PATCH of its own right after the create
                # handler queued the rows: a status patch before it shows would carry a
                # resourceVersion that PATCH makes stale (409). The next round sees it.
                self._retry.add(ref.uid)
                return 0
            patched_from = self._patched_from.get(ref.uid)
            if patched_from == ref.resource_version:
                self._retry.add(ref.uid)
                return 0
            if patched_from is not None:
                # The watch has delivered our last patch: nothing to remember any more.
                del self._patched_from[ref.uid]
            previous = ref.status
            wanted = build_status(
                counts,
                previous=previous,
                generation=ref.generation,
                allowed_failure_percent=ref.allowed_failure_percent,
                queue=ref.queue,
                now=now,
                queue_unserved=ref.queue in self._unserved,
            )
            synced = {key: wanted[key] for key in SYNCED_KEYS}
            if ref.first_url:
                synced["firstURL"] = ref.first_url
            changes = status_changes(previous, synced)
            if not changes:
                return 0
            if not patch_due(
                terminal=Phase(wanted["phase"]).terminal,
                last_patch_at=self._last_patch_at.get(ref.uid),
                created_at=ref.created_at,
                now=now,
                min_interval_seconds=self.settings.status_min_interval_seconds,
                rows_seen_at=rows_seen_at,
            ):
                self._retry.add(ref.uid)
                return 0
            async with limit:
                try:
                    # Before the status shows the phase: once it does, the sync never looks
                    # at the job again, so an event not recorded by then would be lost.
                    await self._record_webhook_events(ref, wanted["phase"], counts)
                    await self._end_output(ref, wanted["phase"])
                    await self.runtime.cluster.patch_scrapejob_status(
                        ref.namespace,
                        ref.name,
                        uid=ref.uid,
                        resource_version=ref.resource_version,
                        status=changes,
                    )
                except Exception as error:
                    if is_not_found(error):
                        metrics.STATUS_PATCHES_TOTAL.labels("gone").inc()
                        self._patched_from.pop(ref.uid, None)
                        self._last_patch_at.pop(ref.uid, None)
                        self._rows_seen_at.pop(ref.uid, None)
                        return 0
                    if is_conflict(error):
                        # The object changed since the watch showed it; try again next round
                        # with the fresher copy.
                        metrics.STATUS_PATCHES_TOTAL.labels("conflict").inc()
                    else:
                        metrics.STATUS_PATCHES_TOTAL.labels("error").inc()
                        logger.warning(
                            "status patch of %s/%s failed: %s", ref.namespace, ref.name, error
                        )
                    self._retry.add(ref.uid)
                    return 0
            self._patched_from[ref.uid] = ref.resource_version
            if Phase(wanted["phase"]).terminal:
                self._last_patch_at.pop(ref.uid, None)
                self._rows_seen_at.pop(ref.uid, None)
            else:
                self._last_patch_at[ref.uid] = now
            metrics.STATUS_PATCHES_TOTAL.labels("applied").inc()
            if changes.get("phase") == Phase.FAILED.value:
                await self._announce_failure(ref, counts)
            stalled = _condition(wanted, STALLED_CONDITION)
            if stalled and not _condition(previous, STALLED_CONDITION):
                await self.runtime.cluster.announce(
                    _scrapejob(ref),
                    type_="Warning",
                    reason=str(stalled["reason"]),
                    message=str(stalled["message"]),
                )
            return 1

        results = await asyncio.gather(*(patch_one(ref) for ref in refs))
        return sum(results)

    async def _end_output(self, ref: JobRef, phase: str) -> None:
        """Mark the job's output ended when the job just reached a terminal phase (a job
        without one is left alone): its uploader writes the last batch and the manifest. Like
        the webhook events, before the status shows the phase."""
        if phase == ref.phase or not Phase(phase).terminal:
            return
        async with self.runtime.connection() as connection:
            await mark_output_ended(connection, ref.uid)

    async def _record_webhook_events(self, ref: JobRef, phase: str, counts: Any) -> None:
        """Put the event of `phase` in the outbox for each webhook that asked for it, when the
        job just reached it. Recording again (a retried patch, a restarted operator) adds
        nothing, so an event is recorded exactly once."""
        if phase == ref.phase or phase not in scrapeq_queue.WEBHOOK_EVENT_TYPES:
            return
        event_type: WebhookEventType = "Succeeded" if phase == Phase.SUCCEEDED.value else "Failed"
        if not wants_events(ref.webhooks, event_type):
            return
        async with self.runtime.connection() as connection:
            recorded = await record_phase_events(
                connection,
                uid=ref.uid,
                namespace=ref.namespace,
                name=ref.name,
                webhooks=ref.webhooks,
                event_type=event_type,
                # The reasons of the Complete and Failed conditions (job_status.build_status).
                reason="Succeeded" if event_type == "Succeeded" else "URLsFailed",
                total=counts.total,
                succeeded=counts.succeeded,
                failed=counts.failed,
                cancelled=counts.cancelled,
                finished_at=counts.last_finished_at,
            )
        if recorded:
            self.webhook_events_recorded()

    async def _announce_failure(self, ref: JobRef, counts: Any) -> None:
        """A Warning Event when a job turns Failed (kubectl describe shows why)."""
        message = f"{counts.failed} of {counts.total} URLs failed"
        if counts.last_error:
            message += f"; last error: {counts.last_error}"
        await self.runtime.cluster.announce(
            _scrapejob(ref), type_="Warning", reason="URLsFailed", message=message
        )


def _scrapejob(ref: JobRef) -> ObjectRef:
    return ObjectRef(f"{GROUP}/{VERSION}", "ScrapeJob", ref.namespace, ref.name, ref.uid)


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The condition of this type that is True, if any."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == type_ and condition.get("status") == "True":
            return dict(condition)
    return None
