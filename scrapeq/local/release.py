"""scrapeq installed by Helm on the local node (charts/scrapeq/values-local.yaml), as the demo,
the benchmarks and the tests that need Pods use it: install and wait for Ready pods, find pods
by component, reach the bundled database from the host at its pod address (host → pod works on
the node), and serve a site on the node's pod network, which pods reach.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from scrapeq.local.controlplane import REPOSITORY_ROOT
from scrapeq.local.node import POD_GATEWAY, LocalNode
from scrapeq.local.processes import LocalPartError, run_kubectl, wait_until

CHART = REPOSITORY_ROOT / "charts" / "scrapeq"
LOCAL_VALUES = CHART / "values-local.yaml"
CRD_NAME = "scrapejobs.scrapeq.io"

# Pods of a fresh install start in seconds once images are loaded; a loaded 2-core machine
# (a test run beside this one) has taken several times that.
ROLLOUT_TIMEOUT_SECONDS = 300.0


@dataclass
class Release:
    """One Helm release of scrapeq on the local node."""

    name: str
    namespace: str
    node: LocalNode
    helm: Path
    extra_values: list[str] = field(default_factory=list)

    def component(self, suffix: str) -> str:
        """The full name of one of the chart's objects, e.g. `operator` → `scrapeq-operator`."""
        base = self.name if "scrapeq" in self.name else f"{self.name}-scrapeq"
        return f"{base}-{suffix}"

    @property
    def worker_deployment(self) -> str:
        return self.component("worker-default")

    def kubectl(
        self, *arguments: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(self.node.kubeconfig, *arguments, stdin=stdin, check=check)

    def helm_command(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.helm), f"--kubeconfig={self.node.kubeconfig}", *arguments],
            capture_output=True,
            text=True,
            check=False,
            timeout=ROLLOUT_TIMEOUT_SECONDS + 120,
        )
        if result.returncode != 0:
            raise LocalPartError(f"helm {' '.join(arguments)} failed: {result.stderr.strip()}")
        return result

    def pods(self, component: str | None = None) -> list[dict[str, Any]]:
        """The release's pods (of one component), not counting those being deleted."""
        selector = f"app.kubernetes.io/instance={self.name}"
        if component:
            selector += f",app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "pods", "-n", self.namespace, "-o", "json", "-l", selector).stdout
        )["items"]
        return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")]

    def all_pods(self, component: str) -> list[dict[str, Any]]:
        """Like `pods`, including pods that are being deleted."""
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "pods", "-n", self.namespace, "-o", "json", "-l", selector).stdout
        )["items"]
        return items

    def ready_pods(self, component: str) -> list[dict[str, Any]]:
        return [pod for pod in self.pods(component) if pod_ready(pod)]

    def database_url(self) -> str:
        """DATABASE_URL for the host: the bundled database at its pod address."""
        secret = json.loads(
            self.kubectl(
                "get", "secret", self.component("database"), "-n", self.namespace, "-o", "json"
            ).stdout
        )
        password = base64.b64decode(secret["data"]["POSTGRES_PASSWORD"]).decode()
        pods = self.ready_pods("database")
        if not pods:
            raise LocalPartError(f"release {self.name} has no Ready database pod")
        address = pods[0]["status"]["podIP"]
        return f"postgresql://scrapeq:{password}@{address}:5432/scrapeq?connect_timeout=5"

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement against the release's database; its rows (none for a command)."""
        with psycopg.connect(self.database_url(), autocommit=True) as connection:
            cursor = connection.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def wait_all_ready(self, timeout: float = ROLLOUT_TIMEOUT_SECONDS) -> None:
        """Wait until every running pod of the release is Ready."""

        def all_ready() -> bool:
            running = [pod for pod in self.pods() if pod["status"].get("phase") != "Succeeded"]
            return bool(running) and all(pod_ready(pod) for pod in running)

        wait_until(
            all_ready, timeout=timeout, what=f"every pod of release {self.name} to be Ready",
            interval=0.5,
        )  # fmt: skip

    def scrapejob_status(self, name: str) -> dict[str, Any]:
        body = json.loads(
            self.kubectl("get", "scrapejob", name, "-n", self.namespace, "-o", "json").stdout
        )
        status: dict[str, Any] = body.get("status") or {}
        return status


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def install_release(
    node: LocalNode,
    helm: Path,
    *,
    name: str,
    namespace: str,
    values: list[str] | None = None,
) -> Release:
    """`helm install` with values-local.yaml (and `--set` values); wait for every pod Ready.

    The operator watches only the release's namespace, so that several releases on one node
    (the tests', the demo's) never handle each other's ScrapeJobs. When the ScrapeJob CRD
    already exists (another release or `kubectl apply` installed it), this release does not
    install it again: Helm refuses to adopt an object another owns.
    """
    release = Release(name, namespace, node, helm, list(values or []))
    arguments = ["install", name, str(CHART), "-n", namespace, "--create-namespace"]
    arguments += ["-f", str(LOCAL_VALUES), "--set", f"operator.watchNamespaces={{{namespace}}}"]
    if run_kubectl(node.kubeconfig, "get", "crd", CRD_NAME, check=False).returncode == 0:
        arguments += ["--set", "crds.install=false"]
    for value in release.extra_values:
        arguments += ["--set", value]
    release.helm_command(*arguments, "--wait", "--timeout", f"{int(ROLLOUT_TIMEOUT_SECONDS)}s")
    release.wait_all_ready()
    return release


def uninstall_release(release: Release) -> None:
    """Delete the release's ScrapeJobs while its operator still runs (it removes their
    finalizers and cancels their rows), `helm uninstall`, then delete the namespace (and with
    it the database's claim, which Helm keeps on purpose) and recycle the node's volumes."""
    release.kubectl(
        "delete", "scrapejobs", "--all", "-n", release.namespace, "--timeout=120s", check=False
    )
    with contextlib.suppress(LocalPartError):
        release.helm_command("uninstall", release.name, "-n", release.namespace, "--wait")
    release.kubectl("delete", "namespace", release.namespace, "--timeout=180s", check=False)
    release.node.recycle_volumes()


@dataclass
class SitePage:
    """What the pod-network site answers for one path."""

    status: int = 200
    body: str = ""
    content_type: str = "text/html; charset=utf-8"
    delay_seconds: float = 0.0
    # With an event, the answer waits until it is set, `delay_seconds` at most: a page that
    # stays in flight exactly as long as a test needs it to, then ends at once.
    until: threading.Event | None = None


@contextlib.contextmanager
def pod_network_site(
    answer: Callable[[str], SitePage], *, port: int = 0
) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on the node's pod-network address (POD_GATEWAY), which pods reach; yields
    its base URL and the paths requested so far, in order. It has no robots.txt (404: every
    path allowed), and the workers' requests for it are not listed."""
    requested: list[str] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/robots.txt":
                self.send_error(404)
                return
            with lock:
                requested.append(self.path)
            page = answer(self.path)
            if page.until is not None:
                page.until.wait(page.delay_seconds)
            elif page.delay_seconds:
                time.sleep(page.delay_seconds)
            body = page.body.encode()
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((POD_GATEWAY, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{POD_GATEWAY}:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def product_page(path: str) -> SitePage:
    """A small page whose `h1` and `.price` a ScrapeJob extracts."""
    slug = path.strip("/") or "index"
    return SitePage(
        body=f"<html><head><title>{slug}</title></head><body><h1>{slug}</h1>"
        f'<span class="price">{len(slug)}.00</span></body></html>'
    )
