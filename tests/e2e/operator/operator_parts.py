"""Parts for operator tests on the real kube-apiserver: the CRD, a namespace per test,
kubectl, and the operator as a local process (`python -m scrapeq operator`).

There is no kubelet: Deployments get no Pods and namespaces never finish deleting, so every
test works in a namespace of its own and nothing waits for pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import scrapeq_queue
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scrapeq.local.processes import LocalPartError, free_port, terminate, wait_until
from tests.waiting import eventually_blocking

T = TypeVar("T")

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = REPOSITORY_ROOT / "crds" / "scrapejobs.scrapeq.io.yaml"
SITE_POLICY_CRD_PATH = REPOSITORY_ROOT / "crds" / "sitepolicies.scrapeq.io.yaml"
QUEUE_POLICY_CRD_PATH = REPOSITORY_ROOT / "crds" / "queuepolicies.scrapeq.io.yaml"

# Short loops so that tests see changes in seconds; production defaults are in settings.py.
FAST_OPERATOR_ENVIRONMENT = {
    "SCRAPEQ_OPERATOR_STATUS_SWEEP_SECONDS": "3",
    "SCRAPEQ_OPERATOR_STATUS_POLL_SECONDS": "0.5",
    "SCRAPEQ_OPERATOR_STATUS_DEBOUNCE_SECONDS": "0.1",
    "SCRAPEQ_OPERATOR_AUTOSCALER_INTERVAL_SECONDS": "0.5",
    "SCRAPEQ_OPERATOR_DATABASE_RETRY_SECONDS": "1",
    # A stopped test database is noticed in a second, not five (the local server answers in ms).
    "SCRAPEQ_OPERATOR_DATABASE_TIMEOUT_SECONDS": "1",
    "SCRAPEQ_OPERATOR_NOT_READY_RETRY_SECONDS": "2",
    "SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS": "1",
    "SCRAPEQ_OPERATOR_DEPENDENCY_POLL_SECONDS": "1",
    "SCRAPEQ_OPERATOR_QUEUE_POLICY_SYNC_SECONDS": "1",
}


@dataclass
class Kubectl:
    """kubectl against the test cluster, as the admin user unless told otherwise."""

    kubeconfig: Path

    def run(
        self, *arguments: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(arguments)} failed ({result.returncode}): {result.stderr}"
            )
        return result

    def apply(
        self, manifest: dict[str, Any], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=yaml.safe_dump(manifest), check=check)

    def create(
        self, manifest: dict[str, Any], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("create", "-f", "-", stdin=yaml.safe_dump(manifest), check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        result = self.run("get", kind, name, "-n", namespace, "-o", "json")
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    def exists(self, kind: str, name: str, namespace: str) -> bool:
        result = self.run(
            "get", kind, name, "-n", namespace, "--ignore-not-found", "-o", "name", check=False
        )
        return bool(result.stdout.strip())


def wait_for_status(
    kubectl: Kubectl,
    namespace: str,
    name: str,
    wanted: Callable[[dict[str, Any]], Any],
    *,
    what: str,
    timeout: float = 30,
) -> dict[str, Any]:
    """Poll a ScrapeJob until `wanted(status)` holds; return that status."""

    def status_if_wanted() -> dict[str, Any] | None:
        status = dict(kubectl.get("scrapejob", name, namespace).get("status") or {})
        return status if wanted(status) else None

    found: dict[str, Any] = eventually_blocking(status_if_wanted, within=timeout, what=what)
    return found


@dataclass
class OperatorProcess:
    """`python -m scrapeq operator` running against the test cluster and database."""

    kubeconfig: Path
    database_url: str
    # The namespace to watch; empty means every namespace (cluster-wide).
    namespace: str
    log_path: Path
    environment: dict[str, str] = field(default_factory=dict)
    metrics_port: int = 0
    liveness_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        env = {
            **os.environ,
            **FAST_OPERATOR_ENVIRONMENT,
            **self.environment,
            "KUBECONFIG": str(self.kubeconfig),
            "DATABASE_URL": self.database_url,
            "PYTHONUNBUFFERED": "1",
        }
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scrapeq",
                "operator",
                *(["--namespace", self.namespace] if self.namespace else []),
                "--listen-host",
                "127.0.0.1",
                "--metrics-port",
                str(self.metrics_port),
                "--liveness-port",
                str(self.liveness_port),
                "--verbose",
            ],
            cwd=REPOSITORY_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            wait_until(
                self._healthy,
                timeout=60,
                what="the operator's /healthz",
                interval=0.2,
                failed=self._exited,
            )
        except LocalPartError as error:
            raise AssertionError(f"{error}\n--- operator log ---\n{self.log_tail()}") from error

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _exited(self) -> str | None:
        if self.process is not None and self.process.poll() is not None:
            return f"the operator exited with {self.process.returncode}"
        return None

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as response:
            return str(response.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """The current value of one sample of the operator's metrics (0 before it exists)."""
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0

    def log_tail(self, characters: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-characters:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, grace=15)
            self.process = None


