"""Session fixtures that start the real parts: PostgreSQL, Chromium, Prometheus, kube-apiserver.

A part that cannot be started skips the tests that need it on a developer's machine and fails
them when CI=true, so a missing real part can never pass silently in CI.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psycopg
import pytest
import yaml
from psycopg import sql

from scrapeq.local.controlplane import LocalControlPlane, tool_path
from scrapeq.local.pgbouncer import LocalPgBouncer
from scrapeq.local.postgres import LocalPostgres
from scrapeq.local.processes import LocalPartError
from scrapeq.local.prometheus import LocalPrometheus

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class KubeCluster:
    """How tests reach the control plane: an admin kubeconfig and the server URL."""

    kubeconfig: Path
    server: str


def _server_of(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    server: str = config["clusters"][0]["cluster"]["server"]
    return server


class _Startable(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


@contextmanager
def running(part: str, server: _Startable) -> Iterator[None]:
    """Start a real part for a fixture and stop it afterwards; a part that cannot start is
    `missing_part` (a skip on a developer machine, a failure in CI)."""
    try:
        server.start()
    except LocalPartError as error:
        server.stop()
        missing_part(part, str(error))
    try:
        yield
    finally:
        server.stop()


def missing_part(part: str, reason: str) -> None:
    """Skip (developer machine) or fail (CI) a test whose real part is unavailable."""
    message = f"{part} is not available: {reason}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing real part is a failure)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the whole session; yields an admin DSN (database `postgres`).

    Uses SCRAPEQ_TEST_DATABASE_URL (or DATABASE_URL) when set; otherwise starts a throw-away
    cluster from the machine's PostgreSQL binaries.
    """
    given = os.environ.get("SCRAPEQ_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if given:
        yield given
        return
    server = LocalPostgres()
    with running("PostgreSQL", server):
        yield server.dsn()


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: str) -> Iterator[LocalPgBouncer]:
    """A PgBouncer in transaction pooling mode in front of `postgres_server` for the session.

    Its pool holds two server connections per database, so clients share them as pods behind
    a pooler do; `pgbouncer.pooled(dsn)` is the same database through it.
    """
    server = LocalPgBouncer(postgres_server, pool_size=2)
    with running("PgBouncer", server):
        yield server


@pytest.fixture
def restartable_postgres() -> Iterator[LocalPostgres]:
    """A durable PostgreSQL of the test's own, which it may stop (`stop_server`), restart and
    start again: committed rows survive."""
    server = LocalPostgres(durable=True)
    with running("PostgreSQL", server):
        yield server


_database_numbers = itertools.count()


def _with_dbname(dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=dbname)


@pytest.fixture
def empty_database_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    name = f"scrapeq_test_{os.getpid()}_{next(_database_numbers)}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_dbname(postgres_server, name)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """A real kube-apiserver + etcd for the session (no kubelet), with an admin kubeconfig.

    With SCRAPEQ_USE_EXISTING_CLUSTER=1 and KUBECONFIG set, the user's cluster is used instead.
    """
    if os.environ.get("SCRAPEQ_USE_EXISTING_CLUSTER") == "1" and os.environ.get("KUBECONFIG"):
        kubeconfig = Path(os.environ["KUBECONFIG"])
        yield KubeCluster(kubeconfig=kubeconfig, server=_server_of(kubeconfig))
        return
    cluster = LocalControlPlane()
    with running("kube-apiserver", cluster):
        yield KubeCluster(kubeconfig=cluster.kubeconfig, server=cluster.server)


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """The helm binary built from helm.sh/helm/v3/cmd/helm (cached by tools/build.sh)."""
    try:
        return tool_path("helm")
    except LocalPartError as error:
        missing_part("helm", str(error))
        raise


@pytest.fixture
def prometheus() -> Iterator[LocalPrometheus]:
    """A real Prometheus server for one test; point it at targets with `set_targets`."""
    server = LocalPrometheus()
    with running("Prometheus", server):
        yield server


# --- the queue schema (scrapeq_queue) -----------------------------------------------------------
# Imported here rather than at the top so that this section stays an append-only block.
from collections.abc import AsyncIterator  # noqa: E402
from typing import Any  # noqa: E402


@pytest.fixture(scope="session")
def migrated_template_database(postgres_server: str) -> Iterator[str]:
    """A database migrated once per session, used as the template of every `database_url`.

    Copying a template is much faster than running the migrations for every test.
    """
    from scrapeq_queue import migrate

    name = f"scrapeq_template_{os.getpid()}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        migrate(_with_dbname(postgres_server, name))
        yield name
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def database_url(postgres_server: str, migrated_template_database: str) -> Iterator[str]:
    """A fresh database with the current queue schema for one test; dropped afterwards."""
    name = f"scrapeq_test_{os.getpid()}_{next(_database_numbers)}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(migrated_template_database)
            )
        )
    try:
        yield _with_dbname(postgres_server, name)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
async def async_connection(
    database_url: str,
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit async connection to `database_url`, the kind every queue function takes."""
    connection = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


# --- the worker's browser (scrapeq_worker) ------------------------------------------------------


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """The Chromium binary the worker will use (headless-shell preferred), or missing_part."""
    from scrapeq_worker.browser import EXECUTABLE_CANDIDATES, find_chromium

    executable = find_chromium(os.environ.get("SCRAPEQ_CHROMIUM"))
    if executable is None:
        missing_part(
            "Chromium",
            "none of " + ", ".join(EXECUTABLE_CANDIDATES) + " exists (apt-get install chromium)",
        )
        raise AssertionError("unreachable")
    return executable


# --- the object store (versitygw, an S3 server) ---------------------------------------------
from scrapeq.local.s3_server import LocalS3Server  # noqa: E402

# The bucket the session's S3 server holds; tests keep apart by object key prefix.
S3_BUCKET = "scrapeq-test"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    """A real S3 server (versitygw, built by tools/build.sh) for the session, with a root
    access key and secret and the bucket S3_BUCKET; missing_part when it cannot be built or
    started."""
    server = LocalS3Server(buckets=(S3_BUCKET,))
    with running("the S3 server (versitygw)", server):
        yield server


@pytest.fixture
def restartable_s3_server() -> Iterator[LocalS3Server]:
    """An S3 server of the test's own, which it may stop (`stop_server`) and start again
    (`start_server`) on the same port: its objects survive."""
    server = LocalS3Server(buckets=(S3_BUCKET,))
    with running("the S3 server (versitygw)", server):
        yield server
