"""Schema migrations: numbered .sql files applied once each, in order, under an advisory lock.

`schema.sql` next to this module is a snapshot of the schema the migrations produce (generated
by `python -m scrapeq.local.schema_snapshot`); a test proves the two agree. A migration applies
a live definition from `sql/` with a line `\\ir ../sql/NAME.sql` (psql's include, relative to
the migrations folder), so the SQL that runs today is read in one file (docs/queue.md, "Schema
and migrations").

A value whose one source is a Python constant is written `{{NAME}}` in a migration or a file of
`sql/`: the runner replaces it with the constant of PLACEHOLDERS as a SQL literal before it runs
the migration (a name it does not know is an error), so a bound is never written twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from typing import Any, Final

import psycopg

from scrapeq_queue import crawl_memory, payload, politeness, sessions, statements
from scrapeq_queue.errors import DatabaseUnavailable, SchemaOutOfDate, translate_database_errors


@dataclass(frozen=True)
class Migration:
    """One numbered migration file."""

    version: str  # the file name without .sql, e.g. "0001_initial"
    sql: str


# The versions of the development migrations that 0003_politeness replaced before the first
# release. A database that recorded any of them has a schema no migration leads on from.
RETIRED_VERSIONS: Final = frozenset(
    {
        "0003_host_politeness",
        "0004_claim_plan",
        "0005_idle_hosts",
        "0006_shared_robots",
        "0007_heads_follow_earlier_rows",
        "0008_claim_function",
        "0009_shared_turns",
    }
)

# A line of a migration that applies a file of sql/: psql's \ir, whose path is relative to the
# migrations folder, so that `psql -f` runs a migration as it is.
_INCLUDE_LINE: Final = re.compile(r"^\\ir \.\./sql/([A-Za-z0-9_]+\.sql)$", re.MULTILINE)


# The values a migration may name as {{NAME}}; each has its one source in Python.
PLACEHOLDERS: Final[Mapping[str, int | float]] = {
    "MAX_CONCURRENT_PER_SITE_LIMIT": politeness.MAX_CONCURRENT_PER_SITE_LIMIT,
    "MAX_DELAY_SECONDS": politeness.MAX_DELAY_SECONDS,
    "SERVER_ERROR_WINDOW": politeness.SERVER_ERROR_WINDOW,
    "ADAPTIVE_START_LIMIT": politeness.ADAPTIVE_START_LIMIT,
    "MAX_CRAWL_KEY_CHARS": crawl_memory.MAX_CRAWL_KEY_CHARS,
    "MAX_VALIDATOR_CHARS": crawl_memory.MAX_VALIDATOR_CHARS,
    "MAX_SESSION_COOKIE_BYTES": sessions.MAX_SESSION_COOKIE_BYTES,
    "MAX_TRIED_SESSIONS": sessions.MAX_TRIED_SESSIONS,
    "MAX_PAYLOAD_BYTES": payload.MAX_PAYLOAD_BYTES,
    "MAX_PAYLOAD_DEPTH": payload.MAX_PAYLOAD_DEPTH,
}
_PLACEHOLDER: Final = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")


def _with_includes(text: str, package: Traversable) -> str:
    """The migration's text with each include line replaced by the file of sql/ it names."""
    return _INCLUDE_LINE.sub(
        lambda match: package.joinpath("sql", match.group(1)).read_text(encoding="utf-8"), text
    )


