"""Migrations: they reproduce schema.sql, run once, and are safe to run concurrently."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import statements
from scrapeq_queue.migrations import Migration, available_migrations

from scrapeq.local.schema_snapshot import SNAPSHOT_PATH, dump_schema, render_snapshot

pytestmark = pytest.mark.postgres


async def apply_only(conn: psycopg.AsyncConnection[Any], migrations: list[Migration]) -> None:
    """Bring an empty database to the state of `migrations` alone, each recorded as applied."""
    await conn.execute(statements.MIGRATIONS_TABLE_CREATE)
    for migration in migrations:
        await conn.execute(migration.sql.encode("utf-8"))
        await conn.execute(statements.MIGRATION_RECORD, {"version": migration.version})


def test_migrations_reproduce_the_schema_snapshot(postgres_server: str) -> None:
    from tests.conftest import _with_dbname

    names = (f"scrapeq_snapshot_migrated_{os.getpid()}", f"scrapeq_snapshot_loaded_{os.getpid()}")
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        for name in names:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {name}")
    migrated, loaded = (_with_dbname(postgres_server, name) for name in names)
    try:
        queue.migrate(migrated)
        with psycopg.connect(loaded, autocommit=True) as connection:
            connection.execute(SNAPSHOT_PATH.read_bytes())

        assert render_snapshot(migrated) == SNAPSHOT_PATH.read_text(encoding="utf-8"), (
            "schema.sql is stale: run `python -m scrapeq.local.schema_snapshot`"
        )
        assert dump_schema(loaded) == dump_schema(migrated)
        assert queue.migrate(loaded) == [], "a database loaded from schema.sql is current"
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            for name in names:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_migrate_applies_each_migration_once(empty_database_url: str) -> None:
    async with await queue.connect(empty_database_url) as connection:
        assert not await queue.schema_is_current(connection)

        every_version = [migration.version for migration in available_migrations()]
        assert every_version[-1] == queue.SCHEMA_VERSION
        assert queue.migrate(empty_database_url) == every_version
        assert queue.migrate(empty_database_url) == []

        assert await queue.schema_is_current(connection)
        assert await queue.applied_versions(connection) == every_version


def test_concurrent_migrations_apply_everything_exactly_once(empty_database_url: str) -> None:
    start = threading.Barrier(6)

    def migrate_together() -> list[str]:
        start.wait(timeout=30)
        return queue.migrate(empty_database_url)

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: migrate_together(), range(6)))

    every_version = [migration.version for migration in available_migrations()]
    assert sorted(results, key=len) == [[]] * 5 + [every_version]


async def test_an_unmigrated_database_is_reported_as_such(empty_database_url: str) -> None:
    async with await queue.connect(empty_database_url) as connection:
        with pytest.raises(queue.SchemaOutOfDate, match="scrapeq migrate"):
            await queue.require_current_schema(connection)
        with pytest.raises(queue.SchemaOutOfDate, match="scrapeq migrate"):
            await queue.claim_jobs(
                connection, worker_id="w", queues=["default"], limit=1, lease_seconds=1
            )


async def test_an_unreachable_database_raises_database_unavailable() -> None:
    from scrapeq.local.processes import free_port

    with pytest.raises(queue.DatabaseUnavailable, match="cannot connect") as raised:
        await queue.connect(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    with pytest.raises(queue.DatabaseUnavailable):
        queue.migrate(f"postgresql://nobody@127.0.0.1:{free_port()}/none")


async def test_a_broken_connection_raises_database_unavailable(database_url: str) -> None:
    connection = await queue.connect(database_url)
    await connection.close()
    with pytest.raises(queue.DatabaseUnavailable):
        await queue.enqueue(connection, "https://e.test/")


async def test_rows_queued_before_host_politeness_are_claimable_after_the_upgrade(
    empty_database_url: str,
) -> None:
    """Migration 0003 on a database at 0002 with pending rows: they get their host and are
    claimed."""
    earlier = [m for m in available_migrations() if m.version < "0003"]
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await apply_only(conn, earlier)
        await conn.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type)"
            " VALUES ('https://www.old.test/1', 'classic'), ('https://www.old.test/2', 'classic')"
        )
        assert await asyncio.to_thread(queue.migrate, empty_database_url) == [
            m.version for m in available_migrations() if m.version >= "0003"
        ]
        jobs = await queue.claim_jobs(
            conn, worker_id="w", queues=["default"], limit=10, lease_seconds=30
        )
    assert [job.host_key for job in jobs] == ["www.old.test", "www.old.test"]


async def test_a_database_migrated_by_the_retired_development_migrations_is_refused(
    empty_database_url: str,
) -> None:
    """0003_politeness replaced 0003_host_politeness … 0009_shared_turns before the first
    release: a database that recorded one of them is refused, by `migrate` and by every
    component's schema check, with a message saying why and what to do; nothing is changed."""
    earlier = [m for m in available_migrations() if m.version < "0003"]
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await apply_only(conn, earlier)
        for version in ("0003_host_politeness", "0008_claim_function", "0009_shared_turns"):
            await conn.execute(statements.MIGRATION_RECORD, {"version": version})

        with pytest.raises(queue.SchemaOutOfDate, match=r"development build.*0009_shared_turns"):
            await asyncio.to_thread(queue.migrate, empty_database_url)
        with pytest.raises(queue.SchemaOutOfDate, match="migrate a new database"):
            await queue.require_current_schema(conn)
        assert not await queue.schema_is_current(conn)
        assert "0003_politeness" not in await queue.applied_versions(conn)
        cursor = await conn.execute("SELECT to_regclass('scrapeq_hosts')")
        assert await cursor.fetchone() == (None,)


