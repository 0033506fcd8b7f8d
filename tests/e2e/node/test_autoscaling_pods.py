"""The path a user takes, on real Pods: a ScrapeJob applied while no worker runs scales the
worker Deployment up from zero, pods do every row, and the pool goes back to zero after the
cool-down."""

from __future__ import annotations

import json
import threading

import pytest

from scrapeq.local.release import CHART, Release, pod_network_site, product_page
from tests.e2e.node.node_parts import (
    apply_job,
    completed_attempts,
    delete_job,
    slow_pages,
    succeeded,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]


def test_a_scrapejob_scales_worker_pods_up_from_zero_and_back_to_zero(release: Release) -> None:
    # At zero means no worker pod at all: a pod being deleted still works until its SIGTERM
    # arrives and then drains, and it would take the job's rows before any scale-up.
    eventually_blocking(
        lambda: not release.all_pods("worker"),
        within=300,
        what="the worker pool to be at zero before the job",
        every=0.5,
    )
    with pod_network_site(product_page) as (site, requested):
        urls = [f"{site}/product-{number}" for number in range(12)]
        apply_job(release, "scale-from-zero", urls)
        workers = eventually_blocking(
            lambda: release.ready_pods("worker"),
            within=120,
            what="worker pods to scale up from zero and become Ready",
            every=0.5,
        )
        assert workers
        succeeded(release, "scale-from-zero")
        assert release.scrapejob_status("scale-from-zero")["succeeded"] == len(urls)
        rows = release.sql(
            "SELECT status::text, processed_by, result->'fields'->>'title' FROM scraping_jobs"
            " WHERE owner_name = %s AND owner_namespace = %s",
            "scale-from-zero",
            release.namespace,
        )
        assert len(rows) == len(urls)
        assert {row[0] for row in rows} == {"completed"}
        # Every row was done by a pod of the worker Deployment (the pod name is the worker id).
        assert all(row[1].startswith(release.worker_deployment + "-") for row in rows), rows
        assert sorted(row[2] for row in rows) == sorted(url.rsplit("/", 1)[1] for url in urls)
        assert sorted(set(requested)) == sorted(f"/product-{number}" for number in range(12))
    eventually_blocking(
        lambda: not release.all_pods("worker"),
        within=240,
        what="the worker pods to be gone after the cool-down",
        every=0.5,
    )
    delete_job(release, "scale-from-zero")


def test_helm_upgrade_leaves_the_replicas_of_a_pool_the_operator_scaled_up(
    release: Release,
) -> None:
    # The slow pages last until the upgrade is checked (110 s at most), keeping the pool busy.
    upgraded = threading.Event()
    with pod_network_site(slow_pages("/slow", 110, until=upgraded)) as (site, _requested):
        apply_job(
            release, "busy-during-upgrade", [f"{site}/slow-{n}" for n in range(8)],
            timeoutSeconds=120,
        )  # fmt: skip
        eventually_blocking(
            lambda: deployment_replicas(release) == 2,
            within=120,
            what="the operator to scale the pool to 2 for an 8-row backlog",
            every=0.5,
        )
        release.helm_command(
            "upgrade", release.name, str(CHART), "-n", release.namespace, "--reuse-values",
            "--wait", "--timeout", "300s",
        )  # fmt: skip
        # The chart renders no replicas for an autoscaled pool: the upgrade keeps the 2.
        assert deployment_replicas(release) == 2
        upgraded.set()
        succeeded(release, "busy-during-upgrade")
        assert all(
            count == 1 for count in completed_attempts(release, "busy-during-upgrade").values()
        )
        delete_job(release, "busy-during-upgrade")


def deployment_replicas(release: Release) -> int:
    body = json.loads(
        release.kubectl(
            "get", "deployment", release.worker_deployment, "-n", release.namespace, "-o", "json"
        ).stdout
    )
    return int(body["spec"].get("replicas") or 0)
