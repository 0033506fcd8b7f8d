"""`scrapeq operator`: run the ScrapeJob operator (kopf, standalone, one replica).

At start it brings the queue schema up to date (`scrapeq_queue.migrate`, which serialises on a
PostgreSQL advisory lock, so several starting operators or a concurrent `scrapeq migrate` are
safe). With --no-migrate it instead refuses to start, exit code 2, when the schema is behind.
A database that does not answer yet is waited for (--database-wait-seconds), then exit code 3.
A background loop (status sync, retention, autoscaler) that dies stops it with exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

from scrapeq_queue import (
    DatabaseUnavailable,
    QueueError,
    current_schema_connection,
    migrate,
    reconnect_delay,
)

from scrapeq_operator.errors import ConfigurationError, SchemaNotCurrentError
from scrapeq_operator.settings import OperatorSettings

logger = logging.getLogger(__name__)

EXIT_BACKGROUND_TASK_DIED = 1
EXIT_CONFIGURATION = 2
EXIT_DATABASE = 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `scrapeq operator` to the scrapeq command."""
    parser = subparsers.add_parser(
        "operator",
        help="run the ScrapeJob operator",
        description=(
            "Run the scrapeq operator: ScrapeJobs become queue rows, their status follows the "
            "rows, worker Deployments follow the backlog. Every flag defaults to an environment "
            "variable (SCRAPEQ_OPERATOR_<NAME>; DATABASE_URL for the database)."
        ),
    )
    OperatorSettings.add_arguments(parser)
    parser.add_argument("--verbose", action="store_true", help="log every handler step")
    parser.set_defaults(handler=run_operator)


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """Flags on top of the environment (a --database-url flag satisfies the need for one)."""
    return OperatorSettings.read(args)


def prepare_database(settings: OperatorSettings) -> list[str]:
    """Migrate (or check) the queue schema; return the migrations applied now.

    Raises SchemaNotCurrentError when migrations are off and the schema is behind, and
    DatabaseUnavailable when PostgreSQL cannot be reached.
    """
    if settings.migrate:
        return migrate(settings.database_url)

    async def check() -> None:
        async with current_schema_connection(
            settings.database_url,
            application_name="scrapeq-operator",
            prepared_statements=not settings.database_pooled,
        ):
            pass

    try:
        asyncio.run(check())
    except QueueError as error:
        if isinstance(error, DatabaseUnavailable):
            raise
        raise SchemaNotCurrentError(
            f"{error} (the operator was started with --no-migrate)"
        ) from error
    return []


def prepare_database_when_up(settings: OperatorSettings) -> list[str]:
    """`prepare_database`, retried while PostgreSQL does not answer, for at most
    settings.database_wait_seconds; the last DatabaseUnavailable is raised after that."""
    deadline = time.monotonic() + settings.database_wait_seconds
    failures = 0
    while True:
        try:
            return prepare_database(settings)
        except DatabaseUnavailable as error:
            failures += 1
            delay = reconnect_delay(failures)
            if time.monotonic() + delay > deadline:
                raise
            if failures == 1:
                logger.warning(
                    "waiting up to %d s for the database: %s",
                    settings.database_wait_seconds,
                    error,
                )
            time.sleep(delay)


def run_operator(args: argparse.Namespace) -> int:
    """Prepare the database, then run kopf until SIGTERM/SIGINT; return the exit code."""
    try:
        settings = settings_from_args(args)
    except ConfigurationError as error:
        print(f"scrapeq operator: {error}", file=sys.stderr)
        return EXIT_CONFIGURATION
    try:
        applied = prepare_database_when_up(settings)
    except SchemaNotCurrentError as error:
        print(f"scrapeq operator: refusing to start: {error}", file=sys.stderr)
        return EXIT_CONFIGURATION
    except DatabaseUnavailable as error:
        print(f"scrapeq operator: cannot start: {error}", file=sys.stderr)
        return EXIT_DATABASE

    # Imported here: importing registers the handlers with kopf, which only this command wants.
    import kopf

    from scrapeq_operator import handlers, metrics, retry_requests, schedules
    from scrapeq_operator.runtime import FatalTasks

    kopf.configure(verbose=bool(args.verbose))
    if applied:
        logger.info("applied queue migrations: %s", ", ".join(applied))
    metrics.serve_metrics(settings.listen_host, settings.metrics_port)
    liveness = (
        f"http://{settings.listen_host}:{settings.liveness_port}/healthz"
        if settings.liveness_port
        else None
    )
    # kopf stops gracefully on SIGTERM (its own handler); a dead background task sends one.
    fatal = FatalTasks(stop=lambda: signal.raise_signal(signal.SIGTERM))
    kopf.run(
        standalone=True,
        clusterwide=settings.clusterwide,
        namespaces=settings.namespaces,
        liveness_endpoint=liveness,
        memo=kopf.Memo(settings=settings, fatal=fatal),
    )
    del handlers, retry_requests, schedules
    if fatal.died:
        print(
            f"scrapeq operator: stopped: background task {', '.join(fatal.died)} died "
            "(the log above has its error)",
            file=sys.stderr,
        )
        return EXIT_BACKGROUND_TASK_DIED
    return 0
