"""`make demo` on real Pods (the default where the node can run): every example ScrapeJob
reaches its expected phase with the operator, the workers and PostgreSQL as Pods, the worker
pods are shown scaling up from zero, they write a screenshot and a job's output to the demo's S3
server, and the demo removes its release when it ends."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scrapeq.demo.site import PRODUCTS
from scrapeq.local.node import LocalNode

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]


def test_the_demo_runs_the_examples_on_worker_pods_that_scale_from_zero(
    kube_node: LocalNode,
) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    for name in ("SCRAPEQ_USE_EXISTING_CLUSTER", "DEMO_PROCESSES", "DEMO_ONCE"):
        environment.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "scrapeq", "demo", "--once", "--timeout", "400"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # The node the session runs is used, not a second one.
    assert f"using the local node that is already running ({kube_node.server})" in output
    assert "helm install scrapeq charts/scrapeq -n scrapeq-demo" in output
    assert "every example ScrapeJob ended as expected." in output
    final_table = output.rsplit("kubectl get scrapejobs", 1)[1]
    assert re.search(r"demo-product\s+Succeeded\s+1/1\s+0", final_table), final_table
    assert re.search(r"demo-phones\s+Succeeded\s+4/4\s+0", final_table), final_table
    assert re.search(r"demo-broken\s+Failed\s+1/1\s+1", final_table), final_table
    assert re.search(r"demo-crawl\s+Succeeded\s+5/5\s+0", final_table), final_table
    # Worker pods of the Deployment, shown as the autoscaler brings them up from zero.
    assert "(no worker pods)" in output
    assert re.search(r"scrapeq-worker-default-\w+-\w+\s+(Pending|Running)", output), output[-4000:]
    product = PRODUCTS[1]
    assert f'{{"name": "{product.name}", "price": "{product.price}"}}' in output
    # The worker and operator pods wrote demo-product's screenshot and demo-phones' output to
    # the S3 server the demo runs on the node's pod network; its files stay after the demo.
    assert re.search(r"S3: \d+ objects in bucket scrapeq-demo at http://10\.244\.0\.1:", output)
    bucket = ROOT / ".scrapeq" / "demo-s3" / "root" / "scrapeq-demo"
    keys = [path.relative_to(bucket).as_posix() for path in bucket.rglob("*") if path.is_file()]
    assert [key for key in keys if key.endswith("/screenshot.png")], keys
    assert [key for key in keys if "/demo-phones/" in key and key.endswith(".jsonl")], keys
    assert [key for key in keys if "/demo-phones/" in key and key.endswith("manifest.json")], keys
    assert result.stdout.rstrip().endswith("stopped.")
    namespaces = subprocess.run(
        ["kubectl", f"--kubeconfig={kube_node.kubeconfig}", "get", "namespace", "scrapeq-demo"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert namespaces.returncode != 0, "the demo left its namespace behind"
