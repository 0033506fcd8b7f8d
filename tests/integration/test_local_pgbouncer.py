"""The local PgBouncer: transaction pooling in front of the test PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest

from scrapeq.local.pgbouncer import LocalPgBouncer


def test_clients_through_the_local_pgbouncer_share_its_server_connections(
    postgres_server: str, pgbouncer: LocalPgBouncer
) -> None:
    clients = [
        psycopg.connect(pgbouncer.dsn(), autocommit=True, prepare_threshold=None) for _ in range(5)
    ]
    try:
        backends = set()
        for _ in range(3):
            for client in clients:
                row = client.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                backends.add(row[0])
        assert 1 <= len(backends) <= pgbouncer.pool_size
        # Transaction pooling: a session setting made by one client is visible to whichever
        # client gets that server connection next. This is what pooled mode must never rely on.
        with clients[0].transaction():
            local = (
                clients[0].execute("SELECT set_config('scrapeq.probe', 'mine', true)").fetchone()
            )
        assert local == ("mine",)
        for client in clients[1:]:
            row = client.execute("SELECT current_setting('scrapeq.probe', true)").fetchone()
            assert row is not None
            assert row[0] in (None, "")
    finally:
        for client in clients:
            client.close()


def test_a_stopped_local_pgbouncer_refuses_connections(postgres_server: str) -> None:
    server = LocalPgBouncer(postgres_server, pool_size=1)
    server.start()
    dsn = server.dsn()
    with psycopg.connect(dsn, prepare_threshold=None) as client:
        assert client.execute("SELECT 1").fetchone() == (1,)
    server.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2).close()
