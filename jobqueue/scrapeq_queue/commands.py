"""`scrapeq migrate`, `enqueue`, `jobs`, `retry`, `export` and `prune`: the queue for the people
running it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO, TypeVar

from scrapeq_queue.connections import Connection, current_schema_connection, describe_conninfo
from scrapeq_queue.dead_jobs import failed_jobs, retry_failed
from scrapeq_queue.errors import DatabaseUnavailable, QueueError, SchemaOutOfDate
from scrapeq_queue.exports import (
    EXPORT_FORMATS,
    export_results,
    owner_namespaces_named,
    owners_named,
    write_csv,
    write_jsonl,
)
from scrapeq_queue.inspection import database_now, latest_failures, queue_stats
from scrapeq_queue.kubectl_context import current_namespace
from scrapeq_queue.maintenance import prune_finished, prune_idle_sites
from scrapeq_queue.migrations import SCHEMA_VERSION, migrate
from scrapeq_queue.output_files import AtomicFile
from scrapeq_queue.payload import validate_payload
from scrapeq_queue.producers import enqueue_many
from scrapeq_queue.rows import FailedJob

_T = TypeVar("_T")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the queue's subcommands to the `scrapeq` command."""
    migrate_parser = subparsers.add_parser(
        "migrate",
        help="create or upgrade the queue schema (idempotent, safe to run concurrently)",
    )
    _add_database_url(migrate_parser)
    migrate_parser.set_defaults(handler=_run_migrate)

    enqueue_parser = subparsers.add_parser("enqueue", help="add URLs to a queue")
    _add_database_url(enqueue_parser)
    enqueue_parser.add_argument("urls", nargs="+", metavar="URL", help="URLs to scrape")
    enqueue_parser.add_argument("--queue", default="default", help="queue name (default: default)")
    enqueue_parser.add_argument("--priority", type=int, default=0, help="higher runs first")
    enqueue_parser.add_argument(
        "--payload",
        default="{}",
        help="per-job options as a JSON object, e.g. '{\"render\": false}'",
    )
    enqueue_parser.add_argument(
        "--parser",
        default="default",
        help="parser_type of the rows: a parser registered in the workers' image parses them "
        "(docs/parsers.md); default: the payload's declarative extraction",
    )
    enqueue_parser.add_argument("--max-retries", type=int, default=3, help="retries before failing")
    enqueue_parser.add_argument(
        "--delay", type=float, default=0.0, metavar="SECONDS", help="run no earlier than this"
    )
    enqueue_parser.add_argument(
        "--retain-days",
        type=_count_days,
        default=None,
        metavar="DAYS",
        help="delete the rows this long after they finished (default: scrapeq never deletes "
        "them; docs/queue.md, Retention)",
    )
    enqueue_parser.add_argument(
        "--notify-finished",
        action="store_true",
        help="NOTIFY scrapeq_finished when each row finishes (docs/queue.md, Signals for SQL "
        "producers)",
    )
    enqueue_parser.set_defaults(handler=_run_enqueue)

    jobs_parser = subparsers.add_parser(
        "jobs", help="counts per queue and status, and the latest failures"
    )
    _add_database_url(jobs_parser)
    jobs_parser.add_argument(
        "--failures", type=int, default=10, metavar="N", help="show the N latest failures"
    )
    jobs_parser.set_defaults(handler=_run_jobs)
    jobs_views = jobs_parser.add_subparsers(dest="jobs_view", metavar="{failed}")
    failed_parser = jobs_views.add_parser(
        "failed", help="list failed jobs with their reason, last error and retries"
    )
    # SUPPRESS: `scrapeq jobs --database-url X failed` keeps X instead of the sub-default.
    failed_parser.add_argument(
        "--database-url",
        default=argparse.SUPPRESS,
        help="PostgreSQL connection string (default: $DATABASE_URL)",
    )
    failed_parser.add_argument("--queue", default=None, help="only this queue")
    _add_owner(failed_parser, required=False)
    failed_parser.add_argument(
        "--limit", type=int, default=50, metavar="N", help="show at most N (default: 50)"
    )
    failed_parser.set_defaults(handler=_run_jobs_failed)

    retry_parser = subparsers.add_parser(
        "retry",
        help="re-queue failed jobs (at least one filter; filters combine with AND)",
    )
    _add_database_url(retry_parser)
    retry_parser.add_argument(
        "--id", dest="ids", type=int, nargs="+", default=None, metavar="ID", help="job ids"
    )
    retry_parser.add_argument("--queue", default=None, help="failed jobs of this queue")
    _add_owner(retry_parser, required=False)
    retry_parser.add_argument(
        "--error-pattern",
        default=None,
        metavar="TEXT",
        help="failed jobs whose last error contains TEXT (case-insensitive)",
    )
    retry_parser.set_defaults(handler=_run_retry)

    export_parser = subparsers.add_parser(
        "export",
        help="stream the results of a ScrapeJob's completed pages as JSON Lines or CSV",
        description=(
            "Export the completed pages of a ScrapeJob, found by its rows' owner (no Kubernetes "
            "access needed). SCRAPEJOB (NAME or NAMESPACE/NAME) means the most recently "
            "created ScrapeJob of that name; NAME alone is looked up in the current namespace, "
            "as kubectl does (the kubeconfig's context, else the pod's own namespace, else "
            "default), or with --all-namespaces in the one namespace that has it. --owner "
            "NAMESPACE/NAME exports the rows of every ScrapeJob that ever had that name."
        ),
    )
    _add_database_url(export_parser)
    export_parser.add_argument(
        "scrapejob",
        nargs="?",
        default=None,
        metavar="SCRAPEJOB",
        help="the ScrapeJob: NAME (in --namespace) or NAMESPACE/NAME",
    )
    export_parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace of SCRAPEJOB (default: the current namespace, as with kubectl)",
    )
    export_parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="look for SCRAPEJOB (a NAME) in every namespace; it must have rows in only one",
    )
    _add_owner(export_parser, required=False)
    export_parser.add_argument("--queue", default=None, help="only rows of this queue")
    export_parser.add_argument(
        "--format", choices=EXPORT_FORMATS, default="jsonl", help="default: jsonl (JSON Lines)"
    )
    export_parser.add_argument(
        "--output",
        default=None,
        metavar="FILE",
        help="write FILE instead of stdout (atomically: complete or not at all); - is stdout",
    )
    export_parser.set_defaults(handler=_run_export)

    prune_parser = subparsers.add_parser(
        "prune", help="delete finished jobs (and their attempts) past their retention"
    )
    _add_database_url(prune_parser)
    prune_parser.add_argument(
        "--completed-older-than-days",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="delete completed and cancelled jobs of ScrapeJobs without a retention of their own "
        "finished longer ago (default: 7; docs/queue.md, Retention)",
    )
    prune_parser.add_argument(
        "--failed-older-than-days",
        type=float,
        default=None,
        metavar="DAYS",
        help="also delete failed jobs finished longer ago (default: keep failures)",
    )
    prune_parser.add_argument(
        "--keep-failed-last",
        type=_count,
        default=None,
        metavar="N",
        help="keep only the newest N failed jobs per queue, like a dead-letter queue "
        "(default: no limit; combines with --failed-older-than-days)",
    )
    prune_parser.add_argument(
        "--idle-sites-older-than-days",
        type=_positive_days,
        default=None,
        metavar="DAYS",
        help="also delete the politeness state of sites with nothing pending or in flight and "
        "no claim for longer (more than 1: robots.txt is kept a day; default: keep every site's)",
    )
    # The flag's name before 0.1.0, refused with its name now.
    prune_parser.add_argument(
        "--idle-hosts-older-than-days",
        type=_renamed_to("--idle-sites-older-than-days"),
        help=argparse.SUPPRESS,
    )
    prune_parser.set_defaults(handler=_run_prune)


