"""Real pods failing and going away: scale-in spares the busy pod (pod-deletion-cost reaches the
real ReplicaSet controller), a deleted pod drains within its grace period, a killed worker
container's rows come back through lease rescue, the operator pod and the PostgreSQL pod can be
replaced mid-run, and a pod that rendered hundreds of pages leaves no zombie behind tini."""

from __future__ import annotations

import json
import threading
import time

import pytest

from scrapeq.local.release import Release, SitePage, pod_network_site, product_page
from tests.e2e.node.node_parts import (
    apply_job,
    completed_attempts,
    delete_job,
    rows_of,
    slow_pages,
    succeeded,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]


def get(release: Release, kind: str, name: str) -> dict[str, object]:
    body: dict[str, object] = json.loads(
        release.kubectl("get", kind, name, "-n", release.namespace, "-o", "json").stdout
    )
    return body


def test_scale_in_deletes_the_idle_pod_and_spares_the_busy_one(release: Release) -> None:
    both_ready, scaled_in = threading.Event(), threading.Event()

    def answer(path: str) -> SitePage:
        page = product_page(path)
        # One long page keeps its pod busy until the pool has scaled in; the others keep the
        # backlog at two pods' worth until both pods are Ready and one holds the long page,
        # then end, so the backlog drops to that one row and the pool scales in.
        page.delay_seconds = 110
        page.until = scaled_in if path.startswith("/slow") else both_ready
        return page

    with pod_network_site(answer) as (site, _requested):
        urls = [f"{site}/slow-0"] + [f"{site}/medium-{number}" for number in range(7)]
        apply_job(release, "scale-in", urls, timeoutSeconds=120)
        eventually_blocking(
            lambda: len(release.ready_pods("worker")) == 2,
            within=180,
            what="two Ready worker pods for an 8-row backlog",
            every=0.5,
        )
        busy = eventually_blocking(
            lambda: next(
                (row[2] for row in rows_of(release, "scale-in") if row[1] == "processing"
                 and row[0].endswith("/slow-0")),
                None,
            ),
            within=120,
            what="a pod to hold the slow page",
        every=0.5,)  # fmt: skip
        both_ready.set()
        # The quick pages finish; the backlog is the one slow row, so the pool scales to 1.
        remaining = eventually_blocking(
            lambda: (pods := release.pods("worker")) and len(pods) == 1 and pods,
            within=120,
            what="the pool to scale in to one pod",
            every=0.5,
        )
        assert remaining[0]["metadata"]["name"] == busy, (
            "the busy pod was deleted, not the idle one"
        )
        scaled_in.set()
        succeeded(release, "scale-in")
        assert all(count == 1 for count in completed_attempts(release, "scale-in").values())
        delete_job(release, "scale-in")