def _sql_literal(value: int | float) -> str:
    """`value` as a SQL numeric literal (3600.0 as 3600)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


def _with_placeholders_filled(text: str, version: str) -> str:
    """`text` with each {{NAME}} replaced by PLACEHOLDERS[NAME]; ValueError for a name not
    there (a packaging error: the migration would not run)."""

    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PLACEHOLDERS:
            raise ValueError(
                f"migration {version} names an unknown placeholder {{{{{name}}}}}; known: "
                f"{', '.join(sorted(PLACEHOLDERS))}"
            )
        return _sql_literal(PLACEHOLDERS[name])

    return _PLACEHOLDER.sub(literal, text)


def available_migrations() -> list[Migration]:
    """Every migration shipped with the package, in the order they must run."""
    package = resources.files("scrapeq_queue")
    folder = package.joinpath("migrations")
    migrations = [
        Migration(
            version=entry.name.removesuffix(".sql"),
            sql=_with_placeholders_filled(
                _with_includes(entry.read_text(encoding="utf-8"), package),
                entry.name.removesuffix(".sql"),
            ),
        )
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(migrations, key=lambda migration: migration.version)


def _latest_version() -> str:
    migrations = available_migrations()
    if not migrations:  # pragma: no cover - a packaging error
        raise SchemaOutOfDate("no migration files were packaged with scrapeq_queue")
    return migrations[-1].version


# The version a database must be at for this code to run against it.
SCHEMA_VERSION: Final = _latest_version()


def migrate(conninfo: str) -> list[str]:
    """Bring the database to SCHEMA_VERSION; return the versions applied now (oldest first).

    Safe to run from many processes at once: all of it runs in one transaction holding an
    advisory lock, so the second caller waits, then finds nothing left to do. A failing
    migration rolls back entirely.
    """
    try:
        # Never prepared: a prepared statement outlives the transaction on its server
        # connection, which a pooler in transaction mode hands to other clients next.
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as connection:
            with connection.transaction():
                connection.execute(
                    statements.MIGRATION_LOCK, {"key": statements.MIGRATION_LOCK_KEY}
                )
                connection.execute(statements.MIGRATIONS_TABLE_CREATE)
                applied = {row[0] for row in connection.execute(statements.MIGRATIONS_APPLIED)}
                _refuse_retired(applied)
                newly_applied: list[str] = []
                for migration in available_migrations():
                    if migration.version in applied:
                        continue
                    # The file is ours and contains no bound values: run it as one script.
                    connection.execute(migration.sql.encode("utf-8"))
                    connection.execute(statements.MIGRATION_RECORD, {"version": migration.version})
                    newly_applied.append(migration.version)
            return newly_applied
    except psycopg.OperationalError as error:
        raise DatabaseUnavailable(f"cannot migrate, database unavailable: {error}") from error


@translate_database_errors
async def applied_versions(connection: psycopg.AsyncConnection[Any]) -> list[str]:
    """The migration versions recorded in the database (empty for an unmigrated database)."""
    cursor = await connection.execute(statements.MIGRATIONS_TABLE_EXISTS)
    exists = await cursor.fetchone()
    if not exists or not exists[0]:
        return []
    cursor = await connection.execute(statements.MIGRATIONS_APPLIED)
    return [str(row[0]) for row in await cursor.fetchall()]


async def schema_is_current(connection: psycopg.AsyncConnection[Any]) -> bool:
    """True when every migration this code knows has been applied."""
    versions = set(await applied_versions(connection))
    return all(migration.version in versions for migration in available_migrations())


def _refuse_retired(versions: set[str]) -> None:
    """Raise SchemaOutOfDate when the database recorded a retired development migration."""
    retired = sorted(versions & RETIRED_VERSIONS)
    if retired:
        raise SchemaOutOfDate(
            f"the database was migrated by a development build of scrapeq ({', '.join(retired)}"
            "), whose migrations 0003_politeness replaced before the first release; no "
            "migration leads on from that schema: migrate a new database (or drop this one's "
            "scrapeq objects and data) and enqueue its work again"
        )


async def require_current_schema(connection: psycopg.AsyncConnection[Any]) -> None:
    """Raise SchemaOutOfDate, naming what is missing, unless the schema is current."""
    versions = set(await applied_versions(connection))
    _refuse_retired(versions)
    missing = [m.version for m in available_migrations() if m.version not in versions]
    if missing:
        raise SchemaOutOfDate(
            f"the database schema is behind this scrapeq (missing {', '.join(missing)}); "
            "run `scrapeq migrate`"
        )
