"""The README's "Quick start on a real cluster", run as written on the real node, up to
`kubectl get scrapejobs` showing the example Succeeded and its results exported with only
Kubernetes access.

Two things differ from a real cluster, and only those: the example's URLs point at a test site
on the node's pod network instead of shop.example.com (nothing outside this machine is
reached), and `helm install` gets `workers.allowNetworks` for that network, because the
workers' SSRF guard refuses private addresses by default. Runs before the session's release is
installed (see conftest.py): the quick start installs the CRD with its own release.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from scrapeq.local.node import POD_NETWORK, LocalNode
from scrapeq.local.release import SitePage, pod_network_site
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
EXAMPLE = "examples/scrapejob-multi-url-extract.yaml"


def quick_start_commands() -> list[str]:
    section = README.read_text().split("## Quick start on a real cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's quick start has no sh block"
    commands = []
    for line in block.group(1).splitlines():
        command = line.split("  #", 1)[0].strip()
        if command:
            commands.append(command)
    return commands


def shop_page(path: str) -> SitePage:
    number = path.rsplit("/", 1)[-1]
    return SitePage(
        body=f"""<html><body><div class="product"><h1>Laptop {number}</h1>
        <span class="price">{number}99.00</span><img class="product-photo" src="/img/{number}.png">
        <span class="tag">new</span><span class="tag">laptop</span></div></body></html>"""
    )


def test_the_readme_quick_start_runs_as_written_on_a_real_node(
    kube_node: LocalNode, helm_binary: Path, tmp_path: Path
) -> None:
    commands = quick_start_commands()
    assert commands[0].startswith("helm install scrapeq charts/scrapeq -n scrapeq-system")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").symlink_to(helm_binary)
    environment = {
        **os.environ,
        "KUBECONFIG": str(kube_node.kubeconfig),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }

    def shell(command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["bash", "-c", f"cd {ROOT} && {command}"],
            input=stdin, env=environment, capture_output=True, text=True, timeout=400,
            check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
        return result

    exported = tmp_path / "laptops.jsonl"
    try:
        with pod_network_site(shop_page) as (site, requested):
            for command in commands:
                if command.startswith("helm install"):
                    shell(f"{command} --set 'workers.allowNetworks={{{POD_NETWORK}}}'")
                elif command == f"kubectl apply -f {EXAMPLE}":
                    manifest = (ROOT / EXAMPLE).read_text()
                    manifest = manifest.replace("https://shop.example.com", site)
                    shell("kubectl apply -f -", stdin=manifest)
                elif command == "kubectl get scrapejobs -w":
                    table = eventually_blocking(
                        lambda: (
                            (out := shell("kubectl get scrapejobs").stdout)
                            and re.search(r"laptops\s+Succeeded\s+3/3\s+0", out)
                            and out
                        ),
                        within=300,
                        what="kubectl get scrapejobs to show laptops Succeeded 3/3",
                        every=0.5,
                    )
                    assert table.split()[:7] == [
                        "NAME", "PHASE", "DONE", "FAILED", "REASON", "AGE", "MESSAGE"
                    ]  # fmt: skip
                elif command.endswith("> laptops.jsonl"):
                    shell(command.replace("> laptops.jsonl", f"> {exported}"))
                else:
                    shell(command)
            pages = {path for path in requested if path.startswith("/item/")}
            assert pages == {"/item/1", "/item/2", "/item/3"}
        lines = [json.loads(line) for line in exported.read_text().splitlines()]
        titles = sorted(line["fields"]["title"] for line in lines)
        assert titles == ["Laptop 1", "Laptop 2", "Laptop 3"], lines
    finally:
        subprocess.run(
            ["bash", "-c", "kubectl delete scrapejob laptops --timeout=60s; "
             "helm uninstall scrapeq -n scrapeq-system --wait --timeout 120s; "
             "kubectl delete namespace scrapeq-system --timeout=120s"],
            env=environment, capture_output=True, text=True, timeout=400, check=False,
        )  # fmt: skip
        kube_node.recycle_volumes()
