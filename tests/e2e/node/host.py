"""The host as the node may change it, and `scrapeq dev` run as a user runs it: shared by the
session's node fixture (conftest.py), which starts the node the way `make cluster-up` does,
and the lifecycle tests, which stop it the way `make cluster-down` does."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scrapeq.local.node import BRIDGE, RECORD_DIR, SYSCTLS

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
    """`python -m scrapeq dev <command> --state-dir <state_dir>`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "scrapeq", "dev", command, "--state-dir", str(state_dir)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )


@dataclass(frozen=True)
class NodeStart:
    """How the session came by its node: started by `scrapeq dev cluster-up` (with what that
    printed and the host as it was before), or a developer's node already running."""

    state_dir: Path
    cluster_up: subprocess.CompletedProcess[str] | None = None
    host_before: dict[str, object] | None = None

    @property
    def started_by_session(self) -> bool:
        return self.cluster_up is not None
