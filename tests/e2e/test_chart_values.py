"""The chart's values for platform teams, each rendered by the real helm binary and checked in
the objects it produces: pod labels and annotations, priority, topology spread, per-pool
scheduling, ServiceAccount annotations, PodDisruptionBudgets, uid-free security contexts,
images, the bundled database's password, the monitoring labels and the templated alert (run
through the real promtool)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import missing_part
from tests.e2e.helm_chart import (
    CHART,
    ROOT,
    STABLE_PASSWORD,
    Manifest,
    find,
    of_kind,
    render,
    render_error,
)

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]

DIGEST = "sha256:" + "ab" * 32

# Every platform knob at once, as a platform team might set them (also dry-run on the real
# API server by test_chart.py).
PLATFORM_VALUES: dict[str, Any] = {
    "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
    "operator": {
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "op@p.iam"}},
        "podLabels": {"team": "data", "app.kubernetes.io/component": "overridden"},
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "priorityClassName": "scrapeq-control",
    },
    "workers": {
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/w"}},
        "podLabels": {"team": "data"},
        "podAnnotations": {"sidecar.istio.io/inject": "false", "cost-center": "shared"},
        "priorityClassName": "scrapeq-batch",
        "nodeSelector": {"pool": "general"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "scrape"}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": "25%"},
        "pools": [
            {"name": "default", "queues": ["default"]},
            {
                "name": "spot",
                "queues": ["bulk"],
                "podAnnotations": {"cost-center": "spot"},
                "priorityClassName": "scrapeq-preemptible",
                "nodeSelector": {"cloud.google.com/gke-spot": "true"},
                "tolerations": [
                    {
                        "key": "cloud.google.com/gke-spot",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/arch",
                                            "operator": "In",
                                            "values": ["amd64"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 2,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"team": "data"}},
                    }
                ],
            },
        ],
    },
    "database": {
        "bundled": {
            "passwordSecret": {"name": "my-db-password", "key": "password"},
            "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
            "podAnnotations": {"sidecar.istio.io/inject": "false"},
            "priorityClassName": "scrapeq-control",
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        }
    },
}


def with_password(values: dict[str, Any]) -> dict[str, Any]:
    """`values` plus a bundled-database password (helm template cannot generate one)."""
    database = values.get("database", {})
    if "passwordSecret" in database.get("bundled", {}) or "existingSecret" in database:
        return values
    bundled = {**STABLE_PASSWORD["database"]["bundled"], **database.get("bundled", {})}
    return {**values, "database": {**database, "bundled": bundled}}


def rendered(helm_binary: Path, values: dict[str, Any], **options: Any) -> list[Manifest]:
    return render(helm_binary, with_password(values), **options)


def pod_spec(workload: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def pod_metadata(workload: Manifest) -> dict[str, Any]:
    metadata: dict[str, Any] = workload["spec"]["template"]["metadata"]
    return metadata


@pytest.fixture(scope="module")
def platform(helm_binary: Path) -> list[Manifest]:
    return rendered(helm_binary, PLATFORM_VALUES)


# --- pod labels and annotations ----------------------------------------------------------------


def test_operator_pod_labels_and_annotations_are_added_without_touching_its_selector(
    platform: list[Manifest],
) -> None:
    operator = find(platform, "Deployment", "scrapeq-operator")
    metadata = pod_metadata(operator)
    assert metadata["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert metadata["labels"]["team"] == "data"
    # A user label cannot take the pod out of its own Deployment's selector.
    assert metadata["labels"]["app.kubernetes.io/component"] == "operator"
    for key, value in operator["spec"]["selector"]["matchLabels"].items():
        assert metadata["labels"][key] == value


def test_the_helm_test_pod_gets_the_operator_pod_annotations_so_a_mesh_sidecar_cannot_block_it(
    platform: list[Manifest],
) -> None:
    test_pod = find(platform, "Pod", "scrapeq-test-operator")
    assert test_pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["metadata"]["labels"]["team"] == "data"


def test_worker_pod_annotations_merge_the_workers_wide_ones_with_the_pools_own(
    platform: list[Manifest],
) -> None:
    default = pod_metadata(find(platform, "Deployment", "scrapeq-worker-default"))
    spot = pod_metadata(find(platform, "Deployment", "scrapeq-worker-spot"))
    assert default["annotations"] == {"sidecar.istio.io/inject": "false", "cost-center": "shared"}
    assert spot["annotations"] == {"sidecar.istio.io/inject": "false", "cost-center": "spot"}
    assert default["labels"]["team"] == spot["labels"]["team"] == "data"
    assert spot["labels"]["scrapeq.io/worker-pool"] == "spot"


def test_the_bundled_database_pod_takes_its_own_annotations(platform: list[Manifest]) -> None:
    database = find(platform, "StatefulSet", "scrapeq-database")
    assert pod_metadata(database)["annotations"] == {"sidecar.istio.io/inject": "false"}


def test_by_default_pods_carry_no_annotations(helm_binary: Path) -> None:
    manifests = rendered(helm_binary, {})
    for workload in of_kind(manifests, "Deployment") + of_kind(manifests, "StatefulSet"):
        assert "annotations" not in pod_metadata(workload), workload["metadata"]["name"]


# --- scheduling ---------------------------------------------------------------------------------


def test_priority_class_names_go_to_the_operator_the_workers_and_a_pool_that_overrides_them(
    platform: list[Manifest],
) -> None:
    assert pod_spec(find(platform, "Deployment", "scrapeq-operator"))["priorityClassName"] == (
        "scrapeq-control"
    )
    default = pod_spec(find(platform, "Deployment", "scrapeq-worker-default"))
    spot = pod_spec(find(platform, "Deployment", "scrapeq-worker-spot"))
    assert default["priorityClassName"] == "scrapeq-batch"
    assert spot["priorityClassName"] == "scrapeq-preemptible"
    database = pod_spec(find(platform, "StatefulSet", "scrapeq-database"))
    assert database["priorityClassName"] == "scrapeq-control"


def test_a_spot_pool_has_its_own_node_selector_tolerations_and_affinity(
    platform: list[Manifest],
) -> None:
    default = pod_spec(find(platform, "Deployment", "scrapeq-worker-default"))
    spot = pod_spec(find(platform, "Deployment", "scrapeq-worker-spot"))
    assert default["nodeSelector"] == {"pool": "general"}
    assert default["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "scrape"}]
    assert "affinity" not in default
    assert spot["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert spot["tolerations"] == [
        {"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}
    ]
    terms = spot["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "kubernetes.io/arch"


def test_a_pool_can_clear_the_workers_wide_tolerations_with_an_empty_list(
    helm_binary: Path,
) -> None:
    values = {
        "workers": {
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "pools": [{"name": "plain", "queues": ["default"], "tolerations": []}],
        }
    }
    spec = pod_spec(find(rendered(helm_binary, values), "Deployment", "scrapeq-worker-plain"))
    assert "tolerations" not in spec


def test_topology_spread_without_a_label_selector_spreads_the_pools_own_pods(
    platform: list[Manifest],
) -> None:
    default = find(platform, "Deployment", "scrapeq-worker-default")
    (constraint,) = pod_spec(default)["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
    assert constraint["labelSelector"] == {
        "matchLabels": default["spec"]["selector"]["matchLabels"]
    }
    spot = pod_spec(find(platform, "Deployment", "scrapeq-worker-spot"))
    assert spot["topologySpreadConstraints"] == [
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"team": "data"}},
        }
    ]


# --- identities, disruption budgets, security contexts ----------------------------------------


def test_service_account_annotations_give_the_operator_and_the_workers_cloud_identities(
    platform: list[Manifest],
) -> None:
    operator = find(platform, "ServiceAccount", "scrapeq-operator")
    worker = find(platform, "ServiceAccount", "scrapeq-worker")
    assert operator["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "op@p.iam"}
    assert worker["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/w"
    }
    for pool in ("default", "spot"):
        spec = pod_spec(find(platform, "Deployment", f"scrapeq-worker-{pool}"))
        assert spec["serviceAccountName"] == "scrapeq-worker"
        # An identity, not API access: the workers still mount no token.
        assert spec["automountServiceAccountToken"] is False
    assert worker["automountServiceAccountToken"] is False


def test_each_pool_gets_a_pod_disruption_budget_over_its_own_pods_when_enabled(
    helm_binary: Path, platform: list[Manifest]
) -> None:
    assert of_kind(rendered(helm_binary, {}), "PodDisruptionBudget") == []
    budgets = {
        budget["metadata"]["name"]: budget for budget in of_kind(platform, "PodDisruptionBudget")
    }
    assert set(budgets) == {"scrapeq-worker-default", "scrapeq-worker-spot"}
    for name, budget in budgets.items():
        assert budget["spec"]["maxUnavailable"] == "25%"
        pool = find(platform, "Deployment", name)
        assert budget["spec"]["selector"]["matchLabels"] == pool["spec"]["selector"]["matchLabels"]


def test_by_default_every_pod_runs_as_the_images_fixed_non_root_user(helm_binary: Path) -> None:
    manifests = rendered(helm_binary, {})
    for workload in of_kind(manifests, "Deployment"):
        context = pod_spec(workload)["securityContext"]
        assert context["runAsNonRoot"] is True
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (10001,) * 3
    database = pod_spec(find(manifests, "StatefulSet", "scrapeq-database"))["securityContext"]
    assert (database["runAsUser"], database["runAsGroup"], database["fsGroup"]) == (999,) * 3


def test_null_ids_leave_the_uid_to_the_platform_and_keep_run_as_non_root(
    platform: list[Manifest],
) -> None:
    """OpenShift's restricted SCC assigns a uid from the namespace's range and refuses others."""
    test_pod = find(platform, "Pod", "scrapeq-test-operator")
    workloads = [*of_kind(platform, "Deployment"), *of_kind(platform, "StatefulSet")]
    contexts = [pod_spec(workload)["securityContext"] for workload in workloads]
    contexts.append(test_pod["spec"]["securityContext"])
    assert len(contexts) == 5  # operator, two pools, database, test Pod
    for context in contexts:
        assert context == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for workload in of_kind(platform, "Deployment"):
        (container,) = pod_spec(workload)["containers"]
        # No user database entry for an assigned uid: HOME points at the writable emptyDir.
        assert {"name": "HOME", "value": "/tmp"} in container["env"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


# --- worker replicas -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [{}, yaml.safe_load((CHART / "values-production.yaml").read_text()), PLATFORM_VALUES],
    ids=["defaults", "production", "platform"],
)
def test_worker_deployments_never_carry_replicas_so_upgrades_keep_the_operators_scale(
    helm_binary: Path, values: dict[str, Any]
) -> None:
    manifests = rendered(helm_binary, values)
    pools = [d for d in of_kind(manifests, "Deployment") if "-worker-" in d["metadata"]["name"]]
    assert pools
    for pool in pools:
        assert "replicas" not in pool["spec"], pool["metadata"]["name"]
        # What the operator reads instead.
        assert "scrapeq.io/min-replicas" in pool["metadata"]["annotations"]
    # The operator itself stays at exactly one replica.
    assert find(manifests, "Deployment", "scrapeq-operator")["spec"]["replicas"] == 1


# --- images --------------------------------------------------------------------------------------


def images(manifests: list[Manifest]) -> dict[str, tuple[str, str]]:
    """Container name -> (image, pull policy) of every pod template and Pod."""
    found = {}
    for manifest in manifests:
        if manifest["kind"] == "Pod":
            spec = manifest["spec"]
        elif manifest["kind"] in {"Deployment", "StatefulSet"}:
            spec = pod_spec(manifest)
        else:
            continue
        for container in spec["containers"]:
            found[container["name"]] = (container["image"], container["imagePullPolicy"])
    return found


def test_default_images_take_their_tag_from_the_charts_app_version(helm_binary: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found = images(rendered(helm_binary, {}))
    version = chart["appVersion"]
    assert found["operator"] == (f"docker.io/scrapeq/operator:{version}", "IfNotPresent")
    assert found["worker"] == (f"docker.io/scrapeq/worker:{version}", "IfNotPresent")
    assert found["check"] == found["operator"]  # the helm test Pod reuses the operator image
    assert found["postgres"] == ("docker.io/library/postgres:15-bookworm", "IfNotPresent")


def test_the_charts_app_version_is_the_python_packages_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_registry_repository_tag_and_pull_policy_are_set_per_image(helm_binary: Path) -> None:
    values = {
        "operator": {
            "image": {
                "registry": "registry.corp:5000",
                "repository": "mirror/op",
                "tag": "1.2.3",
                "pullPolicy": "Always",
            }
        },
        "workers": {
            "image": {
                "registry": "",
                "repository": "mirror/worker",
                "tag": "1.2.3-rc1",
                "pullPolicy": "Never",
            }
        },
        "database": {
            "bundled": {
                "image": {
                    "registry": "quay.io",
                    "repository": "db/postgres",
                    "tag": "16",
                    "pullPolicy": "Always",
                }
            }
        },
    }
    found = images(rendered(helm_binary, values))
    assert found["operator"] == ("registry.corp:5000/mirror/op:1.2.3", "Always")
    assert found["check"] == ("registry.corp:5000/mirror/op:1.2.3", "Always")
    assert found["worker"] == ("mirror/worker:1.2.3-rc1", "Never")
    assert found["postgres"] == ("quay.io/db/postgres:16", "Always")


def test_a_digest_wins_over_the_tag(helm_binary: Path) -> None:
    values = {
        "operator": {
            "image": {"repository": "scrapeq/operator", "tag": "ignored", "digest": DIGEST}
        },
        "workers": {"image": {"repository": "scrapeq/worker", "digest": DIGEST}},
        "database": {"bundled": {"image": {"repository": "library/postgres", "digest": DIGEST}}},
    }
    found = images(rendered(helm_binary, values))
    assert found["operator"][0] == f"docker.io/scrapeq/operator@{DIGEST}"
    assert found["worker"][0] == f"docker.io/scrapeq/worker@{DIGEST}"
    assert found["postgres"][0] == f"docker.io/library/postgres@{DIGEST}"


# --- the bundled database's password -------------------------------------------------------------


def test_helm_template_without_a_password_fails_and_says_how_to_keep_one(
    helm_binary: Path,
) -> None:
    error = render_error(helm_binary, {})
    assert "database.bundled: no password to render" in error
    for remedy in (
        "database.bundled.passwordSecret.name",
        "database.bundled.password",
        "database.existingSecret.name",
    ):
        assert remedy in error


def test_a_password_value_renders_the_same_secret_on_every_render(helm_binary: Path) -> None:
    first, second = (rendered(helm_binary, {}) for _ in range(2))
    secret = find(first, "Secret", "scrapeq-database")
    assert secret == find(second, "Secret", "scrapeq-database")
    assert secret["stringData"] == {"POSTGRES_PASSWORD": "a-stable-test-password"}
    assert_database_password_from(first, "scrapeq-database", "POSTGRES_PASSWORD")


def test_an_existing_password_secret_replaces_the_charts_secret(platform: list[Manifest]) -> None:
    assert of_kind(platform, "Secret") == []
    assert_database_password_from(platform, "my-db-password", "password")


def assert_database_password_from(manifests: list[Manifest], secret: str, key: str) -> None:
    """PostgreSQL, the operator and every pool read the password from `secret`/`key`."""
    reference = {"secretKeyRef": {"name": secret, "key": key}}
    database = pod_spec(find(manifests, "StatefulSet", "scrapeq-database"))["containers"][0]
    assert {"name": "POSTGRES_PASSWORD", "valueFrom": reference} in database["env"]
    for workload in of_kind(manifests, "Deployment"):
        env = pod_spec(workload)["containers"][0]["env"]
        assert {"name": "PGPASSWORD", "valueFrom": reference} in env
        # The URL holds no password: libpq takes PGPASSWORD.
        assert {
            "name": "DATABASE_URL",
            "value": "postgresql://scrapeq@scrapeq-database:5432/scrapeq",
        } in env


def test_an_external_database_is_read_from_its_secret_and_needs_no_password(
    helm_binary: Path,
) -> None:
    values = {"database": {"existingSecret": {"name": "prod-db", "key": "url"}}}
    manifests = render(helm_binary, values)
    assert of_kind(manifests, "StatefulSet") == []
    assert of_kind(manifests, "Secret") == []
    for workload in of_kind(manifests, "Deployment"):
        env = pod_spec(workload)["containers"][0]["env"]
        assert {
            "name": "DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": "prod-db", "key": "url"}},
        } in env
        assert not [variable for variable in env if variable["name"] == "PGPASSWORD"]


def test_no_database_at_all_is_refused_with_a_message(helm_binary: Path) -> None:
    error = render_error(helm_binary, {"database": {"bundled": {"enabled": False}}})
    assert "no database: set database.existingSecret.name" in error


# --- monitoring ----------------------------------------------------------------------------------


def test_service_monitors_and_the_rule_carry_the_release_label_kube_prometheus_stack_selects(
    helm_binary: Path,
) -> None:
    manifests = rendered(helm_binary, {}, monitoring=True)
    monitored = of_kind(manifests, "ServiceMonitor") + of_kind(manifests, "PrometheusRule")
    assert len(monitored) == 3  # operator, workers, alerts
    for manifest in monitored:
        assert manifest["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_release_label_follows_the_value_or_is_left_out(helm_binary: Path) -> None:
    values = {
        "metrics": {
            "prometheusRelease": "monitoring",
            "serviceMonitor": {"additionalLabels": {"team": "data"}},
        }
    }
    manifests = rendered(helm_binary, values, monitoring=True)
    for monitor in of_kind(manifests, "ServiceMonitor"):
        assert monitor["metadata"]["labels"]["release"] == "monitoring"
        assert monitor["metadata"]["labels"]["team"] == "data"
    unlabelled = rendered(helm_binary, {"metrics": {"prometheusRelease": ""}}, monitoring=True)
    for manifest in of_kind(unlabelled, "ServiceMonitor") + of_kind(unlabelled, "PrometheusRule"):
        assert "release" not in manifest["metadata"]["labels"]


def test_the_operator_s_pool_metrics_keep_the_pool_s_namespace_and_the_workers_keep_theirs(
    helm_binary: Path,
) -> None:
    monitors = {
        monitor["metadata"]["name"]: monitor["spec"]["endpoints"]
        for monitor in of_kind(rendered(helm_binary, {}, monitoring=True), "ServiceMonitor")
    }
    # A pool's namespace label joins kube-state-metrics only if Prometheus keeps it.
    assert [endpoint.get("honorLabels") for endpoint in monitors["scrapeq-operator"]] == [True]
    assert [endpoint.get("honorLabels") for endpoint in monitors["scrapeq-workers"]] == [None]


def promtool(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        missing_part("promtool", "install the Debian package `prometheus`")
    assert binary is not None
    return subprocess.run(
        [binary, *arguments], cwd=directory, capture_output=True, text=True, timeout=60, check=False
    )


def operator_down_test(*, series: list[tuple[str, str]], fires: bool) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series],
        "alert_rule_test": [
            {
                "eval_time": "25m",
                "alertname": "ScrapeqOperatorDown",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "critical"},
                        "exp_annotations": {
                            "summary": "The scrapeq operator is down or not scraped.",
                            "description": "No operator target has been up for 5 minutes.",
                        },
                    }
                ]
                if fires
                else [],
            }
        ],
    }


def test_the_rendered_operator_down_alert_fires_for_its_release_whatever_else_is_up(
    helm_binary: Path, tmp_path: Path
) -> None:
    """The chart's PrometheusRule for release `sq` in namespace `jobs`, run by promtool:
    kube-prometheus-stack's operator (a `*-operator` job) and another scrapeq release's operator
    are up; this release's operator went down, and the alert fires."""
    manifests = rendered(helm_binary, {}, release="sq", namespace="jobs", monitoring=True)
    (rule,) = of_kind(manifests, "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    ours = 'up{job="sq-scrapeq-operator",namespace="jobs",instance="a"}'
    others = [
        ('up{job="kube-prometheus-stack-operator",namespace="monitoring",instance="b"}', "1x30"),
        ('up{job="sq-scrapeq-operator",namespace="other-team",instance="c"}', "1x30"),
        ('up{job="scrapeq-operator",namespace="scrapeq-system",instance="d"}', "1x30"),
    ]
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            operator_down_test(series=[(ours, "1x10 0x20"), *others], fires=True),
            operator_down_test(series=[(ours, "1x30"), *others], fires=False),
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = promtool(tmp_path, "test", "rules", "tests.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'absent(up{job="sq-scrapeq-operator", namespace="jobs"} == 1)' in yaml.safe_dump(rule)


# --- the schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"podSecurityContext": {"runAsUsr": 1}}, "additional properties 'runAsUsr' not allowed"),
        (
            {"operator": {"image": {"repository": "x", "digest": "latest"}}},
            "does not match pattern",
        ),
        ({"operator": {"podAnnotations": {"a": 1}}}, "got number, want string"),
        (
            {"workers": {"pools": [{"name": "p", "queues": ["q"], "nodeSelectr": {}}]}},
            "'nodeSelectr' not allowed",
        ),
        ({"database": {"bundled": {"passwordSecret": {"nme": "x"}}}}, "'nme' not allowed"),
        (
            {"workers": {"podDisruptionBudget": {"maxUnavailable": "most"}}},
            "does not match pattern",
        ),
    ],
    ids=[
        "security-typo",
        "bad-digest",
        "annotation-number",
        "pool-typo",
        "secret-typo",
        "pdb-word",
    ],
)
def test_the_schema_rejects_mistakes_in_the_new_values(
    helm_binary: Path, values: dict[str, Any], message: str
) -> None:
    error = render_error(helm_binary, with_password(values))
    assert "values don't meet the specifications of the schema" in error
    assert message in error, error


