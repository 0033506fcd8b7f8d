"""scrapeq on real Pods: the local single-node cluster, `helm install` with values-local.yaml.

    python -m benchmarks.cluster_pods            # make bench-cluster
    python -m benchmarks.cluster_pods --pages 100   # a quicker run

Uses the node that runs on this machine (`make cluster-up`) or starts one (and stops it after),
loads the images (`make images`), and measures:

- node_ready: the node's start → node Ready and the cluster DNS answering (only when this run
  starts the node);
- helm_install_ready: `helm install` → every pod of the release Ready;
- first_claim_from_zero: `kubectl apply` of a ScrapeJob while the worker pool is at zero → the
  first row claimed by a worker pod (goal ≤ 15 s; KEDA's default polling alone is 30 s);
- pages_per_second: the same N rendered pages done by 2 worker pods and by 2 local
  `scrapeq worker` processes on the same machine (same concurrency, same site, same database);
- node_memory: resident memory of the node's processes (control plane, kubelet, containerd,
  CoreDNS) and of the pods' cgroup, at the end.

Output: one JSON object per measure on its own line, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from scrapeq.local.commands import load_node_images
from scrapeq.local.controlplane import REPOSITORY_ROOT, tool_path
from scrapeq.local.node import POD_NETWORK, LocalNode
from scrapeq.local.processes import terminate, wait_until
from scrapeq.local.release import (
    Release,
    install_release,
    pod_network_site,
    product_page,
    uninstall_release,
)

NAMESPACE = "scrapeq-bench"
POOL_SIZE = 2
GOALS = {"first_claim_from_zero": "<= 15 s with images present"}


def emit(results: list[dict[str, Any]], measure: str, **fields: Any) -> None:
    record = {"measure": measure, **fields}
    results.append(record)
    print(json.dumps(record), flush=True)


def apply_scrapejob(release: Release, name: str, urls: list[str]) -> float:
    """Apply a ScrapeJob; return the time just before kubectl ran (time.time())."""
    manifest = {
        "apiVersion": "scrapeq.io/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": name, "namespace": release.namespace},
        "spec": {"urls": urls, "extract": {"title": {"selector": "h1"}}},
    }
    started = time.time()
    release.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    return started


def job_window(release: Release, name: str) -> tuple[datetime, datetime, int]:
    """First attempt start, last finish and completed rows of one ScrapeJob (database clock)."""
    rows = release.sql(
        "SELECT min(a.started_at), max(a.finished_at), count(*) FILTER (WHERE a.outcome ="
        " 'completed') FROM scrapeq_attempts a JOIN scraping_jobs j ON j.id = a.job_id"
        " WHERE j.owner_name = %s AND j.owner_namespace = %s",
        name,
        release.namespace,
    )
    first, last, completed = rows[0]
    return first, last, int(completed)


def wait_succeeded(release: Release, name: str, timeout: float = 900) -> None:
    wait_until(
        lambda: release.scrapejob_status(name).get("phase") == "Succeeded",
        timeout=timeout,
        what=f"ScrapeJob {name} to succeed",
        interval=0.5,
    )


def set_pool(release: Release, *, minimum: int, maximum: int) -> None:
    release.kubectl(
        "annotate", "deployment", release.worker_deployment, "-n", release.namespace,
        "--overwrite", f"scrapeq.io/min-replicas={minimum}", f"scrapeq.io/max-replicas={maximum}",
    )  # fmt: skip


def first_claim_from_zero(release: Release, site: str, results: list[dict[str, Any]]) -> None:
    wait_until(
        lambda: not release.all_pods("worker"),
        timeout=300,
        what="the worker pool to be at zero",
        interval=0.5,
    )
    applied = apply_scrapejob(release, "from-zero", [f"{site}/from-zero-{n}" for n in range(4)])

    def first_claim() -> bool:
        return bool(
            release.sql(
                "SELECT 1 FROM scraping_jobs WHERE owner_name = 'from-zero'"
                " AND processed_by IS NOT NULL LIMIT 1"
            )
        )

    wait_until(first_claim, timeout=300, what="the first claim by a pod", interval=0.05)
    claimed = release.sql(
        "SELECT extract(epoch FROM min(started_at)) FROM ("
        " SELECT processing_started_at AS started_at FROM scraping_jobs WHERE owner_name ="
        " 'from-zero' UNION ALL SELECT a.started_at FROM scrapeq_attempts a JOIN scraping_jobs"
        " j ON j.id = a.job_id WHERE j.owner_name = 'from-zero') AS claims"
    )[0][0]
    emit(
        results,
        "first_claim_from_zero",
        seconds=round(float(claimed) - applied, 2),
        goal=GOALS["first_claim_from_zero"],
    )
    wait_succeeded(release, "from-zero")


def pods_pages_per_second(
    release: Release, site: str, pages: int, results: list[dict[str, Any]]
) -> float:
    set_pool(release, minimum=POOL_SIZE, maximum=POOL_SIZE)
    wait_until(
        lambda: len(release.ready_pods("worker")) == POOL_SIZE,
        timeout=300,
        what=f"{POOL_SIZE} Ready worker pods",
        interval=0.5,
    )
    apply_scrapejob(release, "pods", [f"{site}/pods-{n}" for n in range(pages)])
    wait_succeeded(release, "pods")
    first, last, completed = job_window(release, "pods")
    rate = completed / (last - first).total_seconds()
    emit(
        results,
        "pages_per_second",
        workers=f"{POOL_SIZE} pods",
        pages=completed,
        rate=round(rate, 1),
    )
    set_pool(release, minimum=0, maximum=0)
    return rate


def local_pages_per_second(
    release: Release, site: str, pages: int, results: list[dict[str, Any]], log_dir: Path
) -> float:
    wait_until(
        lambda: not release.all_pods("worker"),
        timeout=300,
        what="the worker pods to be gone",
        interval=0.5,
    )
    environment = {**os.environ, "DATABASE_URL": release.database_url()}
    processes = []
    for number in range(POOL_SIZE):
        log = open(log_dir / f"local-worker-{number}.log", "wb")  # noqa: SIM115 - the child's
        processes.append(
            subprocess.Popen(
                [
                    sys.executable, "-m", "scrapeq", "worker",
                    "--allow-networks", str(POD_NETWORK), "--metrics-port", "0",
                    "--concurrency", "4", "--worker-id", f"bench-local-{number}",
                ],
                cwd=REPOSITORY_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        log.close()
    try:
        apply_scrapejob(release, "local", [f"{site}/local-{n}" for n in range(pages)])
        wait_succeeded(release, "local")
    finally:
        for process in processes:
            terminate(process, grace=40)
    first, last, completed = job_window(release, "local")
    rate = completed / (last - first).total_seconds()
    emit(
        results,
        "pages_per_second",
        workers=f"{POOL_SIZE} local processes",
        pages=completed,
        rate=round(rate, 1),
    )
    return rate


def node_memory(node: LocalNode, results: list[dict[str, Any]]) -> None:
    components = {}
    for component, pid in node.pids.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        rss_kb = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
        )
        components[component] = round(rss_kb / 1024)
    pods_bytes = 0
    usage = Path("/sys/fs/cgroup/memory/kubepods/memory.usage_in_bytes")
    if usage.exists():
        pods_bytes = int(usage.read_text())
    emit(
        results,
        "node_memory",
        components_mb=components,
        components_total_mb=sum(components.values()),
        pods_mb=round(pods_bytes / 2**20),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200, help="pages for the pages/s runs")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    log_dir = REPOSITORY_ROOT / ".scrapeq" / "bench-cluster"
    log_dir.mkdir(parents=True, exist_ok=True)

    node = LocalNode.attach()
    started_node = node is None
    if node is None:
        node = LocalNode(state_dir=REPOSITORY_ROOT / ".scrapeq" / "node", progress=print)
        started = time.monotonic()
        node.start(load_images=load_node_images)
        emit(results, "node_ready", seconds=round(time.monotonic() - started, 1))
    else:
        load_node_images(node)
    helm = tool_path("helm")
    release: Release | None = None
    try:
        started = time.monotonic()
        release = install_release(node, helm, name="scrapeq-bench", namespace=NAMESPACE)
        emit(results, "helm_install_ready", seconds=round(time.monotonic() - started, 1))
        with pod_network_site(product_page) as (site, _requested):
            first_claim_from_zero(release, site, results)
            pods_rate = pods_pages_per_second(release, site, args.pages, results)
            local_rate = local_pages_per_second(release, site, args.pages, results, log_dir)
            emit(results, "pods_vs_local", ratio=round(pods_rate / local_rate, 2))
        node_memory(node, results)
    finally:
        if release is not None:
            uninstall_release(release)
        if started_node:
            node.stop()
    print()
    print(f"{'measure':<24} figure")
    for record in results:
        figure = {k: v for k, v in record.items() if k != "measure"}
        print(f"{record['measure']:<24} {json.dumps(figure)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
