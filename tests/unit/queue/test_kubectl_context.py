"""A ScrapeJob named without a namespace is looked up where kubectl would look."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scrapeq_queue.kubectl_context import current_namespace


def kubeconfig(path: Path, current: str | None, contexts: dict[str, str | None]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "contexts": [
            {"name": name, "context": {"cluster": "c", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts.items()
        ],
    }
    if current is not None:
        config["current-context"] = current
    path.write_text(json.dumps(config))
    return path


def test_the_current_context_s_namespace_is_the_current_namespace(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "work", {"work": "shop", "other": "news"})
    assert current_namespace({"KUBECONFIG": str(config)}, tmp_path / "no-pod") == "shop"


def test_a_context_without_a_namespace_means_default_even_inside_a_pod(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "work", {"work": None})
    pod = tmp_path / "namespace"
    pod.write_text("scrapeq-system")
    assert current_namespace({"KUBECONFIG": str(config)}, pod) == "default"


def test_several_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "first", None, {"work": "shop"})
    second = kubeconfig(tmp_path / "second", "work", {"work": "news"})
    listed = os.pathsep.join([str(tmp_path / "missing"), str(first), str(second)])
    # current-context from the only file that sets it; the context from the first definition.
    assert current_namespace({"KUBECONFIG": listed}, tmp_path / "no-pod") == "shop"


def test_home_s_kubeconfig_is_read_when_kubeconfig_is_not_set(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    kubeconfig(tmp_path / ".kube" / "config", "work", {"work": "shop"})
    assert current_namespace({"HOME": str(tmp_path)}, tmp_path / "no-pod") == "shop"


def test_without_a_kubeconfig_a_pod_uses_its_own_namespace(tmp_path: Path) -> None:
    pod = tmp_path / "namespace"
    pod.write_text("scrapeq-system\n")
    assert current_namespace({"HOME": str(tmp_path)}, pod) == "scrapeq-system"


def test_without_a_kubeconfig_or_a_pod_the_namespace_is_default(tmp_path: Path) -> None:
    assert current_namespace({}, tmp_path / "no-pod") == "default"


def test_an_unreadable_kubeconfig_names_no_namespace(tmp_path: Path) -> None:
    broken = tmp_path / "config"
    broken.write_text("contexts: [unclosed")
    assert current_namespace({"KUBECONFIG": str(broken)}, tmp_path / "no-pod") == "default"
