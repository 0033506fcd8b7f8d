"""`scrapeq demo` on real Pods: the local single-node cluster runs the operator, the workers and
PostgreSQL as Pods installed by `helm install` with charts/scrapeq/values-local.yaml.

The worker Deployment is scaled by the operator's autoscaler and realised by the real
ReplicaSet controller and kubelet; the demo only shows it (`kubectl get pods` for the workers as
they come and go). The demo shop is served on the node's pod network, which pods reach, and
Prometheus on the host scrapes the pods at their addresses.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from scrapeq.demo.run import DEMO_BUCKET, EXAMPLE_SHOP, NAMESPACE, Demo, DemoError, say
from scrapeq.demo.site import DemoShop
from scrapeq.local.commands import load_node_images
from scrapeq.local.controlplane import REPOSITORY_ROOT, tool_path
from scrapeq.local.node import POD_GATEWAY, LocalNode, node_unavailable
from scrapeq.local.release import Release, install_release, uninstall_release

RELEASE = "scrapeq"
# The Secret with the demo S3 server's keys, which the chart hands to the workers and operator.
S3_SECRET = "scrapeq-demo-s3"


@dataclass
class PodDemo(Demo):
    """The demo with every scrapeq part in a Pod of the local node."""

    node: LocalNode | None = None
    release: Release | None = None
    _last_pods: str = field(default="", init=False)

    def start_cluster(self) -> None:
        running = LocalNode.attach()
        if running is not None:
            say(f"using the local node that is already running ({running.server})")
            say("loading the worker, operator and PostgreSQL images into it …")
            load_node_images(running)
            self.node = running
        else:
            say("starting the local single-node cluster (first run builds its parts) …")
            node = LocalNode(state_dir=REPOSITORY_ROOT / ".scrapeq" / "node", progress=say)
            self._cleanups.append(node.stop)
            node.start(load_images=load_node_images)
            self.node = node
            say(f"node {node.hostname} is Ready at {node.server}")
        self.kubeconfig = self.node.kubeconfig
        say(f"  use it from another shell: export KUBECONFIG={self.kubeconfig}")

    def start_database(self) -> None:
        # The bundled PostgreSQL of the chart runs as a Pod; see install_crd_and_pool.
        return

    def start_shop(self) -> None:
        port = int(EXAMPLE_SHOP.rsplit(":", 1)[1])
        try:
            self.shop = DemoShop(port, host=POD_GATEWAY).start()
        except OSError:
            self.shop = DemoShop(0, host=POD_GATEWAY).start()
        self._cleanups.append(self.shop.stop)
        say(f"demo shop (a JS-rendered site) at {self.shop.url}, on the node's pod network")

    @property
    def object_store_host(self) -> str:
        """Pods reach the host's S3 server on the node's pod network, as they reach the shop."""
        return POD_GATEWAY

    def migrate(self) -> None:
        # The operator pod migrates the schema at start (operator.migrate in the chart).
        return

    def install_crd_and_pool(self) -> None:
        assert self.node is not None
        say(
            f"helm install {RELEASE} charts/scrapeq -n {NAMESPACE} "
            "-f charts/scrapeq/values-local.yaml --wait …"
        )
        assert self.s3 is not None
        # The S3 server's keys in a Secret of the release's namespace, before the release.
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
        self._kubectl(
            "-n", NAMESPACE, "create", "secret", "generic", S3_SECRET,
            f"--from-literal=AWS_ACCESS_KEY_ID={self.s3.access_key}",
            f"--from-literal=AWS_SECRET_ACCESS_KEY={self.s3.secret_key}",
        )  # fmt: skip
        values = [
            f"workers.objectStore.bucket={DEMO_BUCKET}",
            f"workers.objectStore.endpoint={self.s3.endpoint}",
            f"workers.objectStore.region={self.s3.region}",
            "workers.objectStore.pathStyle=true",
            f"workers.objectStore.credentials.existingSecret.name={S3_SECRET}",
        ]
        release = install_release(
            self.node, tool_path("helm"), name=RELEASE, namespace=NAMESPACE, values=values
        )
        self.release = release
        self._cleanups.append(lambda: self._uninstall(release))
        self.database_url = release.database_url()
        say("every pod is Ready:\n" + self._kubectl("-n", NAMESPACE, "get", "pods").rstrip())

    def _uninstall(self, release: Release) -> None:
        say(f"helm uninstall {RELEASE} -n {NAMESPACE} …")
        uninstall_release(release)

    def start_operator(self) -> None:
        # The operator runs in its pod; Prometheus scrapes it there.
        self._update_targets()

    def follow_replicas(self) -> int:
        """Show the worker pods whenever they change; the kubelet runs them."""
        assert self.release is not None
        pods = self.release.pods("worker")
        listing = self._kubectl(
            "-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=worker",
            "-o", "custom-columns=NAME:.metadata.name,STATUS:.status.phase,IP:.status.podIP",
        )  # fmt: skip
        # Pods being deleted still show in kubectl's listing: an empty pool reads as empty.
        shown = listing.rstrip() if pods else "(no worker pods)"
        if shown != self._last_pods:
            self._last_pods = shown
            say("kubectl get pods -l app.kubernetes.io/component=worker\n" + shown)
            self._update_targets()
        return len(pods)

    def show_results(self) -> None:
        super().show_results()
        self.watch_scale_down()

    def watch_scale_down(self, timeout_seconds: float = 180.0) -> None:
        """Show the worker pods until the autoscaler has taken the idle pool back to zero."""
        say("the queue is empty: the operator scales the workers back to zero after a cool-down")
        deadline = time.monotonic() + timeout_seconds
        while self.follow_replicas() and time.monotonic() < deadline:
            time.sleep(1)

    def _update_targets(self) -> None:
        if self.prometheus is None or self.release is None:
            return
        targets = []
        for component, port in (("operator", 9102), ("worker", 9100)):
            for pod in self.release.pods(component):
                address = pod.get("status", {}).get("podIP")
                if address:
                    targets.append(f"{address}:{port}")
        self.prometheus.set_targets(targets)

    @property
    def pool(self) -> str:
        assert self.release is not None
        return self.release.worker_deployment


def pod_demo_or_reason(once: bool, timeout_seconds: float) -> tuple[Demo | None, str | None]:
    """The demo on Pods, or None and the one-line reason it cannot run here."""
    reason = node_unavailable()
    if reason is not None:
        return None, reason
    return PodDemo(once=once, timeout_seconds=timeout_seconds), None


__all__ = ["DemoError", "PodDemo", "pod_demo_or_reason"]
