"""`make cluster-up` / `make cluster-down` on this machine: the node comes up Ready, a second
start fails at once naming the running node, and cluster-down leaves the host as it found it
(no process, mount, network namespace, bridge, iptables chain or pod cgroup of the node's, and
the sysctls it changed restored).

Runs before the other node tests (see conftest.py), while no node is running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrapeq.local.node import BRIDGE, RECORD_DIR, SYSCTLS, LocalNode, node_unavailable

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]


def host_state() -> dict[str, object]:
    """What the node may change on the host, as comparable values."""
    sysctls = {}
    for name in SYSCTLS:
        path = Path("/proc/sys") / name
        if path.exists():
            sysctls[name] = path.read_text().strip()
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False)
    chains = sorted(
        line for line in iptables.stdout.splitlines() if "KUBE-" in line or "CNI-" in line
    )
    mounts = sorted(
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if "kubelet" in line or "containerd" in line or "/netns/cni-" in line
    )
    namespaces = sorted(path.name for path in Path("/run/netns").glob("cni-*"))
    bridge = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False)
    return {
        "sysctls": sysctls,
        "iptables": chains,
        "mounts": mounts,
        "network namespaces": namespaces,
        "bridge": bridge.returncode == 0,
        "pod cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")),
        "record": RECORD_DIR.exists(),
    }


def scrapeq_dev(command: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapeq", "dev", command, "--state-dir", str(state_dir)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )


def test_cluster_up_runs_one_node_per_machine_and_cluster_down_undoes_everything(
    tmp_path: Path,
) -> None:
    reason = node_unavailable()
    if reason is not None:
        from tests.conftest import missing_part

        missing_part("the local Kubernetes node", reason)
    running = LocalNode.attach()
    if running is not None:
        # A node of the developer's is up: only the one-node rule can be checked beside it.
        second = scrapeq_dev("cluster-up", tmp_path / "cluster")
        assert second.returncode == 1
        assert str(running.state_dir) in second.stderr, second.stderr
        return
    before = host_state()
    up = scrapeq_dev("cluster-up", tmp_path / "cluster")
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        kubeconfig = tmp_path / "node" / "kubeconfig"
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig}"
        # Every long step says which of how many it is.
        assert "[1/" in up.stderr, up.stderr
        assert "node Ready" in up.stderr, up.stderr
        nodes = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes", "--no-headers"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert " Ready " in nodes.stdout, nodes.stdout
        # One node per machine: a second start from another checkout fails at once, naming it.
        second = scrapeq_dev("cluster-up", tmp_path / "elsewhere" / "cluster")
        assert second.returncode == 1
        assert "already running" in second.stderr
        assert str(tmp_path / "node") in second.stderr
    finally:
        down = scrapeq_dev("cluster-down", tmp_path / "cluster")
    assert down.returncode == 0, down.stderr
    assert LocalNode.attach() is None
    assert host_state() == before