def scrapejob(name: str, **spec: Any) -> dict[str, Any]:
    """A ScrapeJob manifest."""
    return {
        "apiVersion": "scrapeq.io/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": name},
        "spec": spec,
    }


WORKER_ID = "e2e-test-worker"


def run_operator_command(
    *arguments: str, environment: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`scrapeq operator ARGUMENTS` to its end, with `environment` over this process's."""
    return subprocess.run(
        [sys.executable, "-m", "scrapeq", "operator", *arguments],
        cwd=REPOSITORY_ROOT,
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_queue_call(database_url: str, call: Callable[[Any], Awaitable[T]]) -> T:
    """Run one scrapeq_queue call on a fresh autocommit connection (from synchronous tests)."""

    async def run() -> T:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return await call(conn)

    return asyncio.run(run())


def owner_progress(database_url: str, uid: str) -> scrapeq_queue.OwnerProgress:
    """The queue's row counts for one ScrapeJob."""
    progress = run_queue_call(database_url, lambda conn: scrapeq_queue.owner_progress(conn, [uid]))
    return progress[uid]


def work_rows(
    database_url: str,
    *,
    queue: str = "default",
    limit: int = 100,
    fail_with: str | None = None,
    hold: bool = False,
    worker_id: str = WORKER_ID,
) -> list[scrapeq_queue.ClaimedJob]:
    """Act as a worker: claim due rows and complete them (or fail them for good, or hold them
    in flight), through the queue package's own claim/complete/fail functions."""

    async def work(conn: Any) -> list[scrapeq_queue.ClaimedJob]:
        jobs = await scrapeq_queue.claim_jobs(
            conn,
            worker_id=worker_id,
            queues=[queue],
            limit=limit,
            lease_seconds=300,
            politeness=scrapeq_queue.NO_SITE_LIMIT,
        )
        for job in jobs:
            if hold:
                continue
            if fail_with is not None:
                await scrapeq_queue.fail_job(
                    conn,
                    job.id,
                    job.attempt,
                    error=fail_with,
                    reason="http_error",
                    duration_seconds=0.1,
                )
            else:
                await scrapeq_queue.complete_job(
                    conn,
                    job.id,
                    job.attempt,
                    result={"title": f"page {job.url}"},
                    duration_seconds=0.1,
                )
        return jobs

    return run_queue_call(database_url, work)


# What a loopback site answers for a path: an HTML page (200), an error status, or None (404).
PageAnswer = bytes | int | None


@contextlib.contextmanager
def loopback_site(answer: Callable[[str], PageAnswer]) -> Iterator[str]:
    """Serve `answer(path)` over HTTP on 127.0.0.1 (query strings stripped); yield the base URL.

    The worker reaches it only when told to allow loopback (`--allow-networks 127.0.0.0/8`).
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = answer(self.path.split("?", 1)[0])
            if page is None:
                self.send_error(404, "Not Found")
                return
            if isinstance(page, int):
                self.send_error(page)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def worker_command(*arguments: str) -> list[str]:
    """`scrapeq worker` allowed to reach loopback sites, without a metrics port."""
    return [
        sys.executable,
        "-m",
        "scrapeq",
        "worker",
        "--allow-networks",
        "127.0.0.0/8",
        "--metrics-port",
        "0",
        *arguments,
    ]


def run_worker_until_idle(database_url: str) -> subprocess.CompletedProcess[str]:
    """`scrapeq worker --burst`: claim and scrape until nothing is due, then exit."""
    return subprocess.run(
        worker_command("--burst"),
        cwd=REPOSITORY_ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@dataclass
class WorkerProcesses:
    """Long-running `scrapeq worker` processes (logs in `log_dir`), stopped by `stop_all`."""

    log_dir: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self, database_url: str, *arguments: str, environment: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"worker-{len(self.started)}.log").open("ab")
        process = subprocess.Popen(
            worker_command("--poll-seconds", "0.5", "--drain-seconds", "2", *arguments),
            cwd=REPOSITORY_ROOT,
            env={
                **os.environ,
                **(environment or {}),
                "DATABASE_URL": database_url,
                "PYTHONUNBUFFERED": "1",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            terminate(process, grace=15)
        self.started.clear()
