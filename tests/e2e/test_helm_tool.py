"""helm, built from the helm.sh/helm/v3/cmd/helm Go module, installs a chart into the real
kube-apiserver."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import KubeCluster

pytestmark = [pytest.mark.helm, pytest.mark.controlplane]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def helm(binary: Path, cluster: KubeCluster, *arguments: str) -> str:
    result = subprocess.run(
        [str(binary), f"--kubeconfig={cluster.kubeconfig}", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"helm {' '.join(arguments)} failed: {result.stderr}"
    return result.stdout


def test_helm_reports_the_declared_version(helm_binary: Path) -> None:
    declared = next(
        line.split("=", 1)[1]
        for line in (REPOSITORY_ROOT / "tools" / "versions.env").read_text().splitlines()
        if line.startswith("HELM_VERSION=")
    )
    result = subprocess.run(
        [str(helm_binary), "version", "--template", "{{ .Version }}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.strip() == declared


def test_helm_installs_and_uninstalls_a_chart_on_the_real_api_server(
    helm_binary: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-probe\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    (chart / "values.yaml").write_text("greeting: hello\n")
    namespace = f"helm-{uuid.uuid4().hex[:8]}"
    helm(helm_binary, kube_cluster, "install", "probe", str(chart),
         "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "60s")  # fmt: skip
    configmap = subprocess.run(
        ["kubectl", f"--kubeconfig={kube_cluster.kubeconfig}", "-n", namespace,
         "get", "configmap", "probe-probe", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(configmap.stdout)["data"] == {"greeting": "hello"}
    releases = json.loads(helm(helm_binary, kube_cluster, "list", "-n", namespace, "-o", "json"))
    assert [(release["name"], release["status"]) for release in releases] == [("probe", "deployed")]
    helm(helm_binary, kube_cluster, "uninstall", "probe", "-n", namespace, "--wait")
    assert json.loads(helm(helm_binary, kube_cluster, "list", "-n", namespace, "-o", "json")) == []
