"""The Helm chart and the plain manifests, checked by the real helm binary against the real
kube-apiserver: lint, template, schema validation, install, upgrade, uninstall, and
`kubectl apply -k deploy/ --dry-run=server`."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from scrapeq.local.controlplane import LocalControlPlane
from scrapeq.local.processes import wait_for_established_crd
from tests.conftest import KubeCluster, running
from tests.e2e.helm_chart import CHART, KUBE_VERSION, ROOT, run, succeed
from tests.e2e.test_chart_values import PLATFORM_VALUES

pytestmark = [pytest.mark.helm, pytest.mark.controlplane, pytest.mark.timeout(300)]

PRODUCTION_VALUES = CHART / "values-production.yaml"

# Minimal stand-ins for the prometheus-operator CRDs, so the chart's ServiceMonitor and
# PrometheusRule are rendered and accepted by the API server. Their schemas accept anything:
# what is checked here is the chart's conditional rendering, not prometheus-operator.
MONITORING_CRDS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    for plural, kind in (
        ("servicemonitors", "ServiceMonitor"),
        ("prometheusrules", "PrometheusRule"),
    )
]


@pytest.fixture(scope="module")
def chart_cluster() -> Iterator[KubeCluster]:
    """A control plane of the chart tests' own: the chart installs the CRD, which other tests'
    `kubectl apply` would already own on the shared session cluster."""
    cluster = LocalControlPlane()
    with running("kube-apiserver", cluster):
        yield KubeCluster(kubeconfig=cluster.kubeconfig, server=cluster.server)


@pytest.fixture
def helm(helm_binary: Path, chart_cluster: KubeCluster) -> list[str]:
    return [str(helm_binary), f"--kubeconfig={chart_cluster.kubeconfig}"]


@pytest.fixture
def kubectl(chart_cluster: KubeCluster) -> list[str]:
    return ["kubectl", f"--kubeconfig={chart_cluster.kubeconfig}"]


@pytest.fixture
def namespace(kubectl: list[str]) -> str:
    name = f"chart-{uuid.uuid4().hex[:8]}"
    succeed([*kubectl, "create", "namespace", name])
    return name


def rendered_kinds(manifest: str) -> list[tuple[str, str]]:
    return sorted(
        (document["kind"], document["metadata"]["name"])
        for document in yaml.safe_load_all(manifest)
        if document
    )


@pytest.mark.parametrize("values", [None, PRODUCTION_VALUES], ids=["defaults", "production"])
def test_helm_lint_and_template_pass(helm_binary: Path, values: Path | None) -> None:
    # Without the cluster the bundled database needs a password it can keep (defaults only).
    extra = ["--values", str(values)] if values else ["--set", "database.bundled.password=x"]
    succeed(
        [str(helm_binary), "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, *extra]
    )
    manifest = succeed(
        [
            str(helm_binary),
            "template",
            "scrapeq",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            *extra,
        ]
    )
    kinds = {kind for kind, _ in rendered_kinds(manifest)}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ServiceAccount"} <= kinds
    if values is None:
        assert "StatefulSet" in kinds  # the bundled database, for trying scrapeq out
    else:
        assert "StatefulSet" not in kinds
        assert "NetworkPolicy" in kinds


def test_every_name_fits_in_63_characters_with_a_long_release_name(helm_binary: Path) -> None:
    release = "a-release-name-that-is-much-longer-than-anyone-wouldx"  # 53: the maximum
    manifest = succeed(
        [
            str(helm_binary),
            "template",
            release,
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "database.bundled.password=x",
        ]
    )
    for kind, name in rendered_kinds(manifest):
        assert len(name) <= 63, (kind, name)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("unknownKey: 1", "additional properties 'unknownKey' not allowed"),
        (
            "workers:\n  pools:\n    - name: Bad_Name\n      queues: [default]",
            "does not match pattern",
        ),
        ('operator:\n  metricsPort: "9102"', "got string, want integer"),
        (
            "workers:\n  pools:\n    - name: fast\n      queues: [default]\n      concurrency: 0",
            "minimum: got 0, want 1",
        ),
    ],
    ids=["unknown-key", "bad-pool-name", "wrong-type", "out-of-range"],
)
def test_invalid_values_are_rejected_with_a_readable_message(
    helm_binary: Path, tmp_path: Path, override: str, message: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(override + "\n")
    result = run(
        [
            str(helm_binary),
            "template",
            "scrapeq",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--values",
            str(values),
        ]
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def test_install_upgrade_and_uninstall_on_the_real_api_server(
    helm: list[str], kubectl: list[str], namespace: str, chart_cluster: KubeCluster
) -> None:
    for crd in MONITORING_CRDS:
        succeed([*kubectl, "apply", "-f", "-"], stdin=json.dumps(crd))
    for crd in MONITORING_CRDS:
        wait_for_established_crd(Path(chart_cluster.kubeconfig), crd["metadata"]["name"])
    release = f"sq{namespace[-8:]}"
    notes = succeed([*helm, "install", release, str(CHART), "--namespace", namespace])
    # The generated password (Helm reads the cluster here) and where it is.
    assert f"Its password is in Secret {release}-scrapeq-database (key POSTGRES_PASSWORD)" in notes
    assert "labelled release=kube-prometheus-stack" in notes
    manifest = succeed([*helm, "get", "manifest", release, "--namespace", namespace])
    installed = rendered_kinds(manifest)
    kinds = {kind for kind, _ in installed}
    # Every object the chart rendered exists on the server (accepted, not just templated).
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap", "StatefulSet"} <= kinds
    for kind, name in installed:
        scope = (
            []
            if kind in {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
            else ["-n", namespace]
        )
        succeed([*kubectl, "get", kind.lower(), name, *scope, "-o", "name"])

    pool = json.loads(
        succeed(
            [
                *kubectl,
                "-n",
                namespace,
                "get",
                "deployment",
                f"{release}-scrapeq-worker-default",
                "-o",
                "json",
            ]
        )
    )
    assert pool["metadata"]["labels"]["scrapeq.io/worker-pool"] == "default"
    assert pool["metadata"]["annotations"]["scrapeq.io/max-replicas"] == "10"
    # The chart gives no replicas: Kubernetes defaults a new Deployment to 1, and from then on
    # only the operator's autoscaler changes it.
    assert pool["spec"]["replicas"] == 1
    container = pool["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pool["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # The autoscaler scaled the pool up (as the operator does, through the scale subresource).
    succeed(
        [
            *kubectl,
            "-n",
            namespace,
            "scale",
            "deployment",
            f"{release}-scrapeq-worker-default",
            "--replicas=7",
        ]
    )
    sealing_key = [
        *kubectl,
        "-n",
        namespace,
        "get",
        "secret",
        f"{release}-scrapeq-sealing-key",
        "-o",
        "jsonpath={.data.SCRAPEQ_SEALING_KEY}",
    ]
    # Generated by install (Helm reads the cluster here): one 32-byte key, base64.
    key_before = succeed(sealing_key)
    assert len(base64.b64decode(base64.b64decode(key_before))) == 32
    password_before = succeed(
        [
            *kubectl,
            "-n",
            namespace,
            "get",
            "secret",
            f"{release}-scrapeq-database",
            "-o",
            "jsonpath={.data.POSTGRES_PASSWORD}",
        ]
    )

    succeed(
        [
            *helm,
            "upgrade",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            "workers.pools[0].maxReplicas=3",
            "--set",
            "workers.pools[0].name=default",
            "--set",
            "workers.pools[0].queues[0]=default",
            "--set",
            "grafana.dashboard.enabled=false",
        ]
    )
    pool = json.loads(
        succeed(
            [
                *kubectl,
                "-n",
                namespace,
                "get",
                "deployment",
                f"{release}-scrapeq-worker-default",
                "-o",
                "json",
            ]
        )
    )
    assert pool["metadata"]["annotations"]["scrapeq.io/max-replicas"] == "3"
    # helm upgrade changed the pool's settings, not the replicas the operator had chosen.
    assert pool["spec"]["replicas"] == 7
    dashboards = succeed(
        [*kubectl, "-n", namespace, "get", "configmap", "-l", "grafana_dashboard=1", "-o", "name"]
    )
    assert dashboards.strip() == ""
    password_after = succeed(
        [
            *kubectl,
            "-n",
            namespace,
            "get",
            "secret",
            f"{release}-scrapeq-database",
            "-o",
            "jsonpath={.data.POSTGRES_PASSWORD}",
        ]
    )
    # An upgrade keeps the bundled database's password (it would lock the data out otherwise).
    assert password_after == password_before
    # ... and the sealing key (rows sealed with it could not be opened otherwise).
    assert succeed(sealing_key) == key_before

    succeed([*helm, "uninstall", release, "--namespace", namespace, "--wait"])
    # The CRD (and with it every ScrapeJob) survives an uninstall by default.
    succeed([*kubectl, "get", "crd", "scrapejobs.scrapeq.io", "-o", "name"])
    leftovers = succeed(
        [*kubectl, "-n", namespace, "get", "deployments,statefulsets,services", "-o", "name"]
    )
    assert leftovers.strip() == ""


def test_every_platform_value_renders_objects_the_api_server_accepts_strictly(
    helm_binary: Path, kubectl: list[str], namespace: str
) -> None:
    """A server-side dry run with strict field validation: a value rendered into the wrong place
    of a pod spec (an unknown field) fails here, not on the user's cluster."""
    manifest = succeed(
        [
            str(helm_binary),
            "template",
            "platform",
            str(CHART),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            "--values",
            "-",
        ],
        stdin=yaml.safe_dump(PLATFORM_VALUES),
    )
    # The CRD is already on the server from other tests of this module, or is created here.
    output = succeed(
        [*kubectl, "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-"],
        stdin=manifest,
    )
    for accepted in (
        "deployment.apps/platform-scrapeq-worker-spot",
        "poddisruptionbudget.policy/platform-scrapeq-worker-spot",
        "statefulset.apps/platform-scrapeq-database",
        "pod/platform-scrapeq-test-operator",
    ):
        assert f"{accepted} created (server dry run)" in output, output


def test_the_plain_manifests_are_accepted_by_a_server_side_dry_run(kubectl: list[str]) -> None:
    # Server-side dry-run does not create the namespace, so it must exist already.
    run([*kubectl, "create", "namespace", "scrapeq-system"])
    output = succeed([*kubectl, "apply", "-k", str(ROOT / "deploy"), "--dry-run=server"])
    assert "deployment.apps/scrapeq-operator created (server dry run)" in output
    assert "customresourcedefinition.apiextensions.k8s.io/scrapejobs.scrapeq.io" in output
    # No helm test Pod: kubectl would create it as an ordinary Pod.
    assert "pod/" not in output


def test_the_plain_manifests_hold_no_helm_hook() -> None:
    generated = (ROOT / "deploy" / "generated" / "scrapeq.yaml").read_text()
    documents = [document for document in yaml.safe_load_all(generated) if document]
    assert documents
    for document in documents:
        annotations = document["metadata"].get("annotations") or {}
        assert "helm.sh/hook" not in annotations, document["metadata"]["name"]
        assert document["kind"] != "Pod", document["metadata"]["name"]


def test_generated_copies_match_their_sources() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.generate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