def test_a_pod_deleted_mid_page_drains_within_its_grace_period_and_loses_nothing(
    release: Release,
) -> None:
    # The slow pages last until the pod is gone (110 s at most, under the rows' timeout).
    pod_gone = threading.Event()
    with pod_network_site(slow_pages("/slow", 110, until=pod_gone)) as (site, _requested):
        urls = [f"{site}/slow-{number}" for number in range(2)]
        apply_job(release, "drain", urls, timeoutSeconds=120)
        holder = eventually_blocking(
            lambda: next(
                (row[2] for row in rows_of(release, "drain") if row[1] == "processing"), None
            ),
            within=180,
            what="a pod to start a slow page",
            every=0.5,
        )
        started = time.monotonic()
        release.kubectl(
            "delete", "pod", holder, "-n", release.namespace, "--wait=true", "--timeout=120s"
        )
        drained_in = time.monotonic() - started
        pod_gone.set()
        pod = get(release, "deployment", release.worker_deployment)
        grace = pod["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert drained_in < grace, f"the pod took {drained_in:.0f}s to exit (grace {grace}s)"
        # Its slow page did not finish in the drain window: released, then done by a new pod.
        succeeded(release, "drain")
        assert completed_attempts(release, "drain") == {url: 1 for url in urls}
        delete_job(release, "drain")


def test_a_killed_worker_container_restarts_and_its_rows_come_back_through_lease_rescue(
    release: Release,
) -> None:
    # The slow pages last until the killed container is back (110 s at most).
    restarted = threading.Event()
    with pod_network_site(slow_pages("/slow", 110, until=restarted)) as (site, _requested):
        urls = [f"{site}/slow-{number}" for number in range(4)]
        apply_job(release, "killed", urls, timeoutSeconds=120)
        holder = eventually_blocking(
            lambda: next(
                (row[2] for row in rows_of(release, "killed") if row[1] == "processing"), None
            ),
            within=180,
            what="a pod to claim rows",
            every=0.5,
        )
        before = get(release, "pod", holder)
        restarts = before["status"]["containerStatuses"][0]["restartCount"]
        # SIGKILL the worker process (tini's child): the container ends as on an OOM kill.
        release.kubectl(
            "exec", holder, "-n", release.namespace, "--", "python3", "-c",
            "import os, signal\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit() and pid != '1':\n"
            "        command = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
            "        if b'scrapeq' in command and b'worker' in command:\n"
            "            os.kill(int(pid), signal.SIGKILL)\n",
            check=False,
        )  # fmt: skip
        eventually_blocking(
            lambda: (
                get(release, "pod", holder)["status"]["containerStatuses"][0]["restartCount"]
                > restarts
            ),
            within=120,
            what="the kubelet to restart the killed worker container",
            every=0.5,
        )
        restarted.set()
        succeeded(release, "killed", timeout=400)
        assert completed_attempts(release, "killed") == {url: 1 for url in urls}
        delete_job(release, "killed")


def test_a_replaced_operator_pod_continues_the_status_without_creating_rows_twice(
    release: Release,
) -> None:
    with pod_network_site(slow_pages("/slow", 3)) as (site, _requested):
        urls = [f"{site}/slow-{number}" for number in range(10)]
        apply_job(release, "operator-replaced", urls)
        eventually_blocking(
            lambda: any(row[1] == "completed" for row in rows_of(release, "operator-replaced")),
            within=180,
            what="the first row to complete",
            every=0.5,
        )
        operator = release.pods("operator")[0]["metadata"]["name"]
        release.kubectl("delete", "pod", operator, "-n", release.namespace, "--wait=true")
        eventually_blocking(
            lambda: release.ready_pods("operator"),
            within=180,
            what="the new operator pod to be Ready",
            every=0.5,
        )
        succeeded(release, "operator-replaced")
        status = release.scrapejob_status("operator-replaced")
        assert status["succeeded"] == len(urls)
        assert sorted(row[0] for row in rows_of(release, "operator-replaced")) == sorted(urls)
        delete_job(release, "operator-replaced")


def test_operator_and_workers_recover_by_themselves_when_the_postgresql_pod_restarts(
    release: Release,
) -> None:
    database = release.pods("database")[0]["metadata"]["name"]
    release.kubectl("delete", "pod", database, "-n", release.namespace, "--wait=true")
    eventually_blocking(
        lambda: release.ready_pods("database"),
        within=180,
        what="the PostgreSQL pod to come back",
        every=0.5,
    )
    with pod_network_site(product_page) as (site, _requested):
        urls = [f"{site}/after-restart-{number}" for number in range(3)]
        apply_job(release, "after-database-restart", urls)
        succeeded(release, "after-database-restart")
        delete_job(release, "after-database-restart")


def test_tini_leaves_no_zombie_in_a_worker_pod_after_200_pages(release: Release) -> None:
    # One slow page keeps a pod (and so the pool) alive until its processes are listed: the
    # autoscaler may delete any idle pod, and takes the pool to zero 10 s after the last page.
    listed = threading.Event()
    with pod_network_site(slow_pages("/slow", 150, until=listed)) as (site, _requested):
        urls = [f"{site}/page-{number}" for number in range(200)] + [f"{site}/slow-hold"]
        apply_job(release, "two-hundred", urls, timeoutSeconds=180)

        def pages_done_and_holder() -> str | None:
            rows = rows_of(release, "two-hundred")
            pages = [row for row in rows if "/page-" in row[0]]
            holder = [row[2] for row in rows if row[0].endswith("/slow-hold")]
            if len(pages) == 200 and all(row[1] == "completed" for row in pages) and holder:
                return holder[0]
            return None

        pod = eventually_blocking(
            pages_done_and_holder, within=600, what="the 200 pages to be completed", every=0.5
        )
        completed_by_pod = sum(
            1 for row in rows_of(release, "two-hundred") if row[2] == pod and row[1] == "completed"
        )
        listing = release.kubectl(
            "exec", pod, "-n", release.namespace, "--", "python3", "-c",
            "import json, os\n"
            "states = {}\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit():\n"
            "        stat = open(f'/proc/{pid}/stat').read()\n"
            "        states[pid] = stat.rsplit(')', 1)[1].split()[0]\n"
            "print(json.dumps(states))\n",
        ).stdout  # fmt: skip
        listed.set()
        states = json.loads(listing)
        assert completed_by_pod > 0, f"{pod} holds the slow page but completed no other page"
        assert len(states) > 2, "the worker pod should run tini, the worker and Chromium"
        assert "Z" not in states.values(), f"defunct processes in {pod}: {states}"
        succeeded(release, "two-hundred", timeout=300)
        delete_job(release, "two-hundred")
