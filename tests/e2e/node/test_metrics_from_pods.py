"""Prometheus scrapes the operator and worker pods by their pod addresses, and the dashboard's
backlog and throughput panels return data from them."""

from __future__ import annotations

from typing import Any

import pytest

from scrapeq.local.prometheus import LocalPrometheus
from scrapeq.local.release import Release, pod_network_site, pod_ready
from scripts.dashboard import PANEL_VARIABLES, PANELS
from tests.e2e.node.node_parts import apply_job, delete_job, slow_pages
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.prometheus, pytest.mark.timeout(600)]

CHECKED_PANELS = ("Backlog by queue and state", "Throughput")


def test_prometheus_scrapes_the_pods_and_the_backlog_and_throughput_panels_have_data(
    release: Release, prometheus: LocalPrometheus
) -> None:
    # Quick pages fill the counters; slow ones keep both pods busy (16 pages at 8 at a time, 20 s
    # each) while Prometheus scrapes them, so that no pod leaves before its series have samples.
    with pod_network_site(slow_pages("/slow", 20)) as (site, _requested):
        urls = [f"{site}/quick-{number}" for number in range(8)]
        urls += [f"{site}/slow-{number}" for number in range(16)]
        apply_job(release, "metrics", urls, timeoutSeconds=60)

        def every_worker_ready() -> list[dict[str, Any]]:
            # Every worker pod, not the first Ready one: the pods share the site's 8 slots, and
            # a pod that became Ready first may have claimed nothing (no claimed series at all).
            pods = release.pods("worker")
            return pods if pods and all(pod_ready(pod) for pod in pods) else []

        workers = eventually_blocking(
            every_worker_ready, within=180, what="every worker pod Ready", every=0.5
        )
        operator = release.pods("operator")[0]
        targets = [f"{operator['status']['podIP']}:9102"] + [
            f"{pod['status']['podIP']}:9100" for pod in workers
        ]
        prometheus.set_targets(targets)
        eventually_blocking(
            lambda: len(prometheus.query("up == 1")) == len(targets),
            within=60,
            what=f"Prometheus to scrape every pod: {targets}",
        )
        for panel in PANELS:
            if panel.title not in CHECKED_PANELS:
                continue
            for legend, expression in panel.queries:
                if legend in {"retried", "failed"}:
                    continue  # a healthy run retries and fails nothing
                query = expression
                for variable, value in PANEL_VARIABLES.items():
                    query = query.replace(variable, value)
                prometheus.wait_for_sample(query, timeout=90)
        delete_job(release, "metrics")
