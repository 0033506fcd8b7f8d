"""The throw-away PostgreSQL keeps its data across a restart and removes its files when stopped."""

from __future__ import annotations

import psycopg
import pytest

from scrapeq.local.postgres import LocalPostgres

pytestmark = pytest.mark.postgres


def test_a_restarted_server_keeps_its_port_and_data_and_stop_removes_its_directory() -> None:
    # Durable: an immediate stop loses commits the fast settings have not written yet.
    server = LocalPostgres(durable=True)
    try:
        server.start()
        with psycopg.connect(server.dsn(), autocommit=True) as connection:
            connection.execute("CREATE TABLE kept (value int)")
            connection.execute("INSERT INTO kept VALUES (42)")
        port = server.port
        server.restart()
        assert server.port == port
        with psycopg.connect(server.dsn(), autocommit=True) as connection:
            assert connection.execute("SELECT value FROM kept").fetchall() == [(42,)]
        directory = server.base_dir
        assert directory is not None
    finally:
        server.stop()
    assert not directory.exists()