def test_a_live_definition_is_applied_from_its_own_file() -> None:
    """The claim, the site limits, the payload readers and the pending-row triggers are read in
    sql/, and the migrations that apply them carry their text."""
    from importlib import resources

    from scrapeq_queue.migrations import _with_placeholders_filled

    versions = {m.version: m for m in available_migrations()}
    applying = {
        "claim.sql": ["0003_politeness"],
        "host_limits.sql": ["0003_politeness", "0005_site_politeness"],
        "payload_limits.sql": ["0003_politeness", "0005_site_politeness"],
        "hosts_pending.sql": ["0003_politeness", "0005_site_politeness"],
        "namespace_heads.sql": ["0016_tenancy"],
    }
    for name, migrations in applying.items():
        text = resources.files("scrapeq_queue").joinpath("sql", name).read_text(encoding="utf-8")
        for version in migrations:
            assert _with_placeholders_filled(text, name) in versions[version].sql, (name, version)
    for migration in versions.values():
        assert not [line for line in migration.sql.splitlines() if line.startswith("\\ir ")]


# Every function the claim and the triggers of scraping_jobs call on the way to a claim.
CLAIM_PATH_FUNCTIONS = (
    "scrapeq_claim",
    "scrapeq_claim_turn_slot",
    "scrapeq_host_limit",
    "scrapeq_host_delay",
    "scrapeq_hosts_pending",
    "scrapeq_hosts_after_insert",
    "scrapeq_hosts_after_pending",
    "scrapeq_heads_pending",
    "scrapeq_heads_after_insert",
    "scrapeq_heads_after_pending",
    "scrapeq_payload_max_per_host",
    "scrapeq_payload_delay_seconds",
    "scrapeq_job_limit",
    "scrapeq_named_job_limits",
    "scrapeq_job_limits_named",
    "scrapeq_job_limits_after_insert",
    "scrapeq_hosts_take_policy",
    "scrapeq_site_policy_pattern",
    "scrapeq_site_patterns",
)


def test_every_function_on_the_claim_path_is_defined_once_in_sql_and_in_no_migration() -> None:
    import re
    from importlib import resources

    package = resources.files("scrapeq_queue")
    sql_files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in package.joinpath("sql").iterdir()
        if entry.name.endswith(".sql")
    }
    migration_files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in package.joinpath("migrations").iterdir()
        if entry.name.endswith(".sql")
    }
    for function in CLAIM_PATH_FUNCTIONS:
        defines = re.compile(rf"CREATE (OR REPLACE )?FUNCTION {function}\(")
        defining = [name for name, text in sql_files.items() if defines.search(text)]
        assert len(defining) == 1, (function, defining)
        assert not [name for name, text in migration_files.items() if defines.search(text)], (
            function
        )


