"""The repository's shape keeps its promises: no folder shadows the standard library, the
`scrapeq` command runs from the repository root, and the Go modules that build the control
plane agree with the versions the project declares."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPOSITORY_ROOT / "tools"


def declared_versions() -> dict[str, str]:
    versions = {}
    for line in (TOOLS / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


def run_python_from_root(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_standard_library_modules_are_not_shadowed_from_the_repository_root() -> None:
    result = run_python_from_root(
        "-c",
        "import collections, operator, queue; print(operator.__file__); print(queue.__file__)",
    )
    assert result.returncode == 0, result.stderr
    for path in result.stdout.split():
        assert not Path(path).is_relative_to(REPOSITORY_ROOT), path


def test_the_scrapeq_command_runs_with_python_dash_m_from_the_repository_root() -> None:
    result = run_python_from_root("-m", "scrapeq", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: scrapeq" in result.stdout


def test_the_kubernetes_module_builds_the_declared_kubernetes_release() -> None:
    version = declared_versions()["KUBERNETES_VERSION"]
    go_mod = (TOOLS / "kubernetes" / "go.mod").read_text()
    assert re.search(rf"^require k8s\.io/kubernetes {re.escape(version)}$", go_mod, re.M)
    replaces = re.findall(r"^\s+(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (\S+)$", go_mod, re.M)
    # Every staging module points at its own published release of the same Kubernetes version.
    assert len(replaces) >= 25
    staging_version = "v0." + version.removeprefix("v1.")
    for source, target, target_version in replaces:
        assert source == target
        assert target_version == staging_version, (source, target_version)


def test_the_etcd_and_helm_modules_pin_the_declared_versions() -> None:
    versions = declared_versions()
    etcd_mod = (TOOLS / "etcd" / "go.mod").read_text()
    helm_mod = (TOOLS / "helm" / "go.mod").read_text()
    assert f"go.etcd.io/etcd/server/v3 {versions['ETCD_VERSION']}" in etcd_mod
    assert f"helm.sh/helm/v3 {versions['HELM_VERSION']}" in helm_mod
    major, minor, patch = (int(part) for part in versions["ETCD_VERSION"][1:].split("."))
    # Kubernetes 1.31 and newer need etcd 3.5.11 or newer.
    assert (major, minor, patch) >= (3, 5, 11)
