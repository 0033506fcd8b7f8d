"""The one operator-wide task that mirrors queue progress into ScrapeJob status.

Not a timer or daemon per ScrapeJob: one loop for the whole operator. It wakes when the queue
NOTIFYs (new rows) and polls the owners whose rows changed since its last look (a cheap query on
a partial index), plus a full sweep of every unfinished ScrapeJob now and then to repair what
anything else missed. For each candidate it computes the status (job_status.build_status) and
PATCHes only the keys that differ from what the object already shows. The PATCHes run in the
background with bounded concurrency, oldest finished job first, while the next rounds look for
more: a job that finishes during a long round waits for a free PATCH slot, not for the round.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
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


_RESOURCE_VERSION = re.compile(r"[1-9][0-9]*")


def compare_resource_versions(first: str, second: str) -> int | None:
    """-1, 0 or 1 as the resourceVersion `first` of an object is older than, the same as or
    newer than `second`; None when either is not a positive integer without leading zeros.

    Kubernetes guarantees since 1.35 that an object's resource versions compare this way
    (KEP-5504, "Comparable Resource Version"); earlier kube-apiservers issue etcd revisions,
    which do too. Anything else (a different storage) is only ever compared for equality."""
    if not (_RESOURCE_VERSION.fullmatch(first) and _RESOURCE_VERSION.fullmatch(second)):
        return None
    if len(first) != len(second):
        return -1 if len(first) < len(second) else 1
    return (first > second) - (first < second)


@dataclass(frozen=True, slots=True)
class _Patched:
    """The sync's last status PATCH of a job, until the watch shows it."""

    # The resourceVersion the patch was computed from, and the one it gave the object.
    from_version: str
    to_version: str | None

    def shown_in(self, ref: JobRef) -> bool:
        """Whether `ref` (the watch's latest copy) already includes the patch."""
        if self.to_version is not None:
            order = compare_resource_versions(ref.resource_version, self.to_version)
            if order is not None:
                return order >= 0
            if ref.resource_version == self.to_version:
                return True
        # Versions that do not compare: any copy newer than the one patched from.
        return ref.resource_version != self.from_version


