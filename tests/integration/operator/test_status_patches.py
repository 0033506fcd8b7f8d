"""How the status sync sends its PATCHes, against the real PostgreSQL queue: a new job whose
create handler wrote no status gets its first status at once and once, without waiting for
kopf's mark; a PATCH the API server is slow to answer holds up no other job's, in this round or
the next; finished jobs are written in the order they finished.

The Kubernetes side is stood in for (the index of ScrapeJobs, the status PATCH); the operator
runs against a real kube-apiserver in tests/e2e/operator/.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, cast

import pytest
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.status_sync import StatusSync, job_ref

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


def uid(number: int) -> str:
    return f"0b5d2c1e-0000-4000-8000-{number:012d}"


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[OperatorRuntime]:
    # Every round looks at every unfinished job (the sweep), so a round that writes nothing
    # has looked and decided so.
    settings = OperatorSettings(
        database_url=database_url,
        status_min_interval_seconds=0,
        status_sweep_seconds=0,
        status_patch_concurrency=2,
    )
    runtime = OperatorRuntime(settings, cast(Any, StatusApi()))
    await runtime.open()
    yield runtime
    await runtime.close()


def api_of(runtime: OperatorRuntime) -> StatusApi:
    return cast(StatusApi, runtime.cluster)


async def test_a_job_created_without_status_gets_its_first_status_at_once_and_once(
    async_connection: Connection, runtime: OperatorRuntime
) -> None:
    await finished_rows(async_connection)
    created = scrapejob_body(handled=False, resource_version="1")
    directory = Directory(job_ref(created))
    runtime.created_without_status.add(UID)
    sync = StatusSync(runtime.settings, directory, runtime)
    api = api_of(runtime)

    # Not marked handled yet: written at once, without the resourceVersion as precondition
    # (kopf's PATCH of its mark would make it stale).
    assert await sync.sync_round() == 1
    assert api.calls == [("laptops", None)]
    (written,) = api.patched
    assert written["phase"] == "Succeeded"

    # The watch shows kopf's mark (resourceVersion 2), older than the status patch (101):
    # the status it shows is still the old one, and the sync does not write it again.
    marked = scrapejob_body(handled=True, resource_version="2")
    directory.show(job_ref(marked))
    assert await sync.sync_round() == 0
    # Then the patch itself: nothing left to write.
    shown = {**marked, "metadata": {**marked["metadata"], "resourceVersion": "101"}}
    shown["status"] = {**marked["status"], **written}
    directory.show(job_ref(shown))
    assert await sync.sync_round() == 0
    assert len(api.calls) == 1
    assert UID not in runtime.created_without_status


async def test_a_job_created_with_a_status_of_its_handler_still_waits_for_kopf_s_mark(
    async_connection: Connection, runtime: OperatorRuntime
) -> None:
    # Not in created_without_status: the create handler's own status (a condition) is in
    # kopf's PATCH, and a status written before it could be overwritten by it.
    await finished_rows(async_connection)
    directory = Directory(job_ref(scrapejob_body(handled=False)))
    sync = StatusSync(runtime.settings, directory, runtime)
    assert await sync.sync_round() == 0
    directory.show(job_ref(scrapejob_body(handled=True, resource_version="2")))
    assert await sync.sync_round() == 1
    assert api_of(runtime).calls == [("laptops", "2")]


async def test_a_slow_patch_holds_up_no_other_job_s_in_the_next_rounds(
    async_connection: Connection, runtime: OperatorRuntime
) -> None:
    api = api_of(runtime)
    api.held["slow"] = asyncio.Event()
    await finished_rows(async_connection, uid(1), "slow")
    directory = Directory(job_ref(scrapejob_body(uid=uid(1), name="slow")))
    sync = StatusSync(runtime.settings, directory, runtime)
    assert await sync.sync_round(wait=False) == 1  # sent, and held by the API server

    # A job that finishes meanwhile is written while the first PATCH is still unanswered,
    # and the job whose PATCH is on the wire is not sent a second time.
    await finished_rows(async_connection, uid(2), "quick")
    directory.show(job_ref(scrapejob_body(uid=uid(2), name="quick")))
    assert await sync.sync_round(wait=False) == 1
    await eventually(
        lambda: [name for name, _ in api.calls],
        until=lambda names: names == ["quick"],
        within=10,
        what="the second job's status while the first job's PATCH is held",
    )
    api.held["slow"].set()
    await eventually(
        lambda: sorted(name for name, _ in api.calls),
        until=lambda names: names == ["quick", "slow"],
        within=10,
        what="the held PATCH, once answered",
    )
    assert len(api.patched) == 2


async def test_finished_jobs_are_written_in_the_order_they_finished(
    async_connection: Connection, runtime: OperatorRuntime
) -> None:
    # Finished in the reverse order of their uids (the order the sync finds them in).
    names = {uid(3): "first", uid(2): "second", uid(1): "third"}
    for job_uid, name in names.items():
        await finished_rows(async_connection, job_uid, name)
    directory = Directory(
        *(job_ref(scrapejob_body(uid=job_uid, name=name)) for job_uid, name in names.items())
    )
    # One PATCH at a time, so the order of the calls is the order they were sent in.
    settings = replace(runtime.settings, status_patch_concurrency=1)
    assert await StatusSync(settings, directory, runtime).sync_round() == 3
    assert [name for name, _ in api_of(runtime).calls] == ["first", "second", "third"]


async def test_a_patch_waiting_for_its_slot_is_planned_again_from_a_newer_copy(
    async_connection: Connection, runtime: OperatorRuntime
) -> None:
    # One slot, taken by a PATCH the API server holds; behind it, a new job's first status,
    # planned without a precondition (kopf's mark not shown yet).
    api = api_of(runtime)
    api.held["slow"] = asyncio.Event()
    await finished_rows(async_connection, uid(1), "slow")
    await finished_rows(async_connection, uid(2), "new")
    directory = Directory(
        job_ref(scrapejob_body(uid=uid(1), name="slow")),
        job_ref(scrapejob_body(uid=uid(2), name="new", handled=False)),
    )
    runtime.created_without_status.add(uid(2))
    settings = replace(runtime.settings, status_patch_concurrency=1)
    sync = StatusSync(settings, directory, runtime)
    round_ = asyncio.create_task(sync.sync_round())
    await eventually(
        lambda: sync._patch_slots.locked(),
        until=bool,
        within=10,
        what="the held PATCH in the only slot",
    )
    # Meanwhile the watch shows kopf's mark: the waiting PATCH is sent with that version.
    directory.show(job_ref(scrapejob_body(uid=uid(2), name="new", resource_version="2")))
    api.held["slow"].set()
    assert await asyncio.wait_for(round_, 10) == 2
    assert sorted(api.calls) == [("new", "2"), ("slow", "1")]
