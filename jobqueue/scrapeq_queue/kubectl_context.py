"""The namespace kubectl would use, so that a command naming a ScrapeJob by NAME alone looks where
`kubectl get scrapejob NAME` looks. Read from files only: the commands work without access to
Kubernetes (in the operator's pod, with nothing but DATABASE_URL)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

DEFAULT_NAMESPACE: Final = "default"
# Where Kubernetes mounts a pod's own namespace; kubectl in a pod without a kubeconfig uses it.
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def current_namespace(
    environment: Mapping[str, str] | None = None,
    service_account_namespace: Path | None = None,
) -> str:
    """The namespace of the kubeconfig's current context (the files of KUBECONFIG, else
    ~/.kube/config); without a kubeconfig, the pod's own namespace when running in a pod;
    else `default`. A kubeconfig that cannot be read counts as none."""
    environment = os.environ if environment is None else environment
    files = _kubeconfig_files(environment)
    if files:
        return _context_namespace(files) or DEFAULT_NAMESPACE
    try:
        in_pod = service_account_namespace or SERVICE_ACCOUNT_NAMESPACE
        return in_pod.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def _kubeconfig_files(environment: Mapping[str, str]) -> list[Path]:
    listed = environment.get("KUBECONFIG", "")
    if listed:
        candidates = [Path(name) for name in listed.split(os.pathsep) if name]
    elif environment.get("HOME"):
        candidates = [Path(environment["HOME"]) / ".kube" / "config"]
    else:
        candidates = []
    return [path for path in candidates if path.is_file()]


def _context_namespace(files: list[Path]) -> str | None:
    """As kubectl merges several files: the first current-context set wins, and so does the
    first definition of each context."""
    current: str | None = None
    contexts: dict[str, Any] = {}
    for path in files:
        try:
            config = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(config, dict):
            continue
        current = current or config.get("current-context") or None
        for entry in config.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], entry.get("context") or {})
    context = contexts.get(current or "")
    namespace = context.get("namespace") if isinstance(context, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None
