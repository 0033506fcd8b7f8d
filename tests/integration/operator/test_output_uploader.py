"""The output uploader against a real PostgreSQL queue and a real S3 server (versitygw): batches
appear while rows are still pending, the manifest matches the rows exactly, an upload that
failed after its batch was cut (or whose marking never happened) writes each row in exactly one
batch once, a store stopped for a while loses and duplicates nothing, retention keeps rows until
their batch is uploaded, and changesOnly leaves unchanged pages out (docs/operator.md, "Output
to object storage").

The Kubernetes API is stood in for (a status patch and Events); the same loop runs inside the
operator against a real kube-apiserver in tests/e2e/operator/test_output.py.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_operator.cluster import ObjectRef
from scrapeq_operator.output_encoding import output_prefix
from scrapeq_operator.output_store import OutputStore, OutputStoreUnavailable, WrittenObject
from scrapeq_operator.output_uploader import OutputUploader
from scrapeq_operator.runtime import OperatorRuntime
from scrapeq_operator.settings import OperatorSettings
from scrapeq_queue import output_batches as outputs
from scrapeq_queue.output_batches import OutputSettings

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(90)

Connection = psycopg.AsyncConnection[Any]
NAMESPACE = "team"
NAME = "laptops"


@dataclass
class StatusAndEvents:
    """What the uploader asks of the Kubernetes API: status patches and Events."""

    statuses: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)

    async def patch_scrapejob_status(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        resource_version: str | None,
        status: dict[str, Any],
    ) -> None:
        self.statuses.append(status)

    async def announce(self, target: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason))

    def close(self) -> None:
        return None


@pytest.fixture
def s3_credentials(monkeypatch: pytest.MonkeyPatch, s3_server: LocalS3Server) -> LocalS3Server:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    return s3_server


def settings_for(database_url: str, server: LocalS3Server) -> OperatorSettings:
    return OperatorSettings(
        database_url=database_url,
        object_store_bucket=S3_BUCKET,
        object_store_endpoint=server.endpoint,
        object_store_region=server.region,
        object_store_path_style=True,
        output_poll_seconds=0.1,
        output_retry_base_seconds=0.2,
        output_retry_max_seconds=0.5,
    )


@dataclass
class Harness:
    connection: Connection
    server: LocalS3Server
    runtime: OperatorRuntime
    uploader: OutputUploader
    cluster: StatusAndEvents
    uid: str
    prefix: str

    def object(self, key: str) -> bytes:
        return self.server.object_path(S3_BUCKET, key).read_bytes()

    def keys(self) -> list[str]:
        folder = self.server.object_path(S3_BUCKET, self.prefix)
        if not folder.exists():
            return []
        return sorted(f"{self.prefix}/{path.name}" for path in folder.iterdir())

    def batch_keys(self) -> list[str]:
        return [key for key in self.keys() if "/batch-" in key]

    def lines(self) -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for key in self.batch_keys()
            for line in self.object(key).decode().splitlines()
        ]

    def manifest(self) -> dict[str, Any] | None:
        key = f"{self.prefix}/manifest.json"
        return json.loads(self.object(key)) if key in self.keys() else None


async def harness_for(
    connection: Connection,
    database_url: str,
    server: LocalS3Server,
    uid: str,
    settings: OutputSettings,
    *,
    store: OutputStore | None = None,
) -> Harness:
    operator_settings = settings_for(database_url, server)
    prefix = output_prefix(operator_settings.object_store_prefix, "output", NAMESPACE, NAME, uid)
    await outputs.register_output(
        connection,
        owner_uid=uid,
        owner_namespace=NAMESPACE,
        owner_name=NAME,
        settings=OutputSettings(
            format=settings.format,
            batch_rows=settings.batch_rows,
            batch_seconds=settings.batch_seconds,
            key_prefix=prefix,
            changes_only=settings.changes_only,
            batch_webhooks=settings.batch_webhooks,
        ),
    )
    cluster = StatusAndEvents()
    runtime = OperatorRuntime(operator_settings, cast(Any, cluster))
    await runtime.open()
    uploader = OutputUploader(operator_settings, runtime, store or OutputStore(operator_settings))
    return Harness(connection, server, runtime, uploader, cluster, uid, prefix)


@pytest.fixture
async def closing() -> AsyncIterator[list[OperatorRuntime]]:
    runtimes: list[OperatorRuntime] = []
    yield runtimes
    for runtime in runtimes:
        await runtime.close()


async def enqueue(connection: Connection, uid: str, count: int, *, tag: str = "p") -> None:
    await queue.enqueue_for_owner(
        connection,
        queue.Owner(uid, NAMESPACE, NAME),
        [f"https://{tag}{number}.test/" for number in range(count)],
    )


async def finish(
    connection: Connection, count: int, *, fail: int = 0, result: dict[str, Any] | None = None
) -> list[int]:
    """Claim `count` rows; fail the first `fail` of them for good and complete the others."""
    claimed = await queue.claim_jobs(
        connection, worker_id="test", queues=["default"], limit=count, lease_seconds=60
    )
    for number, job in enumerate(claimed):
        if number < fail:
            await queue.fail_job(
                connection,
                job.id,
                job.attempt,
                error="HTTP 404",
                reason="http_status",
                duration_seconds=0.1,
            )
        else:
            await queue.complete_job(
                connection,
                job.id,
                job.attempt,
                result=result or {"fields": {"title": job.url}},
                duration_seconds=0.1,
            )
    return [job.id for job in claimed]


async def undelivered_ids(connection: Connection, uid: str) -> list[int]:
    cursor = await connection.execute(
        "SELECT id FROM scraping_jobs WHERE owner_uid = %s AND undelivered ORDER BY id", (uid,)
    )
    return [row[0] for row in await cursor.fetchall()]


async def all_ids(connection: Connection, uid: str) -> list[int]:
    cursor = await connection.execute(
        "SELECT id FROM scraping_jobs WHERE owner_uid = %s ORDER BY id", (uid,)
    )
    return [row[0] for row in await cursor.fetchall()]


async def test_rows_of_a_job_with_an_output_are_inserted_undelivered_and_others_are_not(
    async_connection: Connection,
) -> None:
    await outputs.register_output(
        async_connection,
        owner_uid="with-output",
        owner_namespace=NAMESPACE,
        owner_name=NAME,
        settings=OutputSettings(key_prefix="p"),
    )
    await enqueue(async_connection, "with-output", 3)
    await enqueue(async_connection, "without-output", 2, tag="q")
    await queue.enqueue_many(async_connection, ["https://shop.test/plain"])

    assert len(await undelivered_ids(async_connection, "with-output")) == 3
    cursor = await async_connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE undelivered AND owner_uid IS DISTINCT FROM %s",
        ("with-output",),
    )
    assert await cursor.fetchone() == (0,)


async def test_the_first_batch_appears_while_later_rows_are_still_pending(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    harness = await harness_for(
        async_connection, database_url, s3_credentials, "uid-first", OutputSettings(batch_rows=5)
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 20)
    first = await finish(async_connection, 5)
    assert len(first) == 5

    written = await harness.uploader.upload_round()
    assert harness.cluster.events == []
    state = await outputs.output_state(async_connection, harness.uid)
    assert state is not None
    assert state.last_error is None
    assert written == 1

    assert harness.batch_keys() == [f"{harness.prefix}/batch-000001.jsonl"]
    assert sorted(line["id"] for line in harness.lines()) == sorted(first)
    assert {line["state"] for line in harness.lines()} == {"completed"}
    assert harness.manifest() is None
    cursor = await async_connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE owner_uid = %s AND status = 'pending'",
        (harness.uid,),
    )
    assert await cursor.fetchone() == (15,)
    assert harness.cluster.statuses[-1]["output"] == {
        "bucket": S3_BUCKET,
        "prefix": harness.prefix,
        "format": "jsonl",
        "batches": 1,
        "rows": 5,
    }


async def test_rows_waiting_longer_than_batch_seconds_are_cut_into_a_batch_of_their_own(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    harness = await harness_for(
        async_connection,
        database_url,
        s3_credentials,
        "uid-seconds",
        OutputSettings(batch_rows=1000, batch_seconds=0.5),
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 10)
    await finish(async_connection, 2)
    # Younger than batchSeconds and fewer than batchRows: not yet.
    assert await harness.uploader.upload_round() == 0

    harness.runtime.spawn("output", harness.uploader.run())
    await eventually(harness.batch_keys, within=20, what="the two rows' batch, by time")
    assert len(harness.lines()) == 2


async def test_the_manifest_matches_the_rows_exactly(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    harness = await harness_for(
        async_connection, database_url, s3_credentials, "uid-manifest", OutputSettings(batch_rows=4)
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 11)
    await finish(async_connection, 6, fail=2)
    await harness.uploader.upload_round()
    await finish(async_connection, 3)
    await queue.cancel_owner(async_connection, harness.uid)  # the last two rows
    await outputs.mark_output_ended(async_connection, harness.uid)

    await harness.uploader.upload_round()

    manifest = harness.manifest()
    assert manifest is not None
    assert manifest["counts"] == {"completed": 7, "failed": 2, "cancelled": 2}
    assert manifest["rows"] == manifest["lines"] == 11
    assert [batch["key"] for batch in manifest["batches"]] == harness.batch_keys()
    for batch in manifest["batches"]:
        data = harness.object(batch["key"])
        assert batch["bytes"] == len(data)
        assert batch["sha256"] == hashlib.sha256(data).hexdigest()
        assert batch["lines"] == len(data.decode().splitlines())
    ids = [line["id"] for line in harness.lines()]
    assert sorted(ids) == await all_ids(async_connection, harness.uid)
    assert len(ids) == len(set(ids))
    failed = [line for line in harness.lines() if line["state"] == "failed"]
    assert [line["error"] for line in failed] == ["HTTP 404", "HTTP 404"]
    assert await undelivered_ids(async_connection, harness.uid) == []
    assert harness.cluster.statuses[-1]["output"]["manifest"] == f"{harness.prefix}/manifest.json"
    state = await outputs.output_state(async_connection, harness.uid)
    assert state is not None
    assert state.finished_at is not None
    # A finished output is not looked at again.
    assert await harness.uploader.upload_round() == 0


class FailingAfterPut:
    """A store that writes the object and then reports a failure `failures` times: the batch's
    object is in the bucket but the batch was never marked uploaded (as when the operator
    stops between the two)."""

    def __init__(self, store: OutputStore, failures: int) -> None:
        self.store = store
        self.bucket = store.bucket
        self.failures = failures
        self.puts: list[str] = []

    async def put(self, key: str, data: bytes, *, content_type: str) -> WrittenObject:
        written = await self.store.put(key, data, content_type=content_type)
        self.puts.append(key)
        if self.failures > 0:
            self.failures -= 1
            raise OutputStoreUnavailable("the answer was lost on the way back")
        return written


async def test_an_upload_interrupted_between_cut_and_mark_writes_each_row_in_one_batch_once(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    settings = settings_for(database_url, s3_credentials)
    store = FailingAfterPut(OutputStore(settings), failures=1)
    harness = await harness_for(
        async_connection,
        database_url,
        s3_credentials,
        "uid-crash",
        OutputSettings(batch_rows=3),
        store=cast(OutputStore, store),
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 9)
    await finish(async_connection, 3)

    assert await harness.uploader.upload_round() == 0  # put, then the failure
    assert store.puts == [f"{harness.prefix}/batch-000001.jsonl"]
    assert len(await undelivered_ids(async_connection, harness.uid)) == 9
    # Rows finished meanwhile go into the next batch, not into the one already cut.
    await finish(async_connection, 6)
    # A batch cut by an operator that then stopped, before any upload.
    await outputs.cut_output_batch(async_connection, harness.uid, limit=3)

    await eventually(
        harness.uploader.upload_round,
        until=lambda written: written > 0,
        within=20,
        what="the uploads after the retry delay",
    )
    await outputs.mark_output_ended(async_connection, harness.uid)
    await eventually(
        harness.uploader.upload_round,
        until=lambda _: harness.manifest() is not None,
        within=20,
        what="the manifest",
    )

    ids = [line["id"] for line in harness.lines()]
    assert len(ids) == len(set(ids)) == 9
    assert sorted(ids) == await all_ids(async_connection, harness.uid)
    assert harness.batch_keys() == [
        f"{harness.prefix}/batch-00000{number}.jsonl" for number in (1, 2, 3)
    ]
    assert store.puts.count(f"{harness.prefix}/batch-000001.jsonl") == 2
    assert ("Warning", "OutputUnavailable") in harness.cluster.events
    assert ("Normal", "OutputRecovered") in harness.cluster.events


async def test_each_uploaded_batch_records_one_event_for_each_endpoint_that_asked_and_only_once(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    hooks = (
        queue.WebhookTarget("https://hooks.test/a", "hook", "key"),
        queue.WebhookTarget("https://hooks.test/b", "hook", "key"),
    )
    settings = settings_for(database_url, s3_credentials)
    # The first upload's answer is lost after the object was written: no batch marked, no event.
    store = FailingAfterPut(OutputStore(settings), failures=1)
    harness = await harness_for(
        async_connection,
        database_url,
        s3_credentials,
        "uid-batch-events",
        OutputSettings(batch_rows=3, batch_webhooks=hooks),
        store=cast(OutputStore, store),
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 6)
    await finish(async_connection, 6)

    assert await harness.uploader.upload_round() == 0
    assert await queue.webhook_events_of(async_connection, harness.uid) == []
    await eventually(
        lambda: harness.uploader.upload_round(),
        until=lambda _: len(harness.batch_keys()) == 2,
        within=20,
        what="both batches uploaded after the retry delay",
    )

    events = await queue.webhook_events_of(async_connection, harness.uid)
    assert sorted((event.url, str(event.event_id)) for event in events) == sorted(
        (hook.url, str(queue.webhook_event_id(harness.uid, "Batch", hook.url, batch=sequence)))
        for hook in hooks
        for sequence in (1, 2)
    )
    assert {(event.event_type, event.status) for event in events} == {("Batch", "pending")}
    cursor = await async_connection.execute(
        "SELECT batch_sequence, data FROM scrapeq_webhook_events WHERE owner_uid = %s"
        " AND url = %s ORDER BY batch_sequence",
        (harness.uid, hooks[0].url),
    )
    rows = await cursor.fetchall()
    assert [(sequence, data["batch"]["key"]) for sequence, data in rows] == [
        (1, f"{harness.prefix}/batch-000001.jsonl"),
        (2, f"{harness.prefix}/batch-000002.jsonl"),
    ]
    assert [data["batch"]["rows"] for _, data in rows] == [3, 3]
    # Recording a batch's events again (the batch marked again after a crash) adds none.
    again = await queue.record_batch_events(
        async_connection,
        owner_uid=harness.uid,
        owner_namespace=NAMESPACE,
        owner_name=NAME,
        sequence=1,
        targets=hooks,
        data=rows[0][1],
    )
    assert again == 0


async def test_a_store_stopped_for_a_while_loses_and_duplicates_nothing(
    async_connection: Connection,
    database_url: str,
    restartable_s3_server: LocalS3Server,
    monkeypatch: pytest.MonkeyPatch,
    closing: list[OperatorRuntime],
) -> None:
    server = restartable_s3_server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    harness = await harness_for(
        async_connection, database_url, server, "uid-outage", OutputSettings(batch_rows=4)
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 16)
    await finish(async_connection, 4)
    harness.runtime.spawn("output", harness.uploader.run())
    await eventually(harness.batch_keys, within=20, what="the first batch")

    server.stop_server()
    await finish(async_connection, 8)
    await eventually(
        lambda: harness.cluster.events,
        until=lambda events: ("Warning", "OutputUnavailable") in events,
        within=30,
        what="the outage reported",
    )
    server.start_server()
    await finish(async_connection, 4)
    await outputs.mark_output_ended(async_connection, harness.uid)
    await eventually(harness.manifest, within=60, what="the manifest after the outage")

    ids = [line["id"] for line in harness.lines()]
    assert len(ids) == len(set(ids)) == 16
    manifest = harness.manifest()
    assert manifest is not None
    assert manifest["counts"]["completed"] == 16
    assert await undelivered_ids(async_connection, harness.uid) == []


async def test_retention_keeps_finished_rows_until_their_batch_is_uploaded(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    harness = await harness_for(
        async_connection, database_url, s3_credentials, "uid-retain", OutputSettings(batch_rows=50)
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 3)
    await finish(async_connection, 3)

    assert await queue.prune_finished(async_connection, completed_older_than=timedelta(0)) == 0
    assert len(await all_ids(async_connection, harness.uid)) == 3

    await outputs.mark_output_ended(async_connection, harness.uid)
    await harness.uploader.upload_round()
    assert harness.manifest() is not None
    assert await queue.prune_finished(async_connection, completed_older_than=timedelta(0)) == 3


async def test_changes_only_leaves_unchanged_pages_out_and_still_delivers_their_rows(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    harness = await harness_for(
        async_connection,
        database_url,
        s3_credentials,
        "uid-changes",
        OutputSettings(format="csv", batch_rows=100, changes_only=True),
    )
    closing.append(harness.runtime)
    await enqueue(async_connection, harness.uid, 5)
    changed = await finish(async_connection, 2, result={"fields": {"p": 1}, "changed": True})
    await finish(async_connection, 3, result={"fields": {"p": 1}, "changed": False})
    await outputs.mark_output_ended(async_connection, harness.uid)

    await harness.uploader.upload_round()

    (key,) = harness.batch_keys()
    assert key.endswith("batch-000001.csv")
    table = list(csv.DictReader(io.StringIO(harness.object(key).decode())))
    assert sorted(int(row["id"]) for row in table) == sorted(changed)
    assert json.loads(table[0]["result"])["changed"] is True
    manifest = harness.manifest()
    assert manifest is not None
    assert (manifest["rows"], manifest["lines"], manifest["skipped"]) == (5, 2, 3)
    assert await undelivered_ids(async_connection, harness.uid) == []


async def test_more_outputs_than_a_round_takes_each_get_their_turn(
    async_connection: Connection,
) -> None:
    for number in range(5):
        await outputs.register_output(
            async_connection,
            owner_uid=f"uid-turn-{number}",
            owner_namespace=NAMESPACE,
            owner_name=f"job-{number}",
            settings=OutputSettings(key_prefix=f"p/{number}"),
        )
    seen: list[str] = []
    for _ in range(3):
        seen += [
            output.owner_uid for output in await outputs.outputs_due(async_connection, limit=2)
        ]
    assert set(seen) == {f"uid-turn-{number}" for number in range(5)}


class StallingStore:
    """A store whose uploads never finish: the uploader is stopped in the middle of one."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.started = asyncio.Event()

    async def put(self, key: str, data: bytes, *, content_type: str) -> WrittenObject:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_an_uploader_stopped_mid_upload_leaves_its_batch_to_the_next_one_which_writes_it_once(
    async_connection: Connection,
    database_url: str,
    s3_credentials: LocalS3Server,
    closing: list[OperatorRuntime],
) -> None:
    stalling = StallingStore(S3_BUCKET)
    first = await harness_for(
        async_connection,
        database_url,
        s3_credentials,
        "uid-stopped",
        OutputSettings(batch_rows=4),
        store=cast(OutputStore, stalling),
    )
    closing.append(first.runtime)
    await enqueue(async_connection, first.uid, 8)
    await finish(async_connection, 4)
    first.runtime.spawn("output", first.uploader.run())
    await asyncio.wait_for(stalling.started.wait(), timeout=20)
    await first.runtime.close()  # the operator stops while the batch is being written
    closing.remove(first.runtime)
    state = await outputs.output_state(async_connection, first.uid)
    assert state is not None
    assert state.batches_cut == 1
    assert len(await undelivered_ids(async_connection, first.uid)) == 8

    settings = settings_for(database_url, s3_credentials)
    runtime = OperatorRuntime(settings, cast(Any, StatusAndEvents()))
    await runtime.open()
    closing.append(runtime)
    second = OutputUploader(settings, runtime, OutputStore(settings))
    await finish(async_connection, 4)
    await outputs.mark_output_ended(async_connection, first.uid)
    await eventually(
        second.upload_round,
        until=lambda _: first.manifest() is not None,
        within=20,
        what="the manifest from the next uploader",
    )

    ids = [line["id"] for line in first.lines()]
    assert sorted(ids) == await all_ids(async_connection, first.uid)
    assert len(ids) == len(set(ids)) == 8
    assert first.batch_keys() == [
        f"{first.prefix}/batch-000001.jsonl",
        f"{first.prefix}/batch-000002.jsonl",
    ]
