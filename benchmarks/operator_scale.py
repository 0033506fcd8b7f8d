"""Operator benchmark on the real control plane: many ScrapeJobs, one huge one, the autoscaler.

    python -m benchmarks.operator_scale                  # issue sizes: 1,000 jobs, 100,000 URLs
    python -m benchmarks.operator_scale --jobs 100 --big-urls 10000   # a smoke run

Starts a throw-away PostgreSQL and kube-apiserver + etcd (no kubelet), applies the CRDs, and runs
`python -m scrapeq operator` as a subprocess with its default settings. The benchmark plays the
workers through the queue package (claim_jobs + complete_many), so rows finish as fast as the
database allows and the figures are the operator's own. Measures:

- enqueue_jobs: `kubectl create` of N single-URL ScrapeJobs (Lists of 500, four kubectl
  processes at once) -> every row in the queue,
  with stand-in workers completing rows as they appear (a pool that keeps up);
- status_after_last_completion: the last of those rows completes -> every ScrapeJob Succeeded;
- status_lag_per_job: for each of those jobs, its row's completion (committed by the stand-in
  worker) -> a watch the benchmark holds on the ScrapeJobs sees it Succeeded: p50, p99, max (a
  job whose change a lost watch missed counts until the listing saw every job Succeeded);
- api_writes_per_lifecycle: write requests (POST/PUT/PATCH/DELETE) on scrapejobs, their status
  and Events during create -> run -> Succeeded -> delete, from kube-apiserver's
  apiserver_request_total, per job: all of them, and the operator's alone (total minus the
  user's one create and one delete);
- enqueue_big_job / status_after_last_completion_big: one ScrapeJob with M URLs from a
  gzip-compressed ConfigMap key (urlsFrom);
- operator_peak_rss: VmHWM of the operator process after both phases;
- autoscaler_reaction: rows appear in a pool's queue -> its Deployment's replicas change
  (several samples, each with a fresh Deployment and queue).

Output: one JSON object per measure on its own line, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import scrapeq_queue
import yaml
from scrapeq_operator.vocabulary import GROUP, PLURAL, VERSION

from scrapeq.local.controlplane import LocalControlPlane
from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import (
    free_port,
    terminate,
    wait_for_established_crd,
    wait_until,
)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
# The project's CRDs (ScrapeJob, SitePolicy, QueuePolicy), each file named for its CRD: the
# operator runs against the API it is installed with.
CRD_PATHS = sorted((REPOSITORY_ROOT / "crds").glob("*.yaml"))
NAMESPACE = "bench"
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
COUNTED_RESOURCES = {"scrapejobs", "events"}
# The ScrapeJobs of one `kubectl create`, and how many such processes run at once.
CREATE_CHUNK = 500
CREATE_PROCESSES = 4
# Rows claimed and completed per round by the benchmark's stand-in worker.
WORKER_BATCH = 1000
GOALS = {
    "api_writes_per_lifecycle": "<= 4 per single-URL job",
    "operator_peak_rss": "<= 250 MB at 1,000 ScrapeJobs, <= 300 MB at 10,000",
    "status_lag_per_job": "p99 <= 10 s",
    "autoscaler_reaction": "<= 5 s",
}


def emit(results: list[dict[str, Any]], measure: str, **fields: Any) -> None:
    record = {"measure": measure, **fields}
    results.append(record)
    print(json.dumps(record), flush=True)


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *arguments: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(arguments[:3])}: {result.stderr[-2000:]}")
        return result.stdout

    def writes(self) -> dict[str, int]:
        """Write requests served so far per verb/resource/subresource (apiserver metrics)."""
        counts: dict[str, int] = {}
        for line in self.run("get", "--raw", "/metrics").splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if labels.get("verb") in WRITE_VERBS and labels.get("resource") in COUNTED_RESOURCES:
                key = "/".join(
                    part
                    for part in (labels["verb"], labels["resource"], labels.get("subresource", ""))
                    if part
                )
                # Refused writes are requests too; the breakdown names their code.
                if labels.get("code") not in {"200", "201"}:
                    key += f" ({labels.get('code')})"
                counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def scrapejob_phases(self) -> list[str]:
        """Every ScrapeJob's phase ("-" before it has one); one list request."""
        template = '{range .items[*]}{.status.phase}{"-"}{"\\n"}{end}'
        listed = self.run("get", "scrapejobs", "-n", NAMESPACE, "-o", f"jsonpath={template}")
        return [line.rstrip("-") or "-" for line in listed.splitlines()]


