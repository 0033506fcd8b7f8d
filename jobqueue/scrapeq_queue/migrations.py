"""Schema migrations: numbered .sql files applied once each, in order, under an advisory lock.

`schema.sql` next to this module is a snapshot of the schema the migrations produce (generated
by `python -m scrapeq.local.schema_snapshot`); a test proves the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import DatabaseUnavailable, SchemaOutOfDate, translate_database_errors


@dataclass(frozen=True)
class Migration:
    """One numbered migration file."""

    version: str  # the file name without .sql, e.g. "0001_initial"
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped with the package, in the order they must run."""
    folder = resources.files("scrapeq_queue").joinpath("migrations")
    migrations = [
        Migration(version=entry.name.removesuffix(".sql"), sql=entry.read_text(encoding="utf-8"))
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
        with psycopg.connect(conninfo, autocommit=True) as connection:
            with connection.transaction():
                connection.execute(
                    statements.MIGRATION_LOCK, {"key": statements.MIGRATION_LOCK_KEY}
                )
                connection.execute(statements.MIGRATIONS_TABLE_CREATE)
                applied = {row[0] for row in connection.execute(statements.MIGRATIONS_APPLIED)}
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


async def require_current_schema(connection: psycopg.AsyncConnection[Any]) -> None:
    """Raise SchemaOutOfDate, naming what is missing, unless the schema is current."""
    versions = set(await applied_versions(connection))
    missing = [m.version for m in available_migrations() if m.version not in versions]
    if missing:
        raise SchemaOutOfDate(
            f"the database schema is behind this scrapeq (missing {', '.join(missing)}); "
            "run `scrapeq migrate`"
        )
