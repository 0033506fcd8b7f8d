"""A ScrapeJob's spec.keep through the real operator and a `scrapeq worker` process configured
for an object store the way the chart configures it (SCRAPEQ_OBJECT_STORE_* and AWS_*
environment variables): the artifacts land in a real S3 server (versitygw) and the rows'
results hold their keys. Static pages: no browser is involved."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from functools import partial

import psycopg
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
    worker_command,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.s3]

PAGES = {
    f"/doc/{number}": f"<html><body><h1>Document {number}</h1></body></html>" for number in (1, 2)
}


def _has_rows(database_url: str, uid: str, count: int) -> bool:
    return owner_progress(database_url, uid).total == count


def test_a_scrapejob_that_keeps_html_and_text_gets_them_in_the_bucket_with_keys_in_its_rows(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
) -> None:
    operator_factory(empty_database_url)
    prefix = f"e2e-{namespace}"
    with loopback_site(lambda path: (PAGES.get(path) or "").encode() or None) as url:
        manifest = scrapejob(
            "keeps",
            urls=[url + "/doc/1", url + "/doc/2"],
            render=False,
            keep=["html", "text"],
        )
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)
        uid = kubectl.get("scrapejob", "keeps", namespace)["metadata"]["uid"]
        eventually_blocking(
            partial(_has_rows, empty_database_url, uid, 2), within=30, what="the rows"
        )
        worker = subprocess.run(
            worker_command("--burst"),
            cwd=REPOSITORY_ROOT,
            env={
                **os.environ,
                "DATABASE_URL": empty_database_url,
                "SCRAPEQ_OBJECT_STORE_BUCKET": S3_BUCKET,
                "SCRAPEQ_OBJECT_STORE_ENDPOINT": s3_server.endpoint,
                "SCRAPEQ_OBJECT_STORE_REGION": s3_server.region,
                "SCRAPEQ_OBJECT_STORE_PREFIX": prefix,
                "SCRAPEQ_OBJECT_STORE_PATH_STYLE": "true",
                "AWS_ACCESS_KEY_ID": s3_server.access_key,
                "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
            },
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert worker.returncode == 0, worker.stderr[-3000:]

    with psycopg.connect(empty_database_url) as conn:
        rows = conn.execute(
            "SELECT id, status::text, result FROM scraping_jobs WHERE owner_uid = %s",
            (uid,),
        ).fetchall()
    assert len(rows) == 2
    for job_id, status, result in rows:
        assert status == "completed", result
        number = result["url"].rsplit("/", 1)[1]
        html = result["artifacts"]["html"]
        assert html["key"] == f"{prefix}/default/{job_id}/page.html"
        stored = s3_server.object_path(S3_BUCKET, html["key"]).read_bytes()
        assert stored.decode() == PAGES[f"/doc/{number}"]
        assert hashlib.sha256(stored).hexdigest() == html["sha256"]
        text = s3_server.object_path(S3_BUCKET, result["artifacts"]["text"]["key"]).read_text()
        assert text == f"Document {number}"
