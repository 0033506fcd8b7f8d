"""`make cluster-up` / `make cluster-down` on this machine: the node comes up Ready, a second
start fails at once naming the running node, and cluster-down leaves the host as it found it
(no process, mount, network namespace, bridge, iptables chain or pod cgroup of the node's, and
the sysctls it changed restored).

The session's node is the one under test (conftest.py starts it with `scrapeq dev cluster-up`):
the first test checks that start and runs before any other node test, the second stops it
with `scrapeq dev cluster-down` after all of them, so cluster-down also undoes whatever the
other tests' pods left on the host.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scrapeq.local.node import LocalNode
from tests.conftest import IN_CI
from tests.e2e.node.host import NodeStart, host_state, scrapeq_dev

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]


def test_cluster_up_starts_one_node_per_machine(node_start: NodeStart, tmp_path: Path) -> None:
    running = LocalNode.attach()
    assert running is not None
    if node_start.cluster_up is not None:
        up = node_start.cluster_up
        assert up.stdout.strip() == f"export KUBECONFIG={running.kubeconfig}"
        # Every long step says which of how many it is.
        assert "[1/" in up.stderr, up.stderr
        assert "node Ready" in up.stderr, up.stderr
    nodes = subprocess.run(
        ["kubectl", f"--kubeconfig={running.kubeconfig}", "get", "nodes", "--no-headers"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert " Ready " in nodes.stdout, nodes.stdout
    # One node per machine: a second start from another checkout fails at once, naming it.
    second = scrapeq_dev("cluster-up", tmp_path / "elsewhere" / "cluster")
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert str(running.state_dir) in second.stderr


def test_cluster_down_leaves_the_host_as_it_found_it(node_start: NodeStart) -> None:
    if node_start.host_before is None:
        reason = "a node started before the tests is running: it is left running, not stopped"
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: cluster-down must be checked)", pytrace=False)
        pytest.skip(reason)
    down = scrapeq_dev("cluster-down", node_start.state_dir)
    assert down.returncode == 0, down.stderr
    assert LocalNode.attach() is None
    assert host_state() == node_start.host_before
