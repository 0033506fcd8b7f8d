"""Fixtures for tests that need real Pods: one single-node cluster for the whole session
(scrapeq.local.node), the project's images loaded into it, and scrapeq installed by Helm with
charts/scrapeq/values-local.yaml.

A node already running on this machine (`make cluster-up`) is used as it is and left running;
otherwise the session starts one and stops it at the end, undoing its changes to the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeq.local.commands import load_node_images
from scrapeq.local.node import LocalNode
from scrapeq.local.processes import LocalPartError
from scrapeq.local.release import Release, install_release, uninstall_release
from tests.conftest import missing_part


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the node's own start/stop test before any test starts the session's node, and the
    README's quick start (which installs the CRD with its own release) before the session's
    release exists."""
    first = [item for item in items if "test_node_lifecycle" in item.nodeid]
    first += [item for item in items if "test_quick_start" in item.nodeid]
    if first:
        position = min(items.index(item) for item in items if "tests/e2e/node/" in item.nodeid)
        for item in first:
            items.remove(item)
        items[position:position] = first


@pytest.fixture(scope="session")
def kube_node() -> Iterator[LocalNode]:
    """The machine's single-node cluster, Ready, with the project's images loaded."""
    running = LocalNode.attach()
    if running is not None:
        load_node_images(running)
        yield running
        return
    node = LocalNode(state_dir=Path(__file__).resolve().parents[3] / ".scrapeq" / "test-node")
    try:
        node.start(load_images=load_node_images)
    except LocalPartError as error:
        missing_part("the local Kubernetes node", str(error))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def release(kube_node: LocalNode, helm_binary: Path) -> Iterator[Release]:
    """scrapeq installed once for the session with values-local.yaml, every pod Ready."""
    try:
        # Not "scrapeq": the README's quick start installs that name, and the chart names its
        # cluster-wide objects after the release.
        installed = install_release(kube_node, helm_binary, name="e2e", namespace="scrapeq-e2e")
    except LocalPartError as error:
        pytest.fail(f"helm install with values-local.yaml failed: {error}", pytrace=False)
    try:
        yield installed
    finally:
        uninstall_release(installed)