class SucceededWatch:
    """A watch on the ScrapeJobs in the background: when each was first seen Succeeded
    (monotonic), from the events as they arrive. The API server ends a watch now and then (and
    drops one that falls behind); the watch is then resumed from the last resourceVersion it
    saw, so no change is missed, and listed again only if that version is gone (410)."""

    def __init__(self, kube: Kube, log: Path) -> None:
        self.seen: dict[str, float] = {}
        self.starts = 0
        self.relists = 0
        self.log = log
        self._api = kubernetes.client.CustomObjectsApi(
            kubernetes.config.new_client_from_config(config_file=str(kube.kubeconfig))
        )
        self._stopped = threading.Event()
        self._watch: kubernetes.watch.Watch | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _note(self, item: dict[str, Any]) -> None:
        name = item["metadata"]["name"]
        if (item.get("status") or {}).get("phase") == "Succeeded" and name not in self.seen:
            self.seen[name] = time.monotonic()

    def _list(self) -> str:
        listed = self._api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        for item in listed["items"]:
            self._note(item)
        return str(listed["metadata"]["resourceVersion"])

    def _read(self) -> None:
        version = self._list()
        while not self._stopped.is_set():
            self.starts += 1
            self._watch = kubernetes.watch.Watch()
            try:
                for event in self._watch.stream(
                    self._api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NAMESPACE,
                    PLURAL,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=300,
                ):
                    item = event["object"]
                    version = str(item["metadata"]["resourceVersion"])
                    if event["type"] in {"ADDED", "MODIFIED"}:
                        self._note(item)
            except kubernetes.client.ApiException as error:
                if self._stopped.is_set():
                    return
                with self.log.open("a") as log:
                    log.write(f"watch ended: {error.status} {error.reason}\n")
                if error.status == 410:
                    self.relists += 1
                    version = self._list()
            except Exception as error:
                if self._stopped.is_set():
                    return
                with self.log.open("a") as log:
                    log.write(f"watch ended: {error!r}\n")
                self._stopped.wait(1.0)

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)


