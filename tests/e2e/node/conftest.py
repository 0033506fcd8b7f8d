"""Fixtures for tests that need real Pods: one single-node cluster for the whole session
(scrapeq.local.node), the project's images loaded into it, and scrapeq installed by Helm with
charts/scrapeq/values-local.yaml.

A node already running on this machine (`make cluster-up`) is used as it is and left running;
otherwise the session starts one with `scrapeq dev cluster-up`, and test_node_lifecycle.py's
last test stops it with `scrapeq dev cluster-down` once every other node test has run,
checking that the host is as it was before (the fixture stops it at the end otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq.local.commands import load_node_images
from scrapeq.local.node import LocalNode
from scrapeq.local.processes import LocalPartError
from scrapeq.local.release import Release, install_release, uninstall_release
from tests.conftest import missing_part
from tests.e2e.node.host import ROOT, NodeStart, host_state, scrapeq_dev
from tests.e2e.node.node_parts import release_diagnostics

CLUSTER_UP_TEST = "test_cluster_up_starts_one_node_per_machine"
CLUSTER_DOWN_TEST = "test_cluster_down_leaves_the_host_as_it_found_it"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Node tests run in this order: cluster-up's checks, the README's quick start (which
    installs the CRD with its own release) before the session's release exists, the others,
    and cluster-down last."""
    node_items = [item for item in items if "tests/e2e/node/" in item.nodeid]
    if not node_items:
        return
    position = items.index(node_items[0])
    for item in node_items:
        items.remove(item)

    def rank(item: pytest.Item) -> int:
        if CLUSTER_UP_TEST in item.nodeid:
            return 0
        if "test_quick_start" in item.nodeid:
            return 1
        return 3 if CLUSTER_DOWN_TEST in item.nodeid else 2

    items[position:position] = sorted(node_items, key=rank)  # sorted() keeps ties in order


@pytest.fixture(scope="session")
def node_start() -> Iterator[NodeStart]:
    """A node on this machine: a developer's running one, or one started as `make cluster-up`
    starts it (images loaded), stopped at the end if the cluster-down test has not."""
    running = LocalNode.attach()
    if running is not None:
        load_node_images(running)
        yield NodeStart(state_dir=running.state_dir)
        return
    cluster_dir = ROOT / ".scrapeq" / "test-node" / "cluster"
    before = host_state()
    up = scrapeq_dev("cluster-up", cluster_dir)
    started = LocalNode.attach()
    if up.returncode != 0 or started is None:
        if started is not None:
            started.stop()
        missing_part("the local Kubernetes node", up.stderr.strip()[-2000:])
    try:
        yield NodeStart(state_dir=cluster_dir, cluster_up=up, host_before=before)
    finally:
        leftover = LocalNode.attach()
        if leftover is not None:
            leftover.stop()


@pytest.fixture(scope="session")
def kube_node(node_start: NodeStart) -> LocalNode:
    """The machine's single-node cluster, Ready, with the project's images loaded."""
    node = LocalNode.attach()
    if node is None:
        pytest.fail("the session's node was stopped (the cluster-down test runs last)")
    return node


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that used the release gets the release's objects, events and logs in its
    report (the node, and with it every log, is gone when the run ends)."""
    report = yield
    release = getattr(item, "funcargs", {}).get("release")
    if report.when == "call" and report.failed and isinstance(release, Release):
        report.sections.append(("scrapeq release at the failure", release_diagnostics(release)))
    return report


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
        if LocalNode.attach() is not None:  # the cluster-down test may have stopped the node
            uninstall_release(installed)