@dataclass(frozen=True, slots=True)
class _StatusPatch:
    """One status PATCH a round decided on, run in the background by StatusSync._send."""

    ref: JobRef
    counts: Any
    previous: dict[str, Any]
    wanted: dict[str, Any]
    changes: dict[str, Any]
    # The precondition: None for a new job's first status, written without waiting for kopf's
    # mark (see StatusSync._plan).
    resource_version: str | None
    now: datetime

    @property
    def terminal(self) -> bool:
        return Phase(self.wanted["phase"]).terminal

    def sort_key(self) -> tuple[bool, datetime]:
        """Finished jobs first, the longest finished first; then the others as found."""
        finished_at = self.counts.last_finished_at if self.terminal else None
        return (not self.terminal, finished_at or self.now)


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
        # uid -> our last patch of it. While the watch has not delivered that patch, the
        # index shows an older copy: wait instead of patching again from stale data (which
        # could only end in a 409 or a second write of the same status).
        self._patched: dict[str, _Patched] = {}
        # uid -> its PATCH, queued for a slot or on the wire; rounds pass over these jobs.
        self._in_flight: dict[str, asyncio.Task[int]] = {}
        self._patch_slots = asyncio.Semaphore(settings.status_patch_concurrency)
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
                    await self.sync_round(wait=False)
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
            patches = list(self._in_flight.values())
            for task in patches:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
            await asyncio.gather(*patches, return_exceptions=True)

    def _sweep_due(self) -> bool:
        return time.monotonic() >= self._next_sweep

    async def sync_round(self, *, wait: bool = True) -> int:
        """One pass: find candidates, read their progress, send a PATCH of what changed.

        With `wait` it returns once its PATCHes are done, with how many were applied; the
        loop (`run`) does not wait, so that the next rounds go on finding finished jobs while
        the API server answers, and gets how many PATCHes the round sent. The database
        connection is held only while reading, never during API calls. If the round fails,
        its candidates are kept for the next one and the watermark stays put.
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
                elif uid in self._in_flight:
                    # Looked at again once its PATCH is done.
                    self._retry.add(uid)
                elif not ref.deleting:
                    self._unknown.pop(uid, None)
                    refs.append(ref)
            started = time.monotonic()
            planned: list[_StatusPatch] = []
            for start in range(0, len(refs), self.settings.status_batch_size):
                batch = refs[start : start + self.settings.status_batch_size]
                async with self.runtime.connection() as connection:
                    progress = await inspection.owner_progress(
                        connection, [ref.uid for ref in batch]
                    )
                now_utc = datetime.now(UTC)
                for ref in batch:
                    patch = self._plan(ref, progress.get(ref.uid), now_utc)
                    if patch is not None:
                        planned.append(patch)
        except BaseException:
            self._retry.update(candidates)
            raise
        self._watermark = now
        planned.sort(key=_StatusPatch.sort_key)
        sent = [self._dispatch(patch) for patch in planned]
        if not wait:
            if sent:
                logger.info(
                    "status sync: %d status PATCHes for %d ScrapeJobs looked at (%d in flight)",
                    len(sent),
                    len(refs),
                    len(self._in_flight),
                )
            return len(sent)
        patched = sum(await asyncio.gather(*sent))
        if patched:
            logger.info(
                "status sync: patched %d of %d ScrapeJobs in %.2f s",
                patched,
                len(refs),
                time.monotonic() - started,
            )
        return patched

    def _dispatch(self, patch: _StatusPatch) -> asyncio.Task[int]:
        """Run `patch` in the background, in the order of the calls (the slots are FIFO)."""
        uid = patch.ref.uid
        task = asyncio.create_task(self._send(patch), name=f"status-patch-{uid}")
        self._in_flight[uid] = task
        task.add_done_callback(lambda _: self._in_flight.pop(uid, None))
        return task

    def _forget_delivered_patches(self) -> None:
        """Drop the patch memory of jobs that are gone or whose patch the watch delivered
        (finished and deleted jobs are not looked at again, so nothing else would drop it)."""
        for uid, patched in list(self._patched.items()):
            ref = self.directory.get(uid)
            if ref is None or patched.shown_in(ref):
                del self._patched[uid]
        for memory in (self._last_patch_at, self._rows_seen_at):
            for uid in [uid for uid in memory if self.directory.get(uid) is None]:
                del memory[uid]
        created = self.runtime.created_without_status
        for uid in list(created):
            ref = self.directory.get(uid)
            if ref is None or ref.handled:
                created.discard(uid)

    def _remember_unknown(self, uid: str) -> None:
        """Retry an owner the index does not know for a while: right after a start the watch
        may not have listed it yet. Owners outside the watched namespaces, or deleted, are
        forgotten after UNKNOWN_OWNER_RETRY_SECONDS."""
        first_seen = self._unknown.setdefault(uid, time.monotonic())
        if time.monotonic() - first_seen < UNKNOWN_OWNER_RETRY_SECONDS:
            self._retry.add(uid)
        else:
            self._unknown.pop(uid, None)

    def _plan(self, ref: JobRef, counts: Any, now: datetime) -> _StatusPatch | None:
        """The status PATCH `ref` needs now, or None (then the job is looked at again when
        its rows change, in the next round if it waits for something, or at the sweep)."""
        if counts is None or counts.total == 0:
            # Not queued yet (the create handler owns the status until then).
            return None
        rows_seen_at = self._rows_seen_at.setdefault(ref.uid, now)
        resource_version: str | None = ref.resource_version
        if ref.handled:
            self.runtime.created_without_status.discard(ref.uid)
        elif ref.uid in self.runtime.created_without_status:
            # kopf is about to PATCH its handled mark, which changes the resourceVersion and
            # nothing in the status: written without the version as precondition, the first
            # status need not wait for that PATCH, and cannot be refused because of it. The
            # merge patch names only the sync's keys, and nothing else writes them before it.
            resource_version = None
        elif (now - rows_seen_at).total_seconds() < HANDLED_WAIT_SECONDS:
            # kopf marks the object handled in a PATCH of its own right after the create
            # handler queued the rows: a status patch before it shows would carry a
            # resourceVersion that PATCH makes stale (409). The next round sees it.
            self._retry.add(ref.uid)
            return None
        patched = self._patched.get(ref.uid)
        if patched is not None:
            if not patched.shown_in(ref):
                self._retry.add(ref.uid)
                return None
            # The watch has delivered our last patch: nothing to remember any more.
            del self._patched[ref.uid]
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
            return None
        if not patch_due(
            terminal=Phase(wanted["phase"]).terminal,
            last_patch_at=self._last_patch_at.get(ref.uid),
            created_at=ref.created_at,
            now=now,
            min_interval_seconds=self.settings.status_min_interval_seconds,
            rows_seen_at=rows_seen_at,
        ):
            self._retry.add(ref.uid)
            return None
        return _StatusPatch(ref, counts, previous, wanted, changes, resource_version, now)

    async def _send(self, patch: _StatusPatch) -> int:
        """Apply one planned PATCH once a slot is free; 1 if applied. Never raises: a failure
        is counted and the job retried in the next round."""
        async with self._patch_slots:
            try:
                current = self.directory.get(patch.ref.uid)
                if current is None or current.deleting:
                    return 0
                if current.resource_version != patch.ref.resource_version:
                    # The watch showed a newer copy while the patch waited for its slot
                    # (kopf's mark, for one): plan again from it, with the same counts.
                    replanned = self._plan(current, patch.counts, patch.now)
                    if replanned is None:
                        return 0
                    patch = replanned
                return await self._apply(patch)
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("status_sync").inc()
                logger.exception(
                    "status sync: the patch of %s/%s failed", patch.ref.namespace, patch.ref.name
                )
                self._retry.add(patch.ref.uid)
                return 0

    async def _apply(self, patch: _StatusPatch) -> int:
        ref, wanted, changes = patch.ref, patch.wanted, patch.changes
        try:
            # Before the status shows the phase: once it does, the sync never looks at the job
            # again, so an event not recorded by then would be lost.
            await self._record_webhook_events(ref, wanted["phase"], patch.counts)
            await self._end_output(ref, wanted["phase"])
            new_version = await self.runtime.cluster.patch_scrapejob_status(
                ref.namespace,
                ref.name,
                uid=ref.uid,
                resource_version=patch.resource_version,
                status=changes,
            )
        except Exception as error:
            if is_not_found(error):
                metrics.STATUS_PATCHES_TOTAL.labels("gone").inc()
                self._forget(ref.uid)
                return 0
            if is_conflict(error):
                # The object changed since the watch showed it; try again next round with the
                # fresher copy.
                metrics.STATUS_PATCHES_TOTAL.labels("conflict").inc()
            else:
                metrics.STATUS_PATCHES_TOTAL.labels("error").inc()
                logger.warning("status patch of %s/%s failed: %s", ref.namespace, ref.name, error)
            self._retry.add(ref.uid)
            return 0
        self._patched[ref.uid] = _Patched(ref.resource_version, new_version)
        if patch.terminal:
            self._last_patch_at.pop(ref.uid, None)
            self._rows_seen_at.pop(ref.uid, None)
            self.runtime.created_without_status.discard(ref.uid)
        else:
            self._last_patch_at[ref.uid] = patch.now
        metrics.STATUS_PATCHES_TOTAL.labels("applied").inc()
        if changes.get("phase") == Phase.FAILED.value:
            await self._announce_failure(ref, patch.counts)
        stalled = _condition(wanted, STALLED_CONDITION)
        if stalled and not _condition(patch.previous, STALLED_CONDITION):
            await self.runtime.cluster.announce(
                _scrapejob(ref),
                type_="Warning",
                reason=str(stalled["reason"]),
                message=str(stalled["message"]),
            )
        return 1

    def _forget(self, uid: str) -> None:
        """Drop what the sync remembers of a job that is gone."""
        self._patched.pop(uid, None)
        self._last_patch_at.pop(uid, None)
        self._rows_seen_at.pop(uid, None)
        self.runtime.created_without_status.discard(uid)

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
