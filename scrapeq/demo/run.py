"""`scrapeq demo`: the whole system on loopback, end to end.

It starts (or reuses) every real part — PostgreSQL, kube-apiserver + etcd, Prometheus — plus
the demo shop, the operator and workers, then applies the ScrapeJobs in examples/demo with
kubectl and shows them progressing until they finish. There is no kubelet, so this process
stands in for one: it runs one local `scrapeq worker` process per replica that the operator's
autoscaler sets on the worker Deployment.

Every part runs in a session of its own, so a Ctrl-C at the terminal or a closed terminal reaches
only this process; it handles SIGINT, SIGTERM and SIGHUP itself and stops everything it started
before it exits, whatever the signal's disposition was when it started (a shell starts a
background job with SIGINT ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from scrapeq.demo.site import DemoShop
from scrapeq.local.controlplane import REPOSITORY_ROOT, LocalControlPlane
from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import (
    LocalPartError,
    free_port,
    terminate,
    wait_for_established_crd,
)
from scrapeq.local.prometheus import LocalPrometheus
from scrapeq.local.s3_server import LocalS3Server

NAMESPACE = "scrapeq-demo"
POOL = "scrapeq-worker-default"
EXAMPLES = REPOSITORY_ROOT / "examples" / "demo"
# The project's CRDs (ScrapeJob, SitePolicy, QueuePolicy), each file named for its CRD.
CRDS = sorted((REPOSITORY_ROOT / "crds").glob("*.yaml"))
# The port the examples name; when it is taken the demo serves elsewhere and rewrites them.
EXAMPLE_SHOP = "http://127.0.0.1:8808"
# What each example is expected to end as; `--once` fails when one does not.
EXPECTED_PHASES = {
    "demo-product": "Succeeded",
    "demo-phones": "Succeeded",
    "demo-broken": "Failed",
    "demo-crawl": "Succeeded",
}
TERMINAL_PHASES = {"Succeeded", "Failed", "Cancelled"}
# The demo's S3 bucket (a local versitygw): demo-product's screenshot and demo-phones' output
# go there. Its objects are files under S3_DIRECTORY/<bucket>/, kept after the demo stops.
DEMO_BUCKET = "scrapeq-demo"
S3_DIRECTORY = REPOSITORY_ROOT / ".scrapeq" / "demo-s3"
# Objects listed at the end, at most.
LISTED_OBJECTS = 20
# The signals that stop the demo: Ctrl-C, a polite stop (kill, systemd, a CI runner) and a
# closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_SIGNAL_NAMES = {
    signal.SIGINT: "Ctrl-C (SIGINT)",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP (the terminal closed)",
}
# A demo should show scaling within a minute, not the production defaults of minutes.
DEMO_OPERATOR_ENVIRONMENT = {
    "SCRAPEQ_OPERATOR_AUTOSCALER_INTERVAL_SECONDS": "1",
    "SCRAPEQ_OPERATOR_SCALE_DOWN_WINDOW_SECONDS": "10",
    "SCRAPEQ_OPERATOR_SCALE_TO_ZERO_COOLDOWN_SECONDS": "15",
    "SCRAPEQ_OPERATOR_STATUS_SWEEP_SECONDS": "5",
}
WORKER_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": POOL,
        "namespace": NAMESPACE,
        "labels": {"scrapeq.io/worker-pool": "default"},
        "annotations": {
            "scrapeq.io/queue": "default",
            "scrapeq.io/min-replicas": "0",
            "scrapeq.io/max-replicas": "3",
            "scrapeq.io/jobs-per-replica": "3",
        },
    },
    "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": "scrapeq-worker"}},
        "template": {
            "metadata": {"labels": {"app": "scrapeq-worker"}},
            "spec": {"containers": [{"name": "worker", "image": "scrapeq/worker:0.1.0"}]},
        },
    },
}


class DemoError(RuntimeError):
    """A step of the demo failed; the message says what to do."""


class StopRequested(BaseException):
    """One of STOP_SIGNALS arrived. A BaseException, like KeyboardInterrupt, so that no step
    that handles its own errors can swallow it on the way to the demo's cleanup."""

    def __init__(self, stop_signal: signal.Signals) -> None:
        super().__init__(STOP_SIGNAL_NAMES[stop_signal])
        self.signal = stop_signal