def _add_database_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="PostgreSQL connection string (default: $DATABASE_URL)",
    )


def _add_owner(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--owner",
        type=_owner,
        required=required,
        default=None,
        metavar="NAMESPACE/NAME",
        help="the ScrapeJob the rows belong to",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _count_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected 0 or more days, got {text!r}")
    return value


def _positive_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of days, got {text!r}")
    return value


def _renamed_to(flag: str) -> Callable[[str], float]:
    """The type of a flag that was renamed `flag`: refuses every value, naming `flag`."""

    def refuse(text: str) -> float:
        raise argparse.ArgumentTypeError(f"is now {flag}")

    return refuse


def _owner(text: str) -> tuple[str, str]:
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _database_url(args: argparse.Namespace) -> str:
    url: str | None = args.database_url
    if not url:
        raise QueueError("no database given: pass --database-url or set DATABASE_URL")
    return url


def _report_errors(action: Callable[[], _T]) -> _T | int:
    try:
        return action()
    except SchemaOutOfDate as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    except DatabaseUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except QueueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _with_database(
    args: argparse.Namespace, application_name: str, work: Callable[[Connection], Awaitable[int]]
) -> int:
    """Run `work` on a connection to --database-url whose schema is current; return its exit
    code, or the code of the queue error it met (printed)."""

    async def run() -> int:
        async with current_schema_connection(
            _database_url(args), application_name=application_name
        ) as connection:
            return await work(connection)

    return int(_report_errors(lambda: asyncio.run(run())))


def _run_migrate(args: argparse.Namespace) -> int:
    def action() -> int:
        url = _database_url(args)
        applied = migrate(url)
        where = describe_conninfo(url)
        if applied:
            print(f"applied {', '.join(applied)} to {where}; schema at {SCHEMA_VERSION}")
        else:
            print(f"{where} is already at {SCHEMA_VERSION}; nothing to do")
        return 0

    return int(_report_errors(action))


def _run_enqueue(args: argparse.Namespace) -> int:
    try:
        payload: Any = json.loads(args.payload)
    except json.JSONDecodeError as error:
        print(f"error: --payload is not valid JSON: {error}", file=sys.stderr)
        return 1
    problems = validate_payload(payload)
    if problems:
        print("error: invalid --payload: " + "; ".join(problems), file=sys.stderr)
        return 1

    async def action(connection: Connection) -> int:
        run_at = None
        if args.delay > 0:
            run_at = await database_now(connection) + timedelta(seconds=args.delay)
        ids = await enqueue_many(
            connection,
            args.urls,
            parser_type=args.parser,
            payload=payload,
            queue=args.queue,
            priority=args.priority,
            max_retries=args.max_retries,
            run_at=run_at,
            retain_for=None if args.retain_days is None else timedelta(days=args.retain_days),
            notify_finished=args.notify_finished,
        )
        for job_id in ids:
            print(job_id)
        print(f"enqueued {len(ids)} job(s) on queue {args.queue!r}", file=sys.stderr)
        return 0

    return _with_database(args, "scrapeq-enqueue", action)


def _run_jobs(args: argparse.Namespace) -> int:
    async def action(connection: Connection) -> int:
        stats = await queue_stats(connection)
        failures = await latest_failures(connection, limit=args.failures)
        header = (
            "QUEUE",
            "DUE",
            "DELAYED",
            "PROCESSING",
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "OLDEST DUE",
        )
        rows = [
            (
                stat.queue,
                str(stat.due_pending),
                str(stat.delayed_pending),
                str(stat.processing),
                str(stat.completed_total),
                str(stat.failed_total),
                str(stat.cancelled_total),
                "-"
                if stat.oldest_due_age_seconds is None
                else f"{stat.oldest_due_age_seconds:.0f}s",
            )
            for stat in stats
        ]
        _print_table(header, rows)
        if not stats:
            print("(no jobs yet)")
        if failures:
            print("\nLATEST FAILURES")
            _print_failures(failures)
        return 0

    return _with_database(args, "scrapeq-jobs", action)


def _print_failures(failures: Sequence[FailedJob]) -> None:
    """One line per failed row: what `scrapeq jobs` and `scrapeq jobs failed` show."""
    _print_table(
        ("ID", "QUEUE", "FINISHED", "RETRIES", "REASON", "URL", "ERROR"),
        [
            (
                str(failure.id),
                failure.queue,
                failure.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
                str(failure.retry_count),
                failure.reason or "-",
                _shorten(failure.url, 60),
                _shorten((failure.error or "-").replace("\n", " "), 80),
            )
            for failure in failures
        ],
    )


def _run_jobs_failed(args: argparse.Namespace) -> int:
    namespace, name = args.owner or (None, None)

    async def action(connection: Connection) -> int:
        failures = await failed_jobs(
            connection,
            queue=args.queue,
            owner_namespace=namespace,
            owner_name=name,
            limit=args.limit,
        )
        if not failures:
            print("(no failed jobs)")
            return 0
        _print_failures(failures)
        return 0

    return _with_database(args, "scrapeq-jobs", action)


def _run_retry(args: argparse.Namespace) -> int:
    namespace, name = args.owner or (None, None)

    async def action(connection: Connection) -> int:
        retried = await retry_failed(
            connection,
            ids=args.ids,
            queue=args.queue,
            owner_namespace=namespace,
            owner_name=name,
            error_pattern=args.error_pattern,
        )
        print(f"re-queued {retried} failed job(s)")
        return 0

    return _with_database(args, "scrapeq-retry", action)


def _export_target(args: argparse.Namespace) -> tuple[str | None, str, bool] | str:
    """(namespace, name, resolve to the latest uid) from the arguments, or an error message.
    The namespace is None with --all-namespaces: the rows decide (see _namespace_of)."""
    if args.scrapejob is not None and args.owner is not None:
        return "give either SCRAPEJOB or --owner, not both"
    if args.owner is not None:
        if args.namespace is not None or args.all_namespaces:
            return "--owner already names the namespace (no -n or --all-namespaces with it)"
        namespace, name = args.owner
        return namespace, name, False
    if args.scrapejob is None:
        return "name the ScrapeJob to export: SCRAPEJOB (NAME or NAMESPACE/NAME) or --owner"
    given_namespace, slash, name = str(args.scrapejob).rpartition("/")
    if slash and (not given_namespace or "/" in given_namespace):
        return f"expected NAME or NAMESPACE/NAME, got {args.scrapejob!r}"
    if not name:
        return f"expected NAME or NAMESPACE/NAME, got {args.scrapejob!r}"
    if slash and args.namespace is not None and args.namespace != given_namespace:
        return f"{args.scrapejob!r} is in namespace {given_namespace}, not {args.namespace}"
    if args.all_namespaces and (slash or args.namespace is not None):
        return "--all-namespaces goes with NAME alone, not with a namespace"
    if args.all_namespaces:
        return None, name, True
    namespace = given_namespace if slash else args.namespace or current_namespace()
    return namespace, name, True


async def _namespace_of(connection: Any, name: str) -> str:
    """The one namespace where a ScrapeJob named `name` has rows (--all-namespaces); QueueError
    when none or several do."""
    namespaces = await owner_namespaces_named(connection, name=name)
    if not namespaces:
        raise QueueError(f"no rows of a ScrapeJob named {name} in any namespace of this database")
    if len(namespaces) > 1:
        raise QueueError(
            f"ScrapeJobs named {name} have rows in namespaces {', '.join(namespaces)}: "
            f"name one with NAMESPACE/{name} or -n NAMESPACE"
        )
    return namespaces[0]


async def _elsewhere(connection: Any, name: str, namespace: str) -> str:
    """A hint for a ScrapeJob not found in `namespace`: where that name has rows instead."""
    named = await owner_namespaces_named(connection, name=name)
    others = [other for other in named if other != namespace]
    if not others:
        return "check the name and namespace: -n NAMESPACE or NAMESPACE/NAME"
    return (
        f"ScrapeJobs named {name} have rows in namespaces {', '.join(others)}: "
        "-n NAMESPACE, NAMESPACE/NAME or --all-namespaces"
    )


def _run_export(args: argparse.Namespace) -> int:
    target = _export_target(args)
    if isinstance(target, str):
        print(f"error: {target}", file=sys.stderr)
        return 1
    if args.output is None or args.output == "-":
        return _export(args, target, sys.stdout)
    try:
        atomic = AtomicFile(Path(args.output))
        with atomic as output:
            code = _export(args, target, output)
            if code != 0:
                atomic.abandon()
            return code
    except OSError as error:
        print(f"error: cannot write {args.output}: {error}", file=sys.stderr)
        return 1


def _export(args: argparse.Namespace, target: tuple[str | None, str, bool], output: TextIO) -> int:
    given_namespace, name, resolve = target

    async def action(connection: Connection) -> int:
        namespace = given_namespace or await _namespace_of(connection, name)
        owner_uid = None
        if resolve:
            owners = await owners_named(connection, namespace=namespace, name=name)
            if not owners:
                hint = await _elsewhere(connection, name, namespace)
                print(
                    f"error: no rows of a ScrapeJob {namespace}/{name} in this database ({hint})",
                    file=sys.stderr,
                )
                return 1
            owner_uid = owners[0].uid
            if len(owners) > 1:
                older = ", ".join(owner.uid for owner in owners[1:])
                print(
                    f"{namespace}/{name} names {len(owners)} ScrapeJobs (re-created after "
                    f"a delete); exporting the most recent one, uid {owner_uid} (first row "
                    f"{owners[0].first_row_at:%Y-%m-%d %H:%M:%S}); older uids: {older} "
                    f"(--owner {namespace}/{name} exports all of them)",
                    file=sys.stderr,
                )
        rows = export_results(
            connection,
            owner_namespace=namespace,
            owner_name=name,
            owner_uid=owner_uid,
            queue=args.queue,
        )
        if args.format == "csv":
            count = await write_csv(rows, output)
        else:
            count = await write_jsonl(rows, output)
        output.flush()
        print(f"exported {count} result(s) of {namespace}/{name}", file=sys.stderr)
        return 0

    return _with_database(args, "scrapeq-export", action)


def _run_prune(args: argparse.Namespace) -> int:
    async def action(connection: Connection) -> int:
        deleted = await prune_finished(
            connection,
            completed_older_than=timedelta(days=args.completed_older_than_days),
            keep_failed=(
                None
                if args.failed_older_than_days is None
                else timedelta(days=args.failed_older_than_days)
            ),
            keep_failed_last=args.keep_failed_last,
        )
        print(f"deleted {deleted} finished job(s)")
        if args.idle_sites_older_than_days is not None:
            hosts = await prune_idle_sites(
                connection, idle_longer_than=timedelta(days=args.idle_sites_older_than_days)
            )
            print(f"deleted the state of {hosts} idle site(s)")
        return 0

    return _with_database(args, "scrapeq-prune", action)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
