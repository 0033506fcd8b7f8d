"""The operator's RBAC as the chart renders it, asked of the real kube-apiserver's authorizer
(`kubectl auth can-i --as=system:serviceaccount:…`): Deployments and Pods only in the release
namespace (patch only on the chart's worker Deployments), ScrapeJobs, Events, ConfigMaps and
Secrets cluster-wide by default or only in `operator.watchNamespaces`.

Only the chart's RBAC objects are applied (ServiceAccount, ClusterRole, Role, bindings); the
operator doing its whole job on the same rules is test_rbac.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helm_chart import STABLE_PASSWORD, render
from tests.e2e.operator.operator_parts import Kubectl

pytestmark = [pytest.mark.helm, pytest.mark.controlplane, pytest.mark.timeout(180)]

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

Allows = Callable[..., bool]


def _can_i(kubectl: Kubectl, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    """`kubectl auth can-i` prints yes (exit 0) or no (exit 1); anything else is an error.
    `resource` may end in `:subresource` (deployments/name:scale)."""
    resource, _, subresource = resource.partition(":")
    where = ["--all-namespaces"] if namespace is None else ["-n", namespace]
    extra = [f"--subresource={subresource}"] if subresource else []
    command = ["auth", "can-i", verb, resource, *extra, *where, "--as", user]
    result = kubectl.run(*command, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"{' '.join(command)}: {result.stdout}{result.stderr}"
    # A resource the server does not know would be answered "no" with a warning: a typo here
    # must not pass as a denial.
    assert "doesn't have a resource type" not in result.stderr, result.stderr
    return answer == "yes"


@pytest.fixture
def install_rbac(
    kubectl: Kubectl, helm_binary: Path
) -> Iterator[Callable[[dict[str, Any]], tuple[str, Allows]]]:
    """Apply the RBAC objects the chart renders with some values into a fresh namespace; give
    the namespace and a can-i function acting as the operator's ServiceAccount (the session's
    control plane, with the ScrapeJob CRD installed)."""
    applied: list[str] = []

    def install(values: dict[str, Any]) -> tuple[str, Allows]:
        suffix = uuid.uuid4().hex[:8]
        namespace = f"rbac-{suffix}"
        for watched in values.get("operator", {}).get("watchNamespaces", []):
            kubectl.run("create", "namespace", watched)
        kubectl.run("create", "namespace", namespace)
        manifests = render(
            helm_binary, {**STABLE_PASSWORD, **values}, release=f"r{suffix}", namespace=namespace
        )
        objects = [manifest for manifest in manifests if manifest["kind"] in RBAC_KINDS]
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        kubectl.run("apply", "-f", "-", stdin=document)
        applied.append(document)
        account = next(
            manifest["metadata"]["name"]
            for manifest in objects
            if manifest["kind"] == "ServiceAccount"
            and manifest["metadata"]["name"].endswith("-operator")
        )
        user = f"system:serviceaccount:{namespace}:{account}"

        def allows(verb: str, resource: str, where: str | None) -> bool:
            return _can_i(kubectl, user, verb, resource, where)

        return namespace, allows

    yield install
    for document in applied:
        kubectl.run("delete", "--ignore-not-found", "-f", "-", stdin=document)


def test_the_operator_may_patch_only_its_own_worker_deployments_and_pods(
    install_rbac: Callable[[dict[str, Any]], tuple[str, Allows]],
) -> None:
    pools = {"workers": {"pools": [{"name": "default", "queues": ["default"]}]}}
    namespace, allows = install_rbac(pools)
    release = namespace.replace("rbac-", "r")
    worker = f"deployments/{release}-scrapeq-worker-default"
    elsewhere = "default"

    # What the autoscaler calls, in the release namespace, on its own pool.
    assert allows("list", "deployments", namespace)
    assert allows("patch", worker, namespace)
    assert allows("patch", f"{worker}:scale", namespace)
    assert allows("list", "pods", namespace)
    assert allows("patch", "pods", namespace)
    assert allows("create", "events", namespace)

    # Any other Deployment, in any namespace, and Pods elsewhere: forbidden.
    assert not allows("patch", "deployments/someone-elses", namespace)
    assert not allows("patch", "deployments/someone-elses:scale", namespace)
    assert not allows("patch", worker, elsewhere)
    assert not allows("patch", "deployments", elsewhere)
    assert not allows("list", "deployments", None)
    assert not allows("list", "deployments", elsewhere)
    assert not allows("create", "deployments", namespace)
    assert not allows("update", worker, namespace)
    assert not allows("patch", "pods", elsewhere)
    assert not allows("list", "pods", elsewhere)
    assert not allows("delete", "pods", namespace)
    assert not allows("create", "pods/exec", namespace)

    # Cluster-wide by default: ScrapeJobs, their status, Events, and the ConfigMaps and
    # Secrets a ScrapeJob names (get only: no list or watch).
    assert allows("watch", "scrapejobs.scrapeq.io", None)
    assert allows("patch", "scrapejobs.scrapeq.io:status", elsewhere)
    assert allows("create", "events", elsewhere)
    assert allows("get", "secrets", elsewhere)
    assert allows("get", "configmaps", elsewhere)
    assert not allows("list", "secrets", elsewhere)
    assert not allows("watch", "secrets", None)
    assert not allows("list", "configmaps", elsewhere)
    # kopf runs standalone with scanning and its own Events off: no CRDs, namespaces, leases.
    assert not allows("list", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert not allows("list", "namespaces", None)
    assert not allows("create", "leases.coordination.k8s.io", namespace)


def test_with_watch_namespaces_secrets_and_scrapejobs_are_readable_only_there(
    install_rbac: Callable[[dict[str, Any]], tuple[str, Allows]],
) -> None:
    watched = f"shop-{uuid.uuid4().hex[:8]}"
    namespace, allows = install_rbac({"operator": {"watchNamespaces": [watched]}})
    unwatched = "default"

    assert allows("get", "secrets", watched)
    assert allows("get", "configmaps", watched)
    assert allows("watch", "scrapejobs.scrapeq.io", watched)
    assert allows("create", "events", watched)
    assert not allows("get", "secrets", unwatched)
    assert not allows("get", "configmaps", unwatched)
    assert not allows("watch", "scrapejobs.scrapeq.io", unwatched)
    assert not allows("watch", "scrapejobs.scrapeq.io", None)
    # The pools stay in the release namespace, and nowhere else, the watched ones included.
    assert allows("list", "deployments", namespace)
    assert not allows("list", "deployments", watched)
    assert not allows("patch", "pods", watched)


def test_a_chart_without_pools_grants_no_deployment_patch_at_all(
    install_rbac: Callable[[dict[str, Any]], tuple[str, Allows]],
) -> None:
    # An empty resourceNames would mean every name: the rule is left out instead.
    namespace, allows = install_rbac({"workers": {"pools": []}})
    assert not allows("patch", "deployments/anything", namespace)
    assert not allows("patch", "deployments/anything:scale", namespace)
    assert allows("list", "deployments", namespace)