# --- per-site politeness -------------------------------------------------------------------------


def test_the_site_politeness_values_reach_the_workers_flags_and_the_operators_annotations(
    helm_binary: Path,
) -> None:
    values = {
        "workers": {"politeness": {"maxConcurrentPerSite": 5, "delaySeconds": 1.5}},
        "operator": {"retention": {"idleSitesDays": 3}},
    }
    manifests = rendered(helm_binary, values)
    pools = [d for d in of_kind(manifests, "Deployment") if "-worker-" in d["metadata"]["name"]]
    assert pools
    for pool in pools:
        assert pool["metadata"]["annotations"]["scrapeq.io/max-concurrent-per-site"] == "5"
        assert pool["metadata"]["annotations"]["scrapeq.io/site-delay-seconds"] == "1.5"
        env = {item["name"]: item.get("value") for item in pod_spec(pool)["containers"][0]["env"]}
        assert (env["SCRAPEQ_MAX_CONCURRENT_PER_SITE"], env["SCRAPEQ_SITE_DELAY_SECONDS"]) == (
            "5",
            "1.5",
        )
    operator = pod_spec(find(manifests, "Deployment", "scrapeq-operator"))["containers"][0]
    env = {item["name"]: item.get("value") for item in operator["env"]}
    assert env["SCRAPEQ_OPERATOR_MAX_CONCURRENT_PER_SITE"] == "5"
    assert env["SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS"] == "3"


