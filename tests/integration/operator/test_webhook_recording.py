"""The status sync records a job's webhook events in the real PostgreSQL outbox before the
status shows its phase: a status patch that fails (an operator stopped half-way) is retried and
records nothing twice, endpoints that did not ask for the phase get nothing, and a job without
webhooks writes no event (docs/webhooks.md, "Delivery"). A new job whose create handler this
operator did not see queue its rows waits for kopf to mark it handled (one it saw does not:
test_status_patches.py).

The Kubernetes side is stood in for (the index of ScrapeJobs, the status PATCH); the whole
path runs against a real kube-apiserver in tests/e2e/operator/test_webhooks.py.
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
import scrapeq_queue as queue
from scrapeq_operator import status_sync as status_sync_module
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.status_sync import StatusSync, job_ref
from scrapeq_operator.vocabulary import HANDLED_ANNOTATION

from tests.integration.operator.status_sync_parts import (
    UID,
    Connection,
    Directory,
    StatusApi,
    finished_rows,
    scrapejob_body,
)
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)


async def test_a_failed_status_patch_is_retried_and_the_event_is_recorded_once(
    async_connection: Connection, database_url: str
) -> None:
    await finished_rows(async_connection)
    hook = {"url": "https://hooks.example.com/a", "secretRef": {"name": "s", "key": "k"}}
    only_failures = {**hook, "url": "https://hooks.example.com/b", "events": ["Failed"]}
    ref = job_ref(scrapejob_body([hook, only_failures]))
    settings = OperatorSettings(database_url=database_url, status_min_interval_seconds=0)
    api = StatusApi(failures=1)
    runtime = OperatorRuntime(settings, cast(Any, api))
    await runtime.open()
    woken: list[bool] = []
    sync = StatusSync(
        settings, Directory(ref), runtime, webhook_events_recorded=lambda: woken.append(True)
    )
    try:
        assert await sync.sync_round() == 0  # recorded, then the patch failed
        assert await sync.sync_round() == 1  # recorded again (nothing new), then patched
    finally:
        await runtime.close()

    assert [status.get("phase") for status in api.patched] == ["Succeeded"]
    events = await queue.webhook_events_of(async_connection, UID)
    assert [(e.event_type, e.url, e.status) for e in events] == [
        ("Succeeded", "https://hooks.example.com/a", "pending")
    ]
    assert woken == [True]


async def test_a_job_without_webhooks_records_no_event(
    async_connection: Connection, database_url: str
) -> None:
    await finished_rows(async_connection)
    settings = OperatorSettings(database_url=database_url, status_min_interval_seconds=0)
    api = StatusApi(failures=0)
    runtime = OperatorRuntime(settings, cast(Any, api))
    await runtime.open()
    try:
        assert (
            await StatusSync(settings, Directory(job_ref(scrapejob_body([]))), runtime).sync_round()
            == 1
        )
    finally:
        await runtime.close()

    assert await queue.webhook_events_of(async_connection, UID) == []


async def test_a_new_job_s_status_waits_for_kopf_to_mark_it_handled(
    async_connection: Connection, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Right after the create handler queued the rows, kopf PATCHes its handled annotation: a
    # status patch carrying the resourceVersion from before it would be refused (409).
    monkeypatch.setattr(status_sync_module, "HANDLED_WAIT_SECONDS", 0.5)
    await finished_rows(async_connection)
    body = scrapejob_body([], handled=False)
    settings = OperatorSettings(database_url=database_url, status_min_interval_seconds=0)
    api = StatusApi(failures=0)
    runtime = OperatorRuntime(settings, cast(Any, api))
    await runtime.open()
    try:
        assert await StatusSync(settings, Directory(job_ref(body)), runtime).sync_round() == 0
        assert api.patched == []

        handled = {**body["metadata"], "resourceVersion": "2"}
        handled["annotations"] = {HANDLED_ANNOTATION: "{}"}
        ref = job_ref({**body, "metadata": handled})
        assert await StatusSync(settings, Directory(ref), runtime).sync_round() == 1

        # One kopf never marks (a handler that failed after queuing) is not waited for long:
        # the wait counts from the first round that saw its rows, on the operator's clock
        # (its creationTimestamp, from long ago, does not shorten it).
        assert not job_ref(body).handled
        sync = StatusSync(settings, Directory(job_ref(body)), runtime)
        first_seen = time.monotonic()
        assert await sync.sync_round() == 0
        await eventually(
            sync.sync_round,
            until=lambda patched: patched == 1,
            within=10,
            what="the status patch of a job kopf never marked",
        )
        assert time.monotonic() - first_seen >= 0.5
    finally:
        await runtime.close()
    assert [status.get("phase") for status in api.patched] == ["Succeeded", "Succeeded"]
