"""`scrapeq worker`: the command each worker pod runs (see docs/worker.md for every option)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .settings import SettingsError, WorkerSettings, add_arguments, describe, settings_from
from .structured_logs import configure_logging

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `worker` subcommand."""
    parser = subparsers.add_parser(
        "worker",
        help="claim jobs from the queue and scrape them with headless Chromium",
        description=(
            "Claim jobs from the scrapeq queue, render them in a pooled headless Chromium "
            "(or fetch them over plain HTTP with render: false) and record the results. "
            "Every flag has an environment variable; flags win."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(handler=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    """Entry point of `scrapeq worker`; returns the process exit status."""
    try:
        settings = settings_from(args)
    except SettingsError as error:
        print(f"scrapeq worker: {error}", file=sys.stderr)
        return 2
    if not settings.database_url:
        print(
            "scrapeq worker: a database is required (--database-url or DATABASE_URL)",
            file=sys.stderr,
        )
        return 2
    configure_logging(json_lines=settings.json_logs, level=settings.log_level)
    return asyncio.run(_main(settings))


async def _main(settings: WorkerSettings) -> int:
    from .worker import Worker

    logger.info("starting worker", extra={"settings": describe(settings)})
    return await Worker(settings).run()
