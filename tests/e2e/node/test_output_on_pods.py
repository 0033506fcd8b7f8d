"""A ScrapeJob's output and webhook on real Pods, through everything that can go wrong at once:
scrapeq installed by Helm with a real S3 server (versitygw on the node's pod network) as the
object store; the first batch lands while later pages are still pending; then the operator pod
is deleted, the S3 server is stopped for 30 s and the webhook receiver answers 500 for a minute.
Every row is in exactly one batch, once, the manifest matches the rows, and the receiver gets
the job's event and each batch's once, with a valid signature (docs/operator.md, "Output to
object storage"; docs/webhooks.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq.local.node import POD_GATEWAY, POD_NETWORK, LocalNode
from scrapeq.local.processes import run_kubectl
from scrapeq.local.release import (
    Release,
    SitePage,
    install_release,
    pod_network_site,
    product_page,
    uninstall_release,
)
from scrapeq.local.s3_server import LocalS3Server
from tests.e2e.node.node_parts import apply_job, release_diagnostics
from tests.e2e.operator.test_webhooks import SIGNING_KEY, Receiver, webhook_receiver
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]

BUCKET = "scrapeq-output"
NAMESPACE = "scrapeq-output"
JOB = "exported"
EARLY_PAGES = 10
LATE_PAGES = 20
# The outages the issue names: the store away for 30 s, the receiver failing for a minute.
STORE_OUTAGE_SECONDS = 30.0
RECEIVER_FAILING_SECONDS = 60.0


@pytest.fixture
def store() -> Iterator[LocalS3Server]:
    """The S3 server the release writes to, on the node's pod network."""
    server = LocalS3Server(buckets=(BUCKET,), host=POD_GATEWAY)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def output_release(
    kube_node: LocalNode, helm_binary: Path, store: LocalS3Server
) -> Iterator[Release]:
    """scrapeq with the S3 server as its object store and webhooks allowed to the pod network."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    secrets = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "store", "namespace": NAMESPACE},
            "stringData": {
                "AWS_ACCESS_KEY_ID": store.access_key,
                "AWS_SECRET_ACCESS_KEY": store.secret_key,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hook", "namespace": NAMESPACE},
            "stringData": {"signing-key": SIGNING_KEY},
        },
    ]
    for manifest in (namespace, *secrets):
        run_kubectl(kube_node.kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
    release = install_release(
        kube_node,
        helm_binary,
        name="output",
        namespace=NAMESPACE,
        values=[
            f"workers.objectStore.bucket={BUCKET}",
            f"workers.objectStore.endpoint={store.endpoint}",
            f"workers.objectStore.region={store.region}",
            "workers.objectStore.pathStyle=true",
            "workers.objectStore.credentials.existingSecret.name=store",
            f"operator.webhooks.allowNetworks={{{POD_NETWORK}}}",
        ],
    )
    try:
        yield release
    finally:
        uninstall_release(release)


def objects(store: LocalS3Server) -> list[Path]:
    return store.objects(BUCKET)


def batch_lines(store: LocalS3Server) -> list[dict[str, Any]]:
    """Every line of every batch object of the job, in key order."""
    return [
        json.loads(line)
        for path in objects(store)
        if path.name.startswith("batch-")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def late_rows_open(release: Release) -> int:
    rows = release.sql(
        "SELECT count(*) FROM scraping_jobs WHERE owner_name = %s AND owner_namespace = %s"
        " AND status IN ('pending', 'processing') AND url_to_scrape LIKE '%%/late-%%'",
        JOB,
        NAMESPACE,
    )
    return int(rows[0][0])


def test_output_and_webhook_survive_an_operator_pod_deleted_a_store_outage_and_a_failing_receiver(
    output_release: Release, store: LocalS3Server
) -> None:
    late = threading.Event()

    def answer(path: str) -> SitePage:
        page = product_page(path)
        if path.startswith("/late-"):
            # In flight until the test lets them end (at most 5 minutes).
            page.delay_seconds = 300
            page.until = late
        return page

    receiver: Receiver
    with webhook_receiver(POD_GATEWAY) as receiver, pod_network_site(answer) as (site, _):
        urls = [f"{site}/early-{n}" for n in range(EARLY_PAGES)]
        urls += [f"{site}/late-{n}" for n in range(LATE_PAGES)]
        apply_job(
            output_release,
            JOB,
            urls,
            render=False,
            timeoutSeconds=300,
            output={"format": "jsonl", "batchRows": 5, "batchSeconds": 2},
            webhooks=[
                {
                    "url": receiver.url,
                    "events": ["Succeeded", "Failed", "Batch"],
                    "secretRef": {"name": "hook", "key": "signing-key"},
                }
            ],
        )
        try:
            # The first batch is in the bucket while the late pages are not done.
            eventually_blocking(
                lambda: any(path.name.startswith("batch-") for path in objects(store)),
                within=180,
                what="the first batch object in the bucket",
                every=0.5,
            )
            assert late_rows_open(output_release) == LATE_PAGES

            # Everything at once: the operator pod goes, the store goes for 30 s, the receiver
            # fails for a minute, and the late pages end meanwhile.
            receiver.failing.set()
            failing_since = time.monotonic()
            store.stop_server()
            outage_began = time.monotonic()
            output_release.kubectl(
                "delete", "pod", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator",
                "--wait=false",
            )  # fmt: skip
            late.set()
            eventually_blocking(
                lambda: late_rows_open(output_release) == 0,
                within=180,
                what="the late pages to finish while the store is away",
                every=0.5,
            )
            time.sleep(max(0.0, STORE_OUTAGE_SECONDS - (time.monotonic() - outage_began)))
            store.start_server()

            eventually_blocking(
                lambda: output_release.scrapejob_status(JOB).get("phase") == "Succeeded",
                within=240,
                what=f"ScrapeJob {JOB} to succeed",
                every=0.5,
            )
            status_output = eventually_blocking(
                lambda: output_release.scrapejob_status(JOB).get("output") or {},
                until=lambda shown: bool(shown.get("manifest")),
                within=240,
                what="status.output to name the manifest",
                every=0.5,
            )
            batches = int(status_output["batches"])
            time.sleep(max(0.0, RECEIVER_FAILING_SECONDS - (time.monotonic() - failing_since)))
            receiver.failing.clear()
            eventually_blocking(
                lambda: len(set(receiver.accepted_ids)),
                until=lambda accepted: accepted >= 1 + batches,
                within=300,
                what="the Succeeded event and every batch's to be accepted once the receiver"
                " answers again",
                every=0.5,
            )
        except Exception:
            print(release_diagnostics(output_release))
            raise

    # Every row in exactly one batch, once; the manifest says the same.
    lines = batch_lines(store)
    assert sorted(line["url"] for line in lines) == sorted(urls)
    [manifest_path] = [path for path in objects(store) if path.name == "manifest.json"]
    manifest = json.loads(manifest_path.read_text())
    assert status_output["rows"] == len(urls)
    assert sum(batch["rows"] for batch in manifest["batches"]) == len(urls)
    assert {Path(batch["key"]).name for batch in manifest["batches"]} == {
        path.name for path in objects(store) if path.name.startswith("batch-")
    }
    # Every event arrived once (the refused attempts were retries of the same events): the
    # job's Succeeded and one per batch, each batch's naming its object; every request the
    # receiver got was signed with the Secret's key.
    assert all(valid for _, valid in receiver.received)
    assert receiver.refused >= 1
    assert len(receiver.accepted_ids) == len(set(receiver.accepted_ids)) == 1 + batches
    accepted = {
        event["id"]: event for event, _ in receiver.received if event["id"] in receiver.accepted_ids
    }
    types = sorted(event["type"] for event in accepted.values())
    assert types == ["io.scrapeq.scrapejob.batch"] * batches + ["io.scrapeq.scrapejob.succeeded"]
    batch_keys = sorted(
        Path(event["data"]["batch"]["key"]).name
        for event in accepted.values()
        if event["type"] == "io.scrapeq.scrapejob.batch"
    )
    assert batch_keys == sorted(Path(batch["key"]).name for batch in manifest["batches"])
