"""The RBAC in deploy/rbac is enough for everything the operator does, and no more is needed.

The operator runs cluster-wide, as deployed by default (it also sees ScrapeJobs and pools that
other tests left in their namespaces; the assertions only look at this test's namespace).

The operator runs with a real ServiceAccount token (TokenRequest on the real kube-apiserver)
of the `scrapeq-operator` ServiceAccount bound to the ClusterRole from deploy/rbac, plus the
pool Role of deploy/rbac bound in this test's namespace for its pool `scrapers` (the operator runs
with `--pool-namespace` set to it), and goes through a whole ScrapeJob lifecycle and a scale-up;
its log must show no forbidden request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import scrapeq_queue
import yaml
from scrapeq_queue.sealed_credentials import SealingKeys

from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    owner_progress,
    run_queue_call,
    scrapejob,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

RBAC_DIR = REPOSITORY_ROOT / "deploy" / "rbac"
SERVICE_ACCOUNT = "scrapeq-operator"
SYSTEM_NAMESPACE = "scrapeq-system"
# A queue of this test's own: the cluster-wide operator also queues ScrapeJobs that other tests
# left in their namespaces (into this test's database), and they must not count here.
QUEUE = "rbac-test"
# The scheduled job's runs queue here, away from the backlog the scaling assertions count.
SCHEDULE_QUEUE = "rbac-schedule"
POOL = "scrapers"


def _service_account_kubeconfig(kubectl: Kubectl, namespace: str, directory: Path) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount with a bound token."""
    if not kubectl.exists("namespace", SYSTEM_NAMESPACE, ""):
        kubectl.run("create", "namespace", SYSTEM_NAMESPACE, check=False)
    kubectl.run("apply", "-k", str(RBAC_DIR))
    # The pool Role as shipped, moved to this test's namespace and naming its pool.
    for document in yaml.safe_load_all((RBAC_DIR / "operator.yaml").read_text()):
        if document and document["kind"] in ("Role", "RoleBinding"):
            document["metadata"]["namespace"] = namespace
            for rule in document.get("rules", []):
                if "resourceNames" in rule:
                    rule["resourceNames"] = [POOL]
            kubectl.apply(document)
    token = kubectl.run(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NAMESPACE, "--duration=1h"
    ).stdout.strip()
    admin = json.loads(kubectl.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": SERVICE_ACCOUNT,
                "context": {"cluster": cluster["name"], "user": SERVICE_ACCOUNT},
            }
        ],
        "current-context": SERVICE_ACCOUNT,
    }
    path = directory / "operator-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


async def _finish(job: scrapeq_queue.ClaimedJob, connection: Any) -> bool:
    """Play the worker: the b.example.net page fails for good, the others succeed."""
    if job.url.startswith("https://b."):
        return await scrapeq_queue.fail_job(
            connection,
            job.id,
            job.attempt,
            error="HTTP 404",
            reason="http_error",
            duration_seconds=0.1,
        )
    return await scrapeq_queue.complete_job(
        connection, job.id, job.attempt, result={"ok": True}, duration_seconds=0.1
    )


