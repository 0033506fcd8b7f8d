"""The real control plane: kube-apiserver + etcd built from Go modules, reached by kubectl and
the Python client, and `scrapeq dev cluster-up --api-only`/`cluster-down --api-only` from a
shell (the full node of `make cluster-up` is tested in tests/e2e/node/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from scrapeq.local.processes import pid_alive, wait_for_established_crd
from tests.conftest import KubeCluster

pytestmark = pytest.mark.controlplane

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (REPOSITORY_ROOT / "tools" / "versions.env").read_text().splitlines()
    if line.startswith("KUBERNETES_VERSION=")
)

# A throw-away CRD, so these tests exercise the API server itself and not scrapeq's own CRD.
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.foundation.scrapeq.io"},
    "spec": {
        "group": "foundation.scrapeq.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def kubectl(cluster: KubeCluster, *arguments: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={cluster.kubeconfig}", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(arguments)} failed: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def widget_crd(kube_cluster: KubeCluster) -> str:
    kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(WIDGET_CRD))
    wait_for_established_crd(Path(kube_cluster.kubeconfig), "widgets.foundation.scrapeq.io")
    return "widgets.foundation.scrapeq.io"


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> str:
    name = f"test-{uuid.uuid4().hex[:8]}"
    kubectl(kube_cluster, "create", "namespace", name)
    return name


def test_api_server_reports_ready_and_its_real_version(kube_cluster: KubeCluster) -> None:
    assert kubectl(kube_cluster, "get", "--raw", "/readyz").strip() == "ok"
    version = json.loads(kubectl(kube_cluster, "get", "--raw", "/version"))
    assert version["gitVersion"] == KUBERNETES_VERSION


def test_a_custom_resource_is_created_listed_and_watched_with_kubectl(
    kube_cluster: KubeCluster, widget_crd: str, namespace: str
) -> None:
    watcher = subprocess.Popen(
        [
            "kubectl", f"--kubeconfig={kube_cluster.kubeconfig}", "-n", namespace,
            "get", "widgets", "--watch", "--output-watch-events", "-o", "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        widget = {
            "apiVersion": "foundation.scrapeq.io/v1",
            "kind": "Widget",
            "metadata": {"name": "first", "namespace": namespace},
            "spec": {"size": 3},
        }
        kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(widget))
        listed = json.loads(kubectl(kube_cluster, "-n", namespace, "get", "widgets", "-o", "json"))
        assert [item["spec"]["size"] for item in listed["items"]] == [3]
        # `--watch -o json` prints one pretty JSON event per object; read until the ADDED one.
        assert watcher.stdout is not None
        buffer = ""
        decoder = json.JSONDecoder()
        while True:
            line = watcher.stdout.readline()
            assert line, (
                f"kubectl watch ended early: {watcher.stderr.read() if watcher.stderr else ''}"
            )
            buffer += line
            try:
                event, _ = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue
            break
        assert event["type"] == "ADDED"
        assert event["object"]["metadata"]["name"] == "first"
    finally:
        watcher.kill()
        watcher.communicate(timeout=10)


def test_the_api_server_rejects_a_resource_that_breaks_the_schema(
    kube_cluster: KubeCluster, widget_crd: str, namespace: str
) -> None:
    widget = {
        "apiVersion": "foundation.scrapeq.io/v1",
        "kind": "Widget",
        "metadata": {"name": "broken", "namespace": namespace},
        "spec": {"size": 0},
    }
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kube_cluster.kubeconfig}", "apply", "-f", "-"],
        input=json.dumps(widget),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "should be greater than or equal to 1" in result.stderr


def test_a_custom_resource_is_created_listed_and_watched_with_the_python_client(
    kube_cluster: KubeCluster, widget_crd: str, namespace: str
) -> None:
    api_client = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    objects = client.CustomObjectsApi(api_client)
    seen: list[tuple[str, str]] = []
    listed_version = objects.list_namespaced_custom_object(
        "foundation.scrapeq.io", "v1", namespace, "widgets"
    )["metadata"]["resourceVersion"]

    def follow() -> None:
        stream = watch.Watch()
        for event in stream.stream(
            objects.list_namespaced_custom_object,
            "foundation.scrapeq.io",
            "v1",
            namespace,
            "widgets",
            resource_version=listed_version,
            timeout_seconds=30,
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                stream.stop()

    follower = threading.Thread(target=follow)
    follower.start()
    for name in ("alpha", "beta"):
        objects.create_namespaced_custom_object(
            "foundation.scrapeq.io",
            "v1",
            namespace,
            "widgets",
            {
                "apiVersion": "foundation.scrapeq.io/v1",
                "kind": "Widget",
                "metadata": {"name": name},
                "spec": {"size": 1},
            },
        )
    follower.join(timeout=40)
    assert not follower.is_alive(), f"watch saw only {seen}"
    assert seen == [("ADDED", "alpha"), ("ADDED", "beta")]
    names = [
        item["metadata"]["name"]
        for item in objects.list_namespaced_custom_object(
            "foundation.scrapeq.io", "v1", namespace, "widgets"
        )["items"]
    ]
    assert names == ["alpha", "beta"]
    api_client.close()


@pytest.mark.timeout(300)
def test_cluster_up_prints_a_working_kubeconfig_and_cluster_down_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "cluster"
    environment = {**os.environ, "SCRAPEQ_CLUSTER_DIR": str(state_dir)}
    up = subprocess.run(
        [sys.executable, "-m", "scrapeq", "dev", "cluster-up", "--api-only"],
        cwd=REPOSITORY_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    pids = json.loads((state_dir / "pids.json").read_text()) if up.returncode == 0 else []
    try:
        assert up.returncode == 0, up.stderr
        export = up.stdout.strip().splitlines()[-1]
        assert export == f"export KUBECONFIG={state_dir / 'kubeconfig'}"
        cluster = KubeCluster(kubeconfig=state_dir / "kubeconfig", server="")
        assert kubectl(cluster, "get", "--raw", "/readyz").strip() == "ok"
        assert f"Server Version: {KUBERNETES_VERSION}" in kubectl(cluster, "version")
        assert len(pids) == 2
        assert all(pid_alive(pid) for pid in pids)
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "scrapeq", "dev", "cluster-down", "--api-only"],
            cwd=REPOSITORY_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not state_dir.exists()
