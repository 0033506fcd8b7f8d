"""`scrapeq demo`: run the whole system end to end on local defaults (what `make demo` runs).

On a machine that can run the local single-node cluster (root, containerd) the operator,
workers and PostgreSQL run as Pods installed by Helm; elsewhere the demo says why in one line
and runs them as local processes, with the demo standing in for the kubelet.
"""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run scrapeq end to end on local defaults (what `make demo` runs)",
        description=(
            "Starts the local single-node cluster, installs scrapeq with Helm (operator, "
            "workers and PostgreSQL as Pods), a demo shop and Prometheus, applies examples/demo "
            "with kubectl and shows the jobs finishing and the worker pods scaling. Where the "
            "node cannot run it uses local processes instead. Ctrl-C, SIGTERM or a closed "
            "terminal (SIGHUP) stops everything it started."
        ),
    )
    parser.add_argument(
        "--once",
        action="store_true",
        default=os.environ.get("DEMO_ONCE") == "1",
        help="exit when the example jobs are done (default: keep running; DEMO_ONCE=1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds the example jobs may take before the demo gives up (600)",
    )
    parser.add_argument(
        "--processes",
        action="store_true",
        default=os.environ.get("DEMO_PROCESSES") == "1",
        help="run the operator and workers as local processes, not Pods (DEMO_PROCESSES=1)",
    )
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from scrapeq.demo.pods import pod_demo_or_reason
    from scrapeq.demo.run import Demo, say

    if not args.processes:
        demo, reason = pod_demo_or_reason(args.once, args.timeout)
        if demo is not None:
            return demo.run()
        say(f"the local node cannot run here ({reason}); running workers as local processes")
    return Demo(once=args.once, timeout_seconds=args.timeout).run()