def test_the_operator_does_its_whole_job_with_only_the_shipped_rbac(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    tmp_path: Path,
) -> None:
    kubeconfig = _service_account_kubeconfig(kubectl, namespace, tmp_path)
    as_operator = Kubectl(kubeconfig)
    denied = as_operator.run("get", "secrets", "-n", namespace, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    # A stolen token rewrites no other Deployment: neither another one in the pool namespace
    # nor the pool's namesake elsewhere.
    for name, where in (("bystander", namespace), (POOL, "default")):
        refused = as_operator.run(
            "patch", "deployment", name, "-n", where, "--type=merge",
            "-p", '{"metadata": {"labels": {"rewritten": "yes"}}}', check=False,
        )  # fmt: skip
        assert "forbidden" in refused.stderr.lower(), refused.stderr

    kubectl.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "scrapers",
                "namespace": namespace,
                "labels": {"scrapeq.io/worker-pool": "scrapers"},
                "annotations": {
                    "scrapeq.io/queue": QUEUE,
                    "scrapeq.io/jobs-per-replica": "1",
                    "scrapeq.io/scale-down-stabilization-seconds": "1",
                },
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "scrapers"}},
                "template": {
                    "metadata": {"labels": {"app": "scrapers"}},
                    "spec": {"containers": [{"name": "w", "image": "scrapeq-worker:test"}]},
                },
            },
        }
    )
    kubectl.run(
        "create",
        "configmap",
        "url-list",
        "-n",
        namespace,
        "--from-literal=urls.txt=https://a.example.com/1\nhttps://a.example.com/2\n",
    )
    operator = operator_factory(
        empty_database_url,
        kubeconfig=kubeconfig,
        clusterwide=True,
        environment={
            "SCRAPEQ_SEALING_KEY": SealingKeys.generate(),
            "SCRAPEQ_OPERATOR_POOL_NAMESPACES": namespace,
        },
    )

    listed = scrapejob(
        "listed",
        urlsFrom={"configMapKeyRef": {"name": "url-list", "key": "urls.txt"}},
        queue=QUEUE,
    )
    listed["metadata"]["namespace"] = namespace
    kubectl.create(listed)
    # Another site than a.example.com's (example.com): its row can start beside their two.
    failing = scrapejob("failing", url="https://b.example.net/", retries={"limit": 0}, queue=QUEUE)
    failing["metadata"]["namespace"] = namespace
    kubectl.create(failing)
    uid = kubectl.get("scrapejob", "listed", namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 2, within=30, what="rows"
    )
    # spec.credentials: the operator reads the named Secret (get, never list).
    kubectl.run("create", "secret", "generic", "login", "-n", namespace, "--from-literal=t=x")
    signed_in = scrapejob(
        "signed-in",
        url="https://d.example.com/",
        credentials={"secretRef": {"name": "login"}, "headers": {"X-Token": "t"}},
        queue=SCHEDULE_QUEUE,
    )
    signed_in["metadata"]["namespace"] = namespace
    kubectl.create(signed_in)
    signed_in_uid = kubectl.get("scrapejob", "signed-in", namespace)["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(empty_database_url, signed_in_uid).total == 1,
        within=30,
        what="the row of the job with credentials",
    )

    # Backlog of three rows, one job per replica: the operator scales the pool to 3.
    eventually_blocking(
        lambda: kubectl.get("deployment", "scrapers", namespace)["spec"]["replicas"] == 3,
        within=30,
        what="the pool to scale up",
    )
    for job in work_rows(empty_database_url, queue=QUEUE, hold=True):
        run_queue_call(empty_database_url, partial(_finish, job))

    eventually_blocking(
        lambda: (
            kubectl.get("scrapejob", "listed", namespace).get("status", {}).get("phase")
            == "Succeeded"
        ),
        within=30,
        what="listed to succeed",
    )
    eventually_blocking(
        lambda: (
            kubectl.get("scrapejob", "failing", namespace).get("status", {}).get("phase")
            == "Failed"
        ),
        within=30,
        what="failing to fail",
    )
    eventually_blocking(
        lambda: kubectl.get("deployment", "scrapers", namespace)["spec"]["replicas"] < 3,
        within=30,
        what="the pool to scale down",
    )
    # A scheduled ScrapeJob creates its runs as ScrapeJobs, and deleting it deletes them.
    scheduled = scrapejob(
        "scheduled", url="https://c.example.com/", schedule="@every 5s", queue=SCHEDULE_QUEUE
    )
    scheduled["metadata"]["namespace"] = namespace
    kubectl.create(scheduled)
    selector = "scrapeq.io/schedule=scheduled"

    def runs() -> str:
        listed = kubectl.run("get", "scrapejobs", "-n", namespace, "-l", selector, "-o", "name")
        return listed.stdout.strip()

    eventually_blocking(runs, within=30, what="the scheduled job's first run")
    kubectl.run("delete", "scrapejob", "scheduled", "-n", namespace, "--timeout=30s")
    eventually_blocking(
        lambda: not runs(), within=30, what="the runs to be deleted with their schedule"
    )
    kubectl.run(
        "delete", "scrapejob", "listed", "failing", "signed-in", "-n", namespace, "--timeout=30s"
    )

    log = operator.log_tail(200_000)
    assert "forbidden" not in log.lower(), log[-4000:]