def poll(condition: Callable[[], bool], *, timeout: float, what: str, interval: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def queue_call(database_url: str, call: Callable[[Any], Any]) -> Any:
    async def run() -> Any:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return await call(conn)

    return asyncio.run(run())


def backlog(database_url: str, queue: str) -> scrapeq_queue.QueueBacklog:
    found = queue_call(database_url, lambda conn: scrapeq_queue.queue_backlog(conn, [queue]))
    return found[queue]  # type: ignore[no-any-return]


def complete_everything(database_url: str, queue: str) -> float:
    """Act as the workers: claim and complete every row of `queue`; return when the last
    completion committed (monotonic)."""

    async def run() -> float:
        finished_at = time.monotonic()
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            while True:
                jobs = await scrapeq_queue.claim_jobs(
                    conn,
                    worker_id="bench-worker",
                    queues=[queue],
                    limit=WORKER_BATCH,
                    lease_seconds=300,
                    politeness=scrapeq_queue.NO_SITE_LIMIT,
                )
                if not jobs:
                    return finished_at
                await scrapeq_queue.complete_many(
                    conn,
                    [
                        scrapeq_queue.Completion(job.id, job.attempt, {"ok": True}, 0.01)
                        for job in jobs
                    ],
                )
                finished_at = time.monotonic()

    return asyncio.run(run())


class StandInWorker:
    """Workers that keep up: a thread that claims and completes `queue` rows as they appear
    (every 0.1 s), like a worker pool that is not the bottleneck."""

    def __init__(self, database_url: str, queue: str) -> None:
        self.database_url = database_url
        self.queue = queue
        self.completed = 0
        self.last_completion = time.monotonic()
        # Each completed row's owner (ScrapeJob name) -> when its completion committed.
        self.completed_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            while not self._stop.is_set():
                jobs = await scrapeq_queue.claim_jobs(
                    conn,
                    worker_id="bench-worker",
                    queues=[self.queue],
                    limit=WORKER_BATCH,
                    lease_seconds=300,
                    politeness=scrapeq_queue.NO_SITE_LIMIT,
                )
                if not jobs:
                    await asyncio.sleep(0.1)
                    continue
                await scrapeq_queue.complete_many(
                    conn,
                    [
                        scrapeq_queue.Completion(job.id, job.attempt, {"ok": True}, 0.01)
                        for job in jobs
                    ],
                )
                self.last_completion = time.monotonic()
                for job in jobs:
                    if job.owner_name is not None:
                        self.completed_at[job.owner_name] = self.last_completion
                self.completed += len(jobs)

    def __enter__(self) -> StandInWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """The process's resident memory now (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def operator_process(kubeconfig: Path, database_url: str, log: Path) -> Iterator[int]:
    liveness = free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "DATABASE_URL": database_url}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scrapeq",
                "operator",
                "--namespace",
                NAMESPACE,
                "--listen-host",
                "127.0.0.1",
                "--liveness-port",
                str(liveness),
                "--metrics-port",
                str(free_port()),
            ],
            cwd=REPOSITORY_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{liveness}/healthz", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_until(
            healthy,
            timeout=60,
            what="operator /healthz",
            interval=0.2,
            failed=lambda: "exited" if process.poll() is not None else None,
        )
        yield process.pid
    finally:
        terminate(process, grace=20)


def many_jobs(
    kube: Kube,
    database_url: str,
    count: int,
    results: list[dict[str, Any]],
    pid: int,
    workdir: Path,
) -> None:
    queue = "bench-many"
    jobs = [
        {
            "apiVersion": "scrapeq.io/v1alpha1",
            "kind": "ScrapeJob",
            "metadata": {"name": f"job-{number:05d}", "namespace": NAMESPACE},
            "spec": {"url": f"https://shop.example.com/item/{number}", "queue": queue},
        }
        for number in range(count)
    ]
    # kubectl creates a List's objects one request at a time: Lists of CREATE_CHUNK objects,
    # CREATE_PROCESSES kubectl processes at once, as several users (or a CI job) would.
    chunks = [
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": jobs[start : start + CREATE_CHUNK]}
        )
        for start in range(0, count, CREATE_CHUNK)
    ]
    before = kube.writes()
    rss_before = rss_mb(pid)
    watch = SucceededWatch(kube, workdir / "watch.log")
    with StandInWorker(database_url, queue) as worker:
        started = time.monotonic()
        with ThreadPoolExecutor(CREATE_PROCESSES) as creators:
            list(creators.map(lambda chunk: kube.run("create", "-f", "-", stdin=chunk), chunks))
        created = time.monotonic()

        def all_enqueued() -> bool:
            numbers = backlog(database_url, queue)
            return worker.completed + numbers.due_pending + numbers.processing >= count

        poll(all_enqueued, timeout=900, what="every row enqueued", interval=0.1)
        enqueued = time.monotonic()
        poll(lambda: worker.completed >= count, timeout=900, what="every row done", interval=0.1)
        last_completion = worker.last_completion
    emit(
        results,
        "enqueue_jobs",
        jobs=count,
        seconds=round(enqueued - started, 2),
        kubectl_create_seconds=round(created - started, 2),
    )
    # Polled once a second: listing 1,000 objects costs kubectl a good part of a core, which
    # would otherwise be taken from the operator being measured.
    poll(
        lambda: all(phase == "Succeeded" for phase in kube.scrapejob_phases()),
        timeout=900,
        what="every ScrapeJob Succeeded",
        interval=1.0,
    )
    all_succeeded_at = time.monotonic()
    emit(
        results,
        "status_after_last_completion",
        jobs=count,
        seconds=round(time.monotonic() - last_completion, 2),
    )
    # What the operator keeps per ScrapeJob: its resident memory with every job Succeeded and
    # still there, against before they were created.
    rss_with_jobs = rss_mb(pid)
    emit(
        results,
        "operator_rss_kept_per_job",
        jobs=count,
        rss_before_mb=round(rss_before, 1),
        rss_with_jobs_mb=round(rss_with_jobs, 1),
        kb_per_job=round((rss_with_jobs - rss_before) * 1024 / count, 1),
        peak_rss_mb=round(peak_rss_mb(pid), 1),
    )
    # Every job's change reaches the watch (it resumes where it stopped); should one still be
    # missing, it counts with the moment the listing above saw every job Succeeded, an upper
    # bound of its lag.
    with contextlib.suppress(RuntimeError):
        poll(lambda: len(watch.seen) >= count, timeout=30, what="the watch", interval=0.2)
    watch.stop()
    missed = sorted(set(worker.completed_at) - set(watch.seen))
    seen = {**dict.fromkeys(missed, all_succeeded_at), **watch.seen}
    lags = sorted(seen[name] - completed for name, completed in worker.completed_at.items())
    emit(
        results,
        "status_lag_per_job",
        jobs=len(lags),
        p50_seconds=round(lags[len(lags) // 2], 2),
        p99_seconds=round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 2),
        max_seconds=round(lags[-1], 2),
        watch_starts=watch.starts,
        watch_relists=watch.relists,
        watch_missed=len(missed),
        goal=GOALS["status_lag_per_job"],
    )

    # --wait=false: kubectl's own wait checks the objects one by one, slower than the operator.
    kube.run("delete", "scrapejobs", "--all", "-n", NAMESPACE, "--wait=false")
    poll(
        lambda: not kube.scrapejob_phases(),
        timeout=600,
        what="every ScrapeJob deleted",
        interval=0.5,
    )
    # Events are posted asynchronously; let the last ones land before counting.
    time.sleep(2)
    after = kube.writes()
    delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    delta = {key: value for key, value in sorted(delta.items()) if value}
    total = sum(delta.values())
    user_writes = 2 * count  # the user's own create and delete of each job
    emit(
        results,
        "api_writes_per_lifecycle",
        jobs=count,
        all_writes_per_job=round(total / count, 2),
        operator_writes_per_job=round((total - user_writes) / count, 2),
        by_request=delta,
        goal=GOALS["api_writes_per_lifecycle"],
    )
    emit(
        results,
        "operator_peak_rss_after_many",
        jobs=count,
        mb=round(peak_rss_mb(pid), 1),
        operator_cpu_seconds=round(cpu_seconds(pid), 1),
        goal=GOALS["operator_peak_rss"],
    )


def big_job(
    kube: Kube, database_url: str, urls: int, results: list[dict[str, Any]], pid: int, workdir: Path
) -> None:
    queue = "bench-big"
    url_file = workdir / "urls.txt.gz"
    text = "\n".join(f"https://catalogue.example.com/product/{number}" for number in range(urls))
    url_file.write_bytes(gzip.compress(text.encode()))
    kube.run(
        "create", "configmap", "big-list", "-n", NAMESPACE, f"--from-file=urls.txt.gz={url_file}"
    )
    manifest = {
        "apiVersion": "scrapeq.io/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": "big", "namespace": NAMESPACE},
        "spec": {
            "urlsFrom": {"configMapKeyRef": {"name": "big-list", "key": "urls.txt.gz"}},
            "queue": queue,
        },
    }
    started = time.monotonic()
    kube.run("create", "-f", "-", stdin=yaml.safe_dump(manifest))
    poll(
        lambda: backlog(database_url, queue).due_pending >= urls,
        timeout=900,
        what="every row of the big job enqueued",
        interval=0.1,
    )
    emit(
        results,
        "enqueue_big_job",
        urls=urls,
        seconds=round(time.monotonic() - started, 2),
        configmap_bytes=url_file.stat().st_size,
    )
    last_completion = complete_everything(database_url, queue)
    poll(
        lambda: kube.scrapejob_phases() == ["Succeeded"],
        timeout=900,
        what="the big ScrapeJob Succeeded",
        interval=0.2,
    )
    emit(
        results,
        "status_after_last_completion_big",
        urls=urls,
        seconds=round(time.monotonic() - last_completion, 2),
    )
    emit(
        results,
        "operator_peak_rss",
        mb=round(peak_rss_mb(pid), 1),
        operator_cpu_seconds=round(cpu_seconds(pid), 1),
        goal=GOALS["operator_peak_rss"],
    )


def enqueue_rows(database_url: str, urls: list[str], queue: str) -> None:
    async def run(conn: Any) -> list[int]:
        return await scrapeq_queue.enqueue_many(conn, urls, queue=queue)

    queue_call(database_url, run)


def pool_scaled_up(kube: Kube, name: str) -> bool:
    replicas = kube.run(
        "get", "deployment", name, "-n", NAMESPACE, "-o", "jsonpath={.spec.replicas}"
    ).strip()
    return replicas not in ("", "0")


def autoscaler_reaction(
    kube: Kube, database_url: str, samples: int, results: list[dict[str, Any]]
) -> None:
    reactions = []
    for sample in range(samples):
        queue = f"bench-scale-{sample}"
        name = f"pool-{sample}"
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"scrapeq.io/worker-pool": name},
                "annotations": {"scrapeq.io/queue": queue},
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"pool": name}},
                "template": {
                    "metadata": {"labels": {"pool": name}},
                    "spec": {"containers": [{"name": "w", "image": "worker"}]},
                },
            },
        }
        kube.run("create", "-f", "-", stdin=yaml.safe_dump(deployment))
        # Let the autoscaler see the idle pool at least once (it lists pools every round).
        time.sleep(3)
        urls = [f"https://scale.example.com/{sample}/{number}" for number in range(25)]
        started = time.monotonic()
        enqueue_rows(database_url, urls, queue)
        poll(
            partial(pool_scaled_up, kube, name),
            timeout=60,
            what="the pool to scale up",
            interval=0.05,
        )
        reactions.append(time.monotonic() - started)
    emit(
        results,
        "autoscaler_reaction",
        samples=samples,
        median_seconds=round(statistics.median(reactions), 2),
        max_seconds=round(max(reactions), 2),
        goal=GOALS["autoscaler_reaction"],
    )


def print_table(results: list[dict[str, Any]]) -> None:
    print()
    print(f"{'measure':<36} {'figure':<40} goal")
    for record in results:
        measure = record["measure"]
        if "seconds" in record:
            figure = f"{record['seconds']} s"
        elif "kb_per_job" in record:
            figure = (
                f"{record['kb_per_job']} KB ({record['rss_before_mb']} -> "
                f"{record['rss_with_jobs_mb']} MB)"
            )
        elif "p99_seconds" in record:
            figure = (
                f"p50 {record['p50_seconds']} s, p99 {record['p99_seconds']} s, "
                f"max {record['max_seconds']} s"
            )
            if record.get("watch_missed"):
                figure += f" ({record['watch_missed']} missed by the watch)"
        elif "median_seconds" in record:
            figure = f"median {record['median_seconds']} s, max {record['max_seconds']} s"
        elif "mb" in record:
            figure = f"{record['mb']} MB"
        else:
            figure = (
                f"{record['operator_writes_per_job']} by the operator "
                f"({record['all_writes_per_job']} in all)"
            )
        print(f"{measure:<36} {figure:<40} {record.get('goal', '')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--big-urls", type=int, default=100_000)
    parser.add_argument("--scale-samples", type=int, default=5)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="scrapeq-bench-operator-"))
    with LocalPostgres() as postgres, LocalControlPlane() as cluster:
        kube = Kube(cluster.kubeconfig)
        for crd_path in CRD_PATHS:
            kube.run("apply", "-f", str(crd_path))
        for crd_path in CRD_PATHS:
            wait_for_established_crd(Path(cluster.kubeconfig), crd_path.name.removesuffix(".yaml"))
        poll(
            lambda: (
                subprocess.run(
                    ["kubectl", f"--kubeconfig={cluster.kubeconfig}", "get", "scrapejobs", "-A"],
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            ),
            timeout=30,
            what="scrapejobs served",
            interval=0.2,
        )
        kube.run("create", "namespace", NAMESPACE)
        database_url = postgres.dsn()
        with operator_process(cluster.kubeconfig, database_url, workdir / "operator.log") as pid:
            many_jobs(kube, database_url, args.jobs, results, pid, workdir)
            big_job(kube, database_url, args.big_urls, results, pid, workdir)
            autoscaler_reaction(kube, database_url, args.scale_samples, results)
    print_table(results)
    print(f"\n(operator log: {workdir / 'operator.log'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
