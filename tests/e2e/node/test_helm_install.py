"""`helm install` on the real node: every pod Ready, `helm test` passes, `helm uninstall` leaves
no pods and keeps the CRD as documented (crds.keep)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapeq.local.node import LocalNode
from scrapeq.local.release import Release, install_release, pod_ready, uninstall_release
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]


def test_a_helm_install_runs_ready_pods_passes_helm_test_and_uninstalls_cleanly(
    kube_node: LocalNode, helm_binary: Path, release: Release
) -> None:
    # A second release beside the session's (its CRD is the session release's).
    own = install_release(
        kube_node, helm_binary, name="install-check", namespace="scrapeq-install-check"
    )
    try:
        pods = own.pods()
        components = {pod["metadata"]["labels"].get("app.kubernetes.io/component") for pod in pods}
        assert {"operator", "database"} <= components
        assert all(pod_ready(pod) for pod in pods)
        tested = own.helm_command("test", own.name, "-n", own.namespace, "--timeout", "180s")
        assert "Phase:          Succeeded" in tested.stdout
    finally:
        own.helm_command("uninstall", own.name, "-n", own.namespace, "--wait")

    def no_pods_left() -> bool:
        left = json.loads(own.kubectl("get", "pods", "-n", own.namespace, "-o", "json").stdout)
        return not left["items"]

    eventually_blocking(
        no_pods_left, within=120, what="every pod of the uninstalled release to be gone", every=0.5
    )
    # crds.keep: the CRD (and so every ScrapeJob) outlives a release.
    assert own.kubectl("get", "crd", "scrapejobs.scrapeq.io", check=False).returncode == 0
    uninstall_release(own)