async def test_rows_written_before_the_payload_bounds_fail_alone_after_the_upgrade(
    empty_database_url: str,
) -> None:
    """Rows a database at 0003 stored with payloads the bounds of 0004 refuse (an array, arrays
    nested 40 deep) are failed by the claim one by one after the upgrade; the row beside them
    is claimed. (While the bounds were CHECK constraints, checked on every UPDATE, the claim's
    UPDATE of such a row raised and every claim that reached it failed.)"""
    earlier = [m for m in available_migrations() if m.version < "0004"]
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await apply_only(conn, earlier)
        await conn.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) VALUES"
            " ('https://old.test/array', 'classic', '[1]'),"
            " ('https://old.test/deep', 'classic',"
            "  ('{\"extract\": ' || repeat('[', 40) || repeat(']', 40) || '}')::jsonb),"
            " ('https://old.test/healthy', 'classic', '{}')"
        )
        await asyncio.to_thread(queue.migrate, empty_database_url)

        jobs = await queue.claim_jobs(
            conn, worker_id="w", queues=["default"], limit=10, lease_seconds=30
        )
        assert [job.url for job in jobs] == ["https://old.test/healthy"]
        cursor = await conn.execute(
            "SELECT url_to_scrape, status::text, last_error_reason FROM scraping_jobs"
            " WHERE url_to_scrape <> 'https://old.test/healthy' ORDER BY url_to_scrape"
        )
        assert await cursor.fetchall() == [
            ("https://old.test/array", "failed", "invalid_payload"),
            ("https://old.test/deep", "failed", "invalid_payload"),
        ]


@pytest.mark.parametrize("at", ["0002", "0003", "0004"])
async def test_a_database_at_an_earlier_version_upgrades_to_the_site_names(
    empty_database_url: str, at: str
) -> None:
    """A database at `at` upgrades: a pending row that names its site's limit under the key it
    had before 0.1.0 keeps it under maxConcurrentPerSite as a limit of its own rows and is
    claimed, and a row inserted after the upgrade names a limit of its own with the new key
    without setting its site's."""
    earlier = [m for m in available_migrations() if m.version[:4] <= at]
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await apply_only(conn, earlier)
        await conn.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) VALUES"
            " ('https://www.old.test/1', 'classic', %s::jsonb)",
            ('{"politeness": {"maxConcurrentPerHost": 3, "delaySeconds": 0}}',),
        )
        applied = await asyncio.to_thread(queue.migrate, empty_database_url)
        assert applied == [m.version for m in available_migrations() if m.version[:4] > at]

        [job] = await queue.claim_jobs(
            conn, worker_id="w", queues=["default"], limit=10, lease_seconds=30
        )
        assert job.payload == {"politeness": {"maxConcurrentPerSite": 3, "delaySeconds": 0}}
        await queue.enqueue(
            conn, "https://new.test/", payload={"politeness": {"maxConcurrentPerSite": 7}}
        )
        cursor = await conn.execute(
            "SELECT hosts.max_in_flight, own.host_key, own.max_in_flight FROM scrapeq_hosts"
            " AS hosts JOIN scrapeq_site_job_limits AS own USING (host_key)"
            " WHERE own.owner_key = '' ORDER BY own.host_key"
        )
        assert await cursor.fetchall() == [(None, "new.test", 7), (None, "www.old.test", 3)]


async def test_a_database_with_site_policies_and_crawl_flags_takes_the_tenancy_migration_after_them(
    empty_database_url: str,
) -> None:
    """A database migrated before 0016_tenancy existed (0015 and 0018 applied, 0016 not) gets
    0016 alone from `scrapeq migrate`, ends with the schema of a fresh database, and its pending
    rows of two namespaces on one site get a head each and go out in turns."""
    earlier = [m for m in available_migrations() if m.version != "0016_tenancy"]
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await apply_only(conn, earlier)
        await conn.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, owner_uid, owner_namespace,"
            " owner_name)"
            " SELECT 'https://shared.test/' || n, 'classic', 'uid-' || ns, ns, 'job'"
            " FROM unnest(ARRAY['big', 'big', 'big', 'small']) WITH ORDINALITY AS given(ns, n)"
        )

        assert await asyncio.to_thread(queue.migrate, empty_database_url) == ["0016_tenancy"]
        assert render_snapshot(empty_database_url) == SNAPSHOT_PATH.read_text(encoding="utf-8")

        cursor = await conn.execute(
            "SELECT owner_namespace FROM scrapeq_host_queues ORDER BY owner_namespace"
        )
        assert await cursor.fetchall() == [("big",), ("small",)]
        jobs = await queue.claim_jobs(
            conn,
            worker_id="w",
            queues=["default"],
            limit=10,
            lease_seconds=30,
            politeness=queue.SitePoliteness(max_concurrent_per_site=2),
        )
    assert sorted(job.owner_namespace or "" for job in jobs) == ["big", "small"]