def _without_age(table: str) -> str:
    """A `kubectl get scrapejobs` table without its AGE column, which changes every second."""
    return "\n".join(line.rsplit(None, 1)[0] for line in table.splitlines())


def say(message: str) -> None:
    # The terminal may be gone (SIGHUP, a closed pipe): the demo must still stop its parts.
    with contextlib.suppress(OSError):
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Demo:
    once: bool
    timeout_seconds: float = 600.0
    # Called with the demo once every example finished, before anything stops (tests use it
    # to look at the running system).
    on_finished: Callable[[Demo], None] | None = None
    operator_environment: dict[str, str] = field(
        default_factory=lambda: dict(DEMO_OPERATOR_ENVIRONMENT)
    )
    _cleanups: list[Callable[[], None]] = field(default_factory=list)
    _workers: list[tuple[subprocess.Popen[bytes], int]] = field(default_factory=list)
    _stopping: bool = False
    kubeconfig: Path | None = None
    database_url: str = ""
    prometheus: LocalPrometheus | None = None
    shop: DemoShop | None = None
    s3: LocalS3Server | None = None
    operator_metrics_port: int = 0
    log_dir: Path = REPOSITORY_ROOT / ".scrapeq" / "demo"

    # --- the parts ---------------------------------------------------------------------------

    def start_database(self) -> None:
        given = os.environ.get("DATABASE_URL")
        if given:
            say("using the PostgreSQL in DATABASE_URL")
            self.database_url = given
            return
        say("starting a throw-away PostgreSQL 15 on 127.0.0.1 …")
        server = LocalPostgres()
        self._cleanups.append(server.stop)
        self.database_url = server.start()
        say(f"PostgreSQL is up: {self.database_url}")

    def start_cluster(self) -> None:
        if os.environ.get("SCRAPEQ_USE_EXISTING_CLUSTER") == "1" and os.environ.get("KUBECONFIG"):
            self.kubeconfig = Path(os.environ["KUBECONFIG"])
            say(f"using the existing cluster in KUBECONFIG={self.kubeconfig}")
            return
        say("starting etcd + kube-apiserver on 127.0.0.1 (first run builds them from Go modules) …")
        cluster = LocalControlPlane()
        self._cleanups.append(cluster.stop)
        cluster.start()
        self.kubeconfig = cluster.kubeconfig
        say(f"kube-apiserver is ready at {cluster.server}")
        say(f"  use it from another shell: export KUBECONFIG={cluster.kubeconfig}")

    def start_shop(self) -> None:
        port = int(EXAMPLE_SHOP.rsplit(":", 1)[1])
        try:
            self.shop = DemoShop(port).start()
        except OSError:
            self.shop = DemoShop(0).start()
            say(f"port {port} is taken; the demo shop uses {self.shop.url} instead")
        self._cleanups.append(self.shop.stop)
        say(f"demo shop (a JS-rendered site) at {self.shop.url}")

    @property
    def object_store_host(self) -> str:
        """Where the workers reach the S3 server: loopback for local processes."""
        return "127.0.0.1"

    def start_object_store(self) -> None:
        """A real S3 server (versitygw over a directory) with the demo's bucket, emptied first."""
        shutil.rmtree(S3_DIRECTORY, ignore_errors=True)
        self.s3 = LocalS3Server(
            buckets=(DEMO_BUCKET,), host=self.object_store_host, base_dir=S3_DIRECTORY
        )
        self._cleanups.append(self.s3.stop)
        self.s3.start()
        say(f"S3 server (versitygw) at {self.s3.endpoint}, bucket {DEMO_BUCKET}")

    def object_store_environment(self) -> dict[str, str]:
        """The workers' and the operator's settings for the demo's bucket."""
        assert self.s3 is not None
        return {
            "SCRAPEQ_OBJECT_STORE_BUCKET": DEMO_BUCKET,
            "SCRAPEQ_OBJECT_STORE_ENDPOINT": self.s3.endpoint,
            "SCRAPEQ_OBJECT_STORE_REGION": self.s3.region,
            "SCRAPEQ_OBJECT_STORE_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
        }

    def start_prometheus(self) -> None:
        self.prometheus = LocalPrometheus()
        self._cleanups.append(self.prometheus.stop)
        self.prometheus.start()
        say(f"Prometheus at {self.prometheus.url} (scraping the operator and every worker)")

    def migrate(self) -> None:
        say("creating the queue schema (scrapeq migrate) …")
        self._scrapeq("migrate", "--database-url", self.database_url)

    def install_crd_and_pool(self) -> None:
        say("installing the CRDs and the worker Deployment with kubectl …")
        for crd in CRDS:
            self._kubectl("apply", "-f", str(crd))
        assert self.kubeconfig is not None
        for crd in CRDS:
            wait_for_established_crd(Path(self.kubeconfig), crd.name.removesuffix(".yaml"))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
        self._kubectl("apply", "-f", "-", stdin=json.dumps(WORKER_DEPLOYMENT))

    def start_operator(self) -> None:
        self.operator_metrics_port = free_port()
        environment = {
            **self.operator_environment,
            "SCRAPEQ_OPERATOR_METRICS_PORT": str(self.operator_metrics_port),
            "SCRAPEQ_OPERATOR_LIVENESS_PORT": str(free_port()),
            "SCRAPEQ_OPERATOR_NAMESPACES": NAMESPACE,
            **self.object_store_environment(),
        }
        process = self._spawn(
            "operator", ["operator", "--database-url", self.database_url], environment
        )
        say(f"operator started (pid {process.pid}, log {self.log_dir / 'operator.log'})")
        self._update_targets()

    # --- the stand-in kubelet: local worker processes follow the Deployment's replicas --------

    def follow_replicas(self) -> int:
        """Start or stop local workers to match the Deployment; return the replica count."""
        deployment = json.loads(
            self._kubectl("-n", NAMESPACE, "get", "deployment", POOL, "-o", "json")
        )
        wanted = int(deployment["spec"].get("replicas") or 0)
        self._workers = [
            (process, port) for process, port in self._workers if process.poll() is None
        ]
        while len(self._workers) < wanted:
            port = free_port()
            name = f"demo-worker-{len(self._workers) + 1}"
            process = self._spawn(
                name,
                ["worker", "--database-url", self.database_url, "--queue", "default",
                 "--metrics-port", str(port), "--worker-id", name],
                {"SCRAPEQ_ALLOW_NETWORKS": "127.0.0.0/8", **self.object_store_environment()},
            )  # fmt: skip
            self._workers.append((process, port))
            say(f"replicas → {wanted}: started {name} (pid {process.pid})")
            self._update_targets()
        while len(self._workers) > wanted:
            process, _ = self._workers.pop()
            say(f"replicas → {wanted}: draining a worker (pid {process.pid}) with SIGTERM")
            # The worker drains (finishes or releases its jobs) and exits; the cleanup
            # registered when it started reaps it at the latest when the demo stops.
            process.send_signal(signal.SIGTERM)
            self._update_targets()
        return wanted

    def _update_targets(self) -> None:
        if self.prometheus is None:
            return
        targets = [f"127.0.0.1:{self.operator_metrics_port}"] if self.operator_metrics_port else []
        targets += [f"127.0.0.1:{port}" for _, port in self._workers]
        self.prometheus.set_targets(targets)

    # --- the jobs ----------------------------------------------------------------------------

    def apply_examples(self) -> None:
        assert self.shop is not None
        for example in sorted(EXAMPLES.glob("*.yaml")):
            manifest = example.read_text().replace(EXAMPLE_SHOP, self.shop.url)
            self._kubectl("-n", NAMESPACE, "apply", "-f", "-", stdin=manifest)
            say(f"kubectl apply -f {example.relative_to(REPOSITORY_ROOT)}")

    def watch_until_finished(self) -> dict[str, str]:
        """Show `kubectl get scrapejobs` and scaling decisions until every job is terminal."""
        deadline = time.monotonic() + self.timeout_seconds
        last_table = last_decision = ""
        phases: dict[str, str] = {}
        while time.monotonic() < deadline:
            self.follow_replicas()
            table = self._kubectl("-n", NAMESPACE, "get", "scrapejobs")
            comparable = _without_age(table)
            if comparable != last_table:
                say("kubectl get scrapejobs\n" + table.rstrip())
                last_table = comparable
            decision = self._decision()
            if decision and decision != last_decision:
                say(f"autoscaler: {decision}")
                last_decision = decision
            listed = json.loads(self._kubectl("-n", NAMESPACE, "get", "scrapejobs", "-o", "json"))
            phases = {
                item["metadata"]["name"]: item.get("status", {}).get("phase", "")
                for item in listed["items"]
            }
            if phases and all(phase in TERMINAL_PHASES for phase in phases.values()):
                # The table above may predate the last phase change; terminal phases do not
                # change again, so a table read now shows every job as it ended.
                final = self._kubectl("-n", NAMESPACE, "get", "scrapejobs")
                if _without_age(final) != last_table:
                    say("kubectl get scrapejobs\n" + final.rstrip())
                return phases
            time.sleep(1)
        raise DemoError(
            f"the example ScrapeJobs did not finish within {self.timeout_seconds:.0f}s "
            f"(phases: {phases}); see the logs in {self.log_dir}"
        )

    @property
    def pool(self) -> str:
        """The worker Deployment the autoscaler scales."""
        return POOL

    def _decision(self) -> str:
        deployment = json.loads(
            self._kubectl("-n", NAMESPACE, "get", "deployment", self.pool, "-o", "json")
        )
        raw = deployment["metadata"].get("annotations", {}).get("scrapeq.io/autoscaler-decision")
        if not raw:
            return ""
        try:
            decision = json.loads(raw)
        except json.JSONDecodeError:
            return str(raw)
        return ", ".join(f"{key}={value}" for key, value in decision.items() if key != "time")

    def show_results(self) -> None:
        listed = json.loads(self._kubectl("-n", NAMESPACE, "get", "scrapejobs", "-o", "json"))
        uids = {item["metadata"]["uid"]: item["metadata"]["name"] for item in listed["items"]}
        progress = asyncio.run(_owner_previews(self.database_url, list(uids)))
        for uid, name in uids.items():
            for preview in progress.get(uid, []):
                fields = preview.get("fields") or preview.get("extracted") or preview
                say(f"result of {name}: {json.dumps(fields)[:200]}")
        say(
            "all results are rows of scraping_jobs; for example:\n"
            f"    psql '{self.database_url}' -c "
            '"SELECT url_to_scrape, status, result FROM scraping_jobs ORDER BY id"'
        )
        self.show_objects()
        if self.prometheus is not None:
            completed = self.prometheus.query("sum(scrapeq_worker_jobs_completed_total)")
            value = completed[0]["value"][1] if completed else "0 (not scraped yet)"
            say(f"Prometheus: sum(scrapeq_worker_jobs_completed_total) = {value}")
            say(f"  explore more at {self.prometheus.url}/graph")

    def show_objects(self) -> None:
        """Where the bucket is, and the objects the jobs wrote to it."""
        if self.s3 is None:
            return
        folder = self.s3.root / DEMO_BUCKET
        objects = self.s3.objects(DEMO_BUCKET)
        say(
            f"S3: {len(objects)} objects in bucket {DEMO_BUCKET} at {self.s3.endpoint} "
            f"(demo-product's screenshot, demo-phones' output batches and manifest.json); "
            f"the server keeps them as files under {folder}, which stay after the demo:"
        )
        for path in objects[:LISTED_OBJECTS]:
            say(f"  {path.relative_to(folder)} ({path.stat().st_size} bytes)")
        if len(objects) > LISTED_OBJECTS:
            say(f"  … and {len(objects) - LISTED_OBJECTS} more")

    # --- process plumbing --------------------------------------------------------------------

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        assert self.kubeconfig is not None
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "DATABASE_URL": self.database_url,
            **extra,
        }

    def _spawn(
        self, name: str, arguments: list[str], extra: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            [sys.executable, "-m", "scrapeq", *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._environment(extra),
            start_new_session=True,
        )
        log.close()
        self._cleanups.append(lambda: terminate(process, grace=30))
        return process

    def _scrapeq(self, *arguments: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "scrapeq", *arguments],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise DemoError(f"scrapeq {arguments[0]} failed: {result.stderr.strip()}")
        return result.stdout

    def _kubectl(self, *arguments: str, stdin: str | None = None) -> str:
        assert self.kubeconfig is not None
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *arguments],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise DemoError(f"kubectl {' '.join(arguments)} failed: {result.stderr.strip()}")
        return result.stdout

    def _on_stop_signal(self, signum: int, _frame: object) -> None:
        if self._stopping:
            # The first signal's cleanup is under way; stopping it halfway would leave orphans.
            say(f"{STOP_SIGNAL_NAMES[signal.Signals(signum)]}: already stopping, please wait")
            return
        self._stopping = True
        raise StopRequested(signal.Signals(signum))

    def stop(self) -> None:
        self._stopping = True
        say("stopping everything the demo started …")
        for cleanup in reversed(self._cleanups):
            try:
                cleanup()
            except (OSError, LocalPartError, subprocess.SubprocessError) as error:
                say(f"  while stopping: {error}")
        self._cleanups.clear()
        say("stopped.")

    def run(self) -> int:
        """Start everything, run the examples, keep running unless `once`; stop everything
        started on every way out. Returns the exit status: 0 when every example ended as
        expected (an interactive demo ends with a stop signal), 1 when one did not or a step
        failed, 128 + the signal's number when a stop signal cut the examples short."""
        previous = {number: signal.signal(number, self._on_stop_signal) for number in STOP_SIGNALS}
        examples_done = False
        try:
            self.start_database()
            self.start_cluster()
            self.start_shop()
            self.start_object_store()
            self.start_prometheus()
            self.migrate()
            self.install_crd_and_pool()
            self.start_operator()
            self.apply_examples()
            phases = self.watch_until_finished()
            self.show_results()
            if self.on_finished is not None:
                self.on_finished(self)
            unexpected = {
                name: phase
                for name, phase in phases.items()
                if EXPECTED_PHASES.get(name, phase) != phase
            }
            if unexpected:
                say(
                    f"these jobs did not end as expected: {unexpected} (expected {EXPECTED_PHASES})"
                )
                return 1
            say("every example ScrapeJob ended as expected.")
            examples_done = True
            if self.once:
                return 0
            say(
                "the system keeps running: apply more ScrapeJobs with kubectl; Ctrl-C stops it all."
            )
            while True:
                self.follow_replicas()
                time.sleep(1)
        except StopRequested as stop:
            say(str(stop))
            return 0 if examples_done else 128 + stop.signal
        except (DemoError, LocalPartError) as error:
            # From here on a stop signal must not interrupt the way out; stop() follows.
            self._stopping = True
            say(f"error: {error}")
            return 1
        finally:
            self.stop()
            for number, handler in previous.items():
                signal.signal(number, handler)


async def _owner_previews(database_url: str, uids: list[str]) -> dict[str, list[dict[str, Any]]]:
    import scrapeq_queue

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as connection:
        progress = await scrapeq_queue.owner_progress(connection, uids, preview_limit=2)
    return {
        uid: [dict(preview.result or {}) for preview in item.preview]
        for uid, item in progress.items()
    }
