"""`scrapeq dev …`: start and stop the local real parts from a shell (`make cluster-up`).

`cluster-up` starts the single-node cluster that runs real Pods (scrapeq.local.node); with
`--api-only` (or where the node cannot run: not root, packages missing) it starts only
etcd + kube-apiserver on loopback, as the API-only tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from scrapeq.local.controlplane import REPOSITORY_ROOT, LocalControlPlane
from scrapeq.local.images import DEFAULT_REGISTRY, build_images, load_images
from scrapeq.local.node import POD_NETWORK, SERVICE_NETWORK, LocalNode, clean_leftovers
from scrapeq.local.processes import LocalPartError, pid_alive, terminate_pid

# Where `make cluster-up` keeps the control plane's state, kubeconfig and process ids.
# Inside the checkout (ignored by git), so several checkouts never share a cluster.
DEFAULT_STATE_DIR = REPOSITORY_ROOT / ".scrapeq" / "cluster"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subparsers.add_parser("dev", help="start and stop local real parts for development")
    dev_commands = dev.add_subparsers(dest="dev_command", metavar="DEV_COMMAND", required=True)
    up = dev_commands.add_parser(
        "cluster-up",
        help="start the local single-node cluster (Pods run); print the KUBECONFIG export",
    )
    up.add_argument("--state-dir", type=Path, default=_state_dir())
    up.add_argument(
        "--api-only",
        action="store_true",
        help="only etcd + kube-apiserver on loopback (no kubelet: Deployments get no Pods)",
    )
    up.set_defaults(handler=cluster_up)
    down = dev_commands.add_parser("cluster-down", help="stop the cluster started by cluster-up")
    down.add_argument("--state-dir", type=Path, default=_state_dir())
    down.add_argument(
        "--api-only",
        action="store_true",
        help="stop only the API-only cluster of `cluster-up --api-only`; leave a node running",
    )
    down.set_defaults(handler=cluster_down)
    images = dev_commands.add_parser(
        "images",
        help="build the worker and operator images (and a node's postgres and pause images) "
        "with podman; print one reference per line",
    )
    images.add_argument(
        "--registry",
        help="registry prefix of the project's images, e.g. registry.example.com/scrapeq "
        f"(default {DEFAULT_REGISTRY}); alone, builds only the images a user pushes",
    )
    images.add_argument(
        "--load",
        metavar="CONTAINERD_SOCKET",
        type=Path,
        help="import the images into the containerd at this socket (namespace k8s.io)",
    )
    images.add_argument(
        "--pull-bases",
        action="store_true",
        help="pull the official base images (python, debian) instead of making local stand-ins "
        "from Debian packages; needs access to their registry",
    )
    images.set_defaults(handler=images_command)


def _state_dir() -> Path:
    return Path(os.environ.get("SCRAPEQ_CLUSTER_DIR", str(DEFAULT_STATE_DIR)))


def cluster_up(args: argparse.Namespace) -> int:
    if not args.api_only:
        return node_up(args.state_dir.parent / "node")
    return api_only_up(args)


def node_up(state_dir: Path) -> int:
    """Start the single-node cluster with every image it needs loaded; print the export."""
    running = LocalNode.attach()
    if running is not None and running.state_dir == state_dir:
        print(f"# the local node is already running (state in {state_dir})", file=sys.stderr)
        print(f"export KUBECONFIG={running.kubeconfig}")
        return 0
    node = LocalNode(state_dir=state_dir, progress=_say)
    started = time.monotonic()
    try:
        node.start(load_images=load_node_images)
    except LocalPartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(
        f"# node {node.hostname} is Ready at {node.server} after"
        f" {time.monotonic() - started:.0f}s (pods {POD_NETWORK}, services {SERVICE_NETWORK})",
        file=sys.stderr,
    )
    print(f"# logs in {state_dir / 'logs'}; stop it with: make cluster-down", file=sys.stderr)
    print(f"export KUBECONFIG={node.kubeconfig}")
    return 0


def _say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def api_only_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    pid_file = state_dir / "pids.json"
    if pid_file.exists() and all(pid_alive(pid) for pid in json.loads(pid_file.read_text())):
        print(f"# the local cluster is already running (state in {state_dir})", file=sys.stderr)
        print(f"export KUBECONFIG={state_dir / 'kubeconfig'}")
        return 0
    if state_dir.exists():
        # Leftovers of a cluster that is no longer running: start clean.
        cluster_down(args)
    print(">> starting etcd and kube-apiserver on 127.0.0.1 …", file=sys.stderr)
    cluster = LocalControlPlane(state_dir=state_dir)
    try:
        cluster.start()
    except LocalPartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    pid_file.write_text(json.dumps(cluster.pids))
    print(f"# kube-apiserver is ready at {cluster.server}", file=sys.stderr)
    print(f"# stop it with: make cluster-down   (state in {state_dir})", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def cluster_down(args: argparse.Namespace) -> int:
    if not args.api_only:
        stop_node()
    state_dir: Path = args.state_dir
    pid_file = state_dir / "pids.json"
    if pid_file.exists():
        # Stop in reverse start order: kube-apiserver before etcd.
        for pid in reversed(json.loads(pid_file.read_text())):
            terminate_pid(int(pid))
    if state_dir.exists():
        shutil.rmtree(state_dir, ignore_errors=True)
        print(f"# stopped the local cluster and removed {state_dir}", file=sys.stderr)
    else:
        print("# no local cluster was running", file=sys.stderr)
    return 0


def stop_node() -> None:
    """Stop the machine's node, or clean up after one that crashed or was killed (mounts,
    chains and sysctls stay behind when its processes die)."""
    node = LocalNode.attach()
    if node is None:
        clean_leftovers()
        return
    print(f">> stopping the local node (state in {node.state_dir}) …", file=sys.stderr)
    node.stop()
    print("# stopped the local node and undid its changes to the host", file=sys.stderr)


def load_node_images(node: LocalNode) -> None:
    """Build (when their inputs changed) and load every image the node and the chart use."""
    load_images(build_images(), node.containerd_address)


def images_command(args: argparse.Namespace) -> int:
    # Local images go into the running node, if there is one (`make cluster-up`).
    running = LocalNode.attach()
    if args.load is None and args.registry is None and running is not None:
        args.load = running.containerd_address
        print(f"# loading into the running local node ({running.server})", file=sys.stderr)
    # The node's stand-ins (postgres, pause) are built for local use and loading; a build for
    # a registry makes only what a user pushes.
    node_images = args.registry is None or args.load is not None
    try:
        images = build_images(args.registry, node_images=node_images, pull_bases=args.pull_bases)
        if args.load is not None:
            load_images(images, args.load)
    except (ValueError, LocalPartError) as error:
        print(f"error: {error}", file=sys.stderr)
        # 2: bad input (a malformed --registry); 1: a build or load failed.
        return 2 if isinstance(error, ValueError) else 1
    print(f"# {'image':<50} {'id':<19} size", file=sys.stderr)
    for image in images:
        print(f"# {image.reference:<50} {image.id[:19]} {image.size / 1e6:.0f} MB", file=sys.stderr)
    for image in images:
        print(image.reference)
    return 0
