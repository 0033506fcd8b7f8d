"""The `scrapeq` command: one entry point whose subcommands belong to the components.

Each component owns its subcommands in a `commands` module with a `register(subparsers)`
function; this module only assembles them, so the worker never imports the operator and the
operator never imports the worker.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, cast

# Modules that contribute subcommands, in the order `scrapeq --help` lists them.
COMMAND_MODULES = (
    "scrapeq_queue.commands",
    "scrapeq_worker.commands",
    "scrapeq_operator.commands",
    "scrapeq.local.commands",
    "scrapeq.demo.commands",
)


class _CommandModule(Protocol):
    def register(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scrapeq",
        description="Browser scraping as queued batch work on Kubernetes and PostgreSQL.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        module = cast(_CommandModule, importlib.import_module(module_name))
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = cast(Callable[[argparse.Namespace], int], args.handler)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
