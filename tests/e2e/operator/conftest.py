"""Fixtures for operator tests on the real kube-apiserver: the CRD, a namespace per test,
kubectl, and the operator as a local process (see operator_parts.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq.local.processes import wait_for_established_crd
from tests.e2e.operator.operator_parts import (
    CRD_PATH,
    QUEUE_POLICY_CRD_PATH,
    SITE_POLICY_CRD_PATH,
    Kubectl,
    OperatorProcess,
    WorkerProcesses,
)
from tests.waiting import eventually_blocking


@pytest.fixture(scope="session")
def kubectl(kube_cluster: Any) -> Kubectl:
    """kubectl as admin, with the ScrapeJob, SitePolicy and QueuePolicy CRDs installed and
    established (no QueuePolicy exists unless a test creates one: every namespace may use every
    queue)."""
    client = Kubectl(Path(kube_cluster.kubeconfig))
    client.run(
        "apply",
        "-f",
        str(CRD_PATH),
        "-f",
        str(SITE_POLICY_CRD_PATH),
        "-f",
        str(QUEUE_POLICY_CRD_PATH),
    )
    for crd in ("scrapejobs.scrapeq.io", "sitepolicies.scrapeq.io", "queuepolicies.scrapeq.io"):
        wait_for_established_crd(Path(kube_cluster.kubeconfig), crd)
    # Discovery of the new group can lag the Established condition by a moment.
    eventually_blocking(
        lambda: (
            client.run("get", "scrapejobs,sitepolicies,queuepolicies", "-A", check=False).returncode
            == 0
        ),
        within=30,
        what="the scrapejobs, sitepolicies and queuepolicies resources to be served",
    )
    return client


@pytest.fixture
def namespace(kubectl: Kubectl) -> str:
    """A fresh namespace for one test (namespaces never finish deleting without a kubelet)."""
    name = f"sj-{uuid.uuid4().hex[:10]}"
    kubectl.run("create", "namespace", name)
    return name


@pytest.fixture
def operator_factory(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    """Start operators for this test's namespace; every one is stopped afterwards."""
    started: list[OperatorProcess] = []

    def start(
        database_url: str,
        *,
        environment: dict[str, str] | None = None,
        kubeconfig: Path | None = None,
        clusterwide: bool = False,
    ) -> OperatorProcess:
        operator = OperatorProcess(
            kubeconfig=kubeconfig or kubectl.kubeconfig,
            database_url=database_url,
            namespace="" if clusterwide else namespace,
            log_path=tmp_path / f"operator-{len(started)}.log",
            environment=environment or {},
        )
        started.append(operator)
        operator.start()
        return operator

    yield start
    for operator in started:
        operator.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Long-running `scrapeq worker` processes for this test; every one is stopped afterwards."""
    processes = WorkerProcesses(tmp_path)
    yield processes
    processes.stop_all()