@pytest.mark.parametrize(
    ("values", "old"),
    [
        ({"workers": {"politeness": {"maxConcurrentPerHost": 5}}}, "maxConcurrentPerHost"),
        ({"operator": {"retention": {"idleHostsDays": 3}}}, "idleHostsDays"),
    ],
    ids=["maxConcurrentPerHost", "idleHostsDays"],
)
def test_the_schema_refuses_the_site_values_under_their_names_before_0_1_0(
    helm_binary: Path, values: dict[str, Any], old: str
) -> None:
    error = render_error(helm_binary, with_password(values))
    assert "values don't meet the specifications of the schema" in error
    assert f"additional properties '{old}' not allowed" in error, error


POOLED = {
    "database": {
        "bundled": {"enabled": False},
        "existingSecret": {"name": "db", "key": "DATABASE_URL"},
        "pooler": {"enabled": True, "listenSecret": {"name": "direct", "key": "URL"}},
    }
}


def test_with_a_pooler_the_operator_and_the_workers_run_pooled_and_listen_on_the_direct_url(
    helm_binary: Path,
) -> None:
    manifests = render(helm_binary, POOLED)
    for name in ("scrapeq-operator", "scrapeq-worker-default"):
        [container] = pod_spec(find(manifests, "Deployment", name))["containers"]
        env = {entry["name"]: entry for entry in container["env"]}
        assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "db",
            "key": "DATABASE_URL",
        }
        assert env["DATABASE_POOLED"]["value"] == "true"
        assert env["DATABASE_LISTEN_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "direct",
            "key": "URL",
        }


def test_a_pooler_without_a_direct_url_or_with_the_bundled_database_is_refused(
    helm_binary: Path,
) -> None:
    no_direct = {"database": {**POOLED["database"], "pooler": {"enabled": True}}}
    assert "database.pooler.listenSecret.name" in render_error(helm_binary, no_direct)
    bundled = {"database": {"pooler": {"enabled": True}, "bundled": {"password": "x"}}}
    assert "the bundled database has no pooler" in render_error(helm_binary, bundled)


def test_without_a_pooler_nothing_says_pooled(helm_binary: Path) -> None:
    values = {"database": {**POOLED["database"], "pooler": {"enabled": False}}}
    for manifest in render(helm_binary, values):
        assert "DATABASE_POOLED" not in str(manifest)
        assert "DATABASE_LISTEN_URL" not in str(manifest)
