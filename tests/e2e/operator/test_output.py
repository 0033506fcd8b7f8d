"""A ScrapeJob with spec.output through the real operator (a real kube-apiserver, PostgreSQL and
S3 server) and a `scrapeq worker` process: its rows land in batches in the bucket, the manifest
counts them, and status.output says where they are (docs/scrapejob.md, "Output to object
storage"). Static pages: no browser is involved."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET
from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    loopback_site,
    owner_progress,
    scrapejob,
    wait_for_status,
    worker_command,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.s3]

PAGES = {f"/item/{number}": f"<html><h1>Item {number}</h1></html>" for number in range(5)}


def _store_environment(s3_server: LocalS3Server, namespace: str) -> dict[str, str]:
    return {
        "SCRAPEQ_OBJECT_STORE_BUCKET": S3_BUCKET,
        "SCRAPEQ_OBJECT_STORE_ENDPOINT": s3_server.endpoint,
        "SCRAPEQ_OBJECT_STORE_REGION": s3_server.region,
        "SCRAPEQ_OBJECT_STORE_PREFIX": f"e2e-{namespace}",
        "SCRAPEQ_OBJECT_STORE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
    }


def _has_rows(database_url: str, uid: str, count: int) -> bool:
    return owner_progress(database_url, uid).total == count


def _status_output(kubectl: Kubectl, namespace: str, name: str = "exported") -> dict[str, Any]:
    status = kubectl.get("scrapejob", name, namespace).get("status") or {}
    return dict(status.get("output") or {})


def test_a_scrapejob_with_an_output_ends_with_its_manifest_shown_in_its_status(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
) -> None:
    operator_factory(empty_database_url, environment=_store_environment(s3_server, namespace))
    with loopback_site(lambda path: (PAGES.get(path) or "").encode() or None) as url:
        manifest = scrapejob(
            "exported",
            urls=[url + path for path in PAGES] + [url + "/missing"],
            render=False,
            extract={"title": {"selector": "h1"}},
        )
        manifest["metadata"]["namespace"] = namespace
        manifest["spec"]["output"] = {"batchRows": 2, "batchSeconds": 1}
        manifest["spec"]["retries"] = {"limit": 0}
        kubectl.apply(manifest)
        uid = kubectl.get("scrapejob", "exported", namespace)["metadata"]["uid"]
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, 6), within=30, what="the rows"
        )
        worker = subprocess.run(
            worker_command("--burst"),
            cwd=REPOSITORY_ROOT,
            env={**os.environ, "DATABASE_URL": empty_database_url},
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert worker.returncode == 0, worker.stderr[-3000:]

    shown = eventually_blocking(
        partial(_status_output, kubectl, namespace),
        until=lambda output: "manifest" in output,
        within=60,
        what="status.output with the manifest",
    )
    prefix = f"e2e-{namespace}/output/{namespace}/exported/{uid}"
    assert shown["bucket"] == S3_BUCKET
    assert shown["prefix"] == prefix
    assert shown["rows"] == 6
    assert shown["manifest"] == f"{prefix}/manifest.json"
    document = json.loads(s3_server.object_path(S3_BUCKET, shown["manifest"]).read_text())
    assert document["counts"] == {"completed": 5, "failed": 1, "cancelled": 0}
    lines = [
        json.loads(line)
        for batch in document["batches"]
        for line in s3_server.object_path(S3_BUCKET, batch["key"]).read_text().splitlines()
    ]
    assert sorted(line["url"] for line in lines) == sorted(
        [url + path for path in PAGES] + [url + "/missing"]
    )
    assert {
        line["result"]["fields"]["title"] for line in lines if line["state"] == "completed"
    } == {f"Item {number}" for number in range(5)}
    secret_values = {s3_server.access_key, s3_server.secret_key}
    assert not secret_values & set(map(str, shown.values()))


def test_a_scrapejob_asking_for_output_waits_with_no_object_store_and_queues_nothing(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url)
    manifest = scrapejob("unstored", url="https://shop.example.com/", output={"format": "csv"})
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "unstored", namespace)["metadata"]["uid"]

    status = wait_for_status(
        kubectl,
        namespace,
        "unstored",
        lambda status: status.get("reason") == "NoObjectStore",
        what="Ready=False NoObjectStore",
    )
    assert "SCRAPEQ_OBJECT_STORE_BUCKET" in status["message"]
    assert owner_progress(empty_database_url, uid).total == 0


def test_a_deleted_scrapejob_gets_its_cancelled_rows_in_a_last_batch_and_a_manifest(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
) -> None:
    operator_factory(empty_database_url, environment=_store_environment(s3_server, namespace))
    manifest = scrapejob(
        "abandoned",
        urls=[f"https://shop{number}.example.com/" for number in range(3)],
        output={"batchRows": 100, "prefix": "kept"},
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    uid = kubectl.get("scrapejob", "abandoned", namespace)["metadata"]["uid"]
    eventually_blocking(partial(_has_rows, empty_database_url, uid, 3), within=30, what="the rows")

    kubectl.run("delete", "scrapejob", "abandoned", "-n", namespace, "--wait=true")

    key = f"e2e-{namespace}/kept/{namespace}/abandoned/{uid}/manifest.json"
    path = s3_server.object_path(S3_BUCKET, key)
    eventually_blocking(path.exists, within=30, what="the manifest of the deleted job")
    document = json.loads(path.read_text())
    assert document["counts"] == {"completed": 0, "failed": 0, "cancelled": 3}
    assert document["rows"] == 3


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"format": "xml"}, "spec.output.format: Unsupported value"),
        ({"batchRows": 0}, "spec.output.batchRows: Invalid value"),
        ({"batchSeconds": 7200}, "spec.output.batchSeconds: Invalid value"),
        ({"prefix": "a/../b"}, "may not contain '.' or '..' segments"),
        ({"prefix": "/abs"}, "spec.output.prefix: Invalid value"),
    ],
)
def test_the_api_server_refuses_an_output_the_operator_could_not_write(
    kubectl: Kubectl, namespace: str, output: dict[str, Any], message: str
) -> None:
    manifest = scrapejob("refused", url="https://shop.example.com/", output=output)
    manifest["metadata"]["namespace"] = namespace
    result = kubectl.apply(manifest, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_the_output_of_a_scrapejob_cannot_change_once_created(
    kubectl: Kubectl, namespace: str
) -> None:
    manifest = scrapejob("fixed", url="https://shop.example.com/", output={"format": "jsonl"})
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    manifest["spec"]["output"] = {"format": "csv"}
    result = kubectl.apply(manifest, check=False)
    assert result.returncode != 0
    assert "spec is immutable" in result.stderr


def test_an_operator_killed_mid_run_loses_and_duplicates_no_row_of_the_output(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
) -> None:
    environment = _store_environment(s3_server, namespace)
    first = operator_factory(empty_database_url, environment=environment)
    with loopback_site(lambda path: (PAGES.get(path) or "").encode() or None) as url:
        manifest = scrapejob(
            "survivor",
            urls=[url + path for path in PAGES],
            render=False,
            output={"batchRows": 2, "batchSeconds": 1},
        )
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
        uid = kubectl.get("scrapejob", "survivor", namespace)["metadata"]["uid"]
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, len(PAGES)), within=30, what="the rows"
        )
        folder = s3_server.object_path(
            S3_BUCKET, f"e2e-{namespace}/output/{namespace}/survivor/{uid}"
        )
        worker = subprocess.Popen(
            worker_command("--burst"),
            cwd=REPOSITORY_ROOT,
            env={**os.environ, "DATABASE_URL": empty_database_url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            eventually_blocking(
                lambda: folder.exists() and any(folder.iterdir()),
                within=60,
                what="the first batch",
            )
            assert first.process is not None
            first.process.kill()  # no shutdown of any kind
            first.process.wait(timeout=30)
            first.process = None
            assert worker.wait(timeout=90) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=30)

    operator_factory(empty_database_url, environment=environment)
    shown = eventually_blocking(
        partial(_status_output, kubectl, namespace, "survivor"),
        until=lambda output: "manifest" in output,
        within=60,
        what="the manifest after the restart",
    )
    document = json.loads(s3_server.object_path(S3_BUCKET, shown["manifest"]).read_text())
    ids = [
        json.loads(line)["id"]
        for batch in document["batches"]
        for line in s3_server.object_path(S3_BUCKET, batch["key"]).read_text().splitlines()
    ]
    assert len(ids) == len(set(ids)) == len(PAGES)
    assert document["counts"]["completed"] == len(PAGES)
