"""`scrapeq demo`: run the whole system end to end on loopback (what `make demo` runs)."""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run scrapeq end to end on local defaults (what `make demo` runs)",
        description=(
            "Starts PostgreSQL, kube-apiserver + etcd, Prometheus, a demo shop, the operator "
            "and workers on 127.0.0.1, applies examples/demo with kubectl and shows the jobs "
            "finishing. Ctrl-C stops everything it started."
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
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from scrapeq.demo.run import Demo

    return Demo(once=args.once, timeout_seconds=args.timeout).run()
