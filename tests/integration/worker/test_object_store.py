"""The worker's object store against a real S3 server (versitygw): keys per row, an upload
that replaces, checksums, credentials from the environment, and an unreachable store as a
retryable error."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import pytest
from scrapeq_worker.errors import RetryLater
from scrapeq_worker.object_store import ObjectStore, ObjectStoreConfig

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]


def store_for(server: LocalS3Server, *, prefix: str = "store-tests") -> ObjectStore:
    return ObjectStore(server.store_config(S3_BUCKET, prefix=prefix))


def test_a_rows_object_key_is_prefix_queue_job_id_and_name_on_every_attempt() -> None:
    store = ObjectStore(ObjectStoreConfig(bucket="results", prefix="/runs/"))
    assert store.key("default", 42, "page.html") == "runs/default/42/page.html"
    assert store.key("default", 42, "page.html") == store.key("default", 42, "page.html")
    assert ObjectStore(ObjectStoreConfig(bucket="results")).key("q", 1, "a") == "q/1/a"


async def test_an_upload_lands_in_the_bucket_with_its_size_and_sha256(
    s3_server: LocalS3Server,
) -> None:
    store = store_for(s3_server)
    data = "<html><body>é</body></html>".encode()
    stored = await store.put(store.key("default", 1, "page.html"), data, content_type="text/html")

    assert stored.key == "store-tests/default/1/page.html"
    assert stored.bytes == len(data)
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    assert await store.get(stored.key) == data
    assert s3_server.object_path(S3_BUCKET, stored.key).read_bytes() == data


async def test_a_retried_upload_replaces_the_object_instead_of_adding_another(
    s3_server: LocalS3Server,
) -> None:
    store = store_for(s3_server, prefix="replaced")
    key = store.key("default", 2, "text.txt")
    await store.put(key, b"first attempt", content_type="text/plain")
    await store.put(key, b"second attempt", content_type="text/plain")

    assert await store.get(key) == b"second attempt"
    folder = s3_server.object_path(S3_BUCKET, "replaced/default/2")
    assert sorted(path.name for path in folder.iterdir()) == ["text.txt"]


async def test_credentials_come_from_the_environment_when_none_are_configured(
    s3_server: LocalS3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    # No keys in the settings: the client's default chain reads them from the environment.
    store = ObjectStore(
        replace(
            s3_server.store_config(S3_BUCKET, prefix="from-env"),
            access_key_id=None,
            secret_access_key=None,
        )
    )
    stored = await store.put(store.key("q", 3, "a.txt"), b"signed", content_type="text/plain")
    assert s3_server.object_path(S3_BUCKET, stored.key).read_bytes() == b"signed"


async def test_a_stopped_store_is_a_retryable_storage_unavailable_within_seconds(
    restartable_s3_server: LocalS3Server,
) -> None:
    store = store_for(restartable_s3_server)
    key = store.key("default", 4, "page.html")
    restartable_s3_server.stop_server()
    started = time.monotonic()
    with pytest.raises(RetryLater) as raised:
        await store.put(key, b"<html></html>", content_type="text/html")
    assert raised.value.reason == "storage_unavailable"
    assert key in raised.value.message
    assert time.monotonic() - started < 30

    restartable_s3_server.start_server()
    await store.put(key, b"<html></html>", content_type="text/html")
    assert await store.get(key) == b"<html></html>"


async def test_a_wrong_secret_is_storage_unavailable_and_writes_nothing(
    s3_server: LocalS3Server,
) -> None:
    store = ObjectStore(
        replace(s3_server.store_config(S3_BUCKET, prefix="refused"), secret_access_key="wrong")
    )
    with pytest.raises(RetryLater) as raised:
        await store.put(store.key("q", 5, "a"), b"x", content_type="text/plain")
    assert raised.value.reason == "storage_unavailable"
    assert not s3_server.object_path(S3_BUCKET, "refused/q/5/a").exists()
