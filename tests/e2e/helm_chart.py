"""Running the real helm binary on charts/scrapeq, shared by the chart tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "scrapeq"
KUBE_VERSION = next(
    line.split("=", 1)[1]
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines()
    if line.startswith("KUBERNETES_VERSION=")
)
# What a cluster with kube-prometheus-stack offers: the chart renders its ServiceMonitors and
# PrometheusRule only when these APIs exist.
MONITORING_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
# `helm template` runs without the cluster, so the bundled database needs a password it can keep.
STABLE_PASSWORD = {"database": {"bundled": {"password": "a-stable-test-password"}}}

Manifest = dict[str, Any]


def run(command: list[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=180, check=False
    )


def succeed(command: list[str], *, stdin: str | None = None) -> str:
    result = run(command, stdin=stdin)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"
    return result.stdout


def template_command(
    helm_binary: Path,
    values: dict[str, Any] | None = None,
    *,
    release: str = "scrapeq",
    namespace: str = "scrapeq-system",
    monitoring: bool = False,
) -> list[str]:
    """`helm template` of the chart; `values` go in as one --values document on stdin."""
    command = [
        str(helm_binary), "template", release, str(CHART),
        "--namespace", namespace, "--kube-version", KUBE_VERSION,
    ]  # fmt: skip
    if values is not None:
        command += ["--values", "-"]
    for api in MONITORING_APIS if monitoring else ():
        command += ["--api-versions", api]
    return command


def render(
    helm_binary: Path, values: dict[str, Any] | None = None, **options: Any
) -> list[Manifest]:
    """Every object the chart renders with `values` (None: the chart's own defaults); `options`
    are those of template_command."""
    command = template_command(helm_binary, values, **options)
    output = succeed(command, stdin=None if values is None else yaml.safe_dump(values))
    return [document for document in yaml.safe_load_all(output) if document]


def render_error(helm_binary: Path, values: dict[str, Any]) -> str:
    """The error `helm template` ends with for `values`; fails the test if it renders."""
    result = run(template_command(helm_binary, values), stdin=yaml.safe_dump(values))
    assert result.returncode != 0, "the chart rendered although it should have refused"
    return result.stderr


def find(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    for manifest in manifests:
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
            return manifest
    raise AssertionError(f"no {kind} {name} among {[m['metadata']['name'] for m in manifests]}")


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]
