"""A throw-away PgBouncer in transaction pooling mode, in front of a PostgreSQL, on loopback.

It uses the machine's PgBouncer (Debian's `pgbouncer`, 1.18). Every database name a client asks
for goes to the same name on the PostgreSQL behind it, so a test's fresh database is reachable
through the pooler under its own name. PgBouncer refuses to run as root: when we are root it is
started as the `postgres` user and its directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg

from scrapeq.local.processes import LocalPartError, LoggedPart, free_port, wait_until

PGBOUNCER_BINARY: Final = "/usr/sbin/pgbouncer"

# A fresh PgBouncer answers within a few hundred milliseconds; on a loaded machine give it time.
READY_TIMEOUT_SECONDS: Final = 30.0


def find_pgbouncer() -> Path:
    """The pgbouncer binary: SCRAPEQ_PGBOUNCER, Debian's path, or PATH; LocalPartError if none."""
    explicit = os.environ.get("SCRAPEQ_PGBOUNCER")
    if explicit:
        return Path(explicit)
    if Path(PGBOUNCER_BINARY).exists():
        return Path(PGBOUNCER_BINARY)
    on_path = shutil.which("pgbouncer")
    if on_path:
        return Path(on_path)
    raise LocalPartError(
        "PgBouncer was not found. Install it with `apt-get install pgbouncer` "
        "or set SCRAPEQ_PGBOUNCER."
    )


@dataclass
class LocalPgBouncer(LoggedPart):
    """One PgBouncer (pool_mode = transaction) in a temporary directory, on 127.0.0.1.

    `server_dsn` is a DSN of the PostgreSQL behind it (its host, port and user are used).
    `pool_size` is the number of server connections per database and user: a small pool makes
    clients share server connections, which is what transaction pooling is about.
    """

    log_name = "pgbouncer"
    server_dsn: str
    pool_size: int = 2
    max_client_connections: int = 1000
    port: int = 0

    @property
    def user(self) -> str:
        return str(psycopg.conninfo.conninfo_to_dict(self.server_dsn).get("user") or "postgres")

    def dsn(self, dbname: str = "postgres") -> str:
        """A DSN for `dbname` through the pooler."""
        return psycopg.conninfo.make_conninfo(
            self.server_dsn, host="127.0.0.1", port=str(self.port), dbname=dbname
        )

    def pooled(self, direct_dsn: str) -> str:
        """The DSN of the same database as `direct_dsn` (a DSN of the server), through the
        pooler."""
        dbname = psycopg.conninfo.conninfo_to_dict(direct_dsn).get("dbname") or "postgres"
        return self.dsn(str(dbname))

    def start(self) -> str:
        """Write the configuration, start PgBouncer and wait until it answers; return a DSN
        for the `postgres` database through it."""
        binary = find_pgbouncer()
        base_dir = self._working_dir()
        if not self.port:
            self.port = free_port()
        server = psycopg.conninfo.conninfo_to_dict(self.server_dsn)
        ini = base_dir / "pgbouncer.ini"
        userlist = base_dir / "userlist.txt"
        # The throw-away PostgreSQL trusts loopback; the pooler does the same for its one user.
        userlist.write_text(f'"{self.user}" ""\n')
        ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={server.get('host') or '127.0.0.1'} "
                    f"port={server.get('port') or 5432}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {userlist}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    f"max_client_conn = {self.max_client_connections}",
                    f"max_db_connections = {self.pool_size}",
                    # Some drivers send it at connect; PgBouncer refuses unknown startup parameters.
                    "ignore_startup_parameters = extra_float_digits",
                    "server_reset_query =",
                    "server_check_delay = 0",
                    "log_connections = 0",
                    "log_disconnections = 0",
                    # No logfile: in the foreground PgBouncer logs to stderr, into log_path.
                    f"pidfile = {base_dir / 'pgbouncer.pid'}",
                    "",
                ]
            )
        )
        prefix = _as_unprivileged_user(base_dir)
        self._spawn([*prefix, str(binary), str(ini)])
        wait_until(
            self._answers,
            timeout=READY_TIMEOUT_SECONDS,
            what=f"PgBouncer on 127.0.0.1:{self.port}",
            interval=0.1,
            failed=self._exit_reason,
        )
        return self.dsn()

    def server_pid(self) -> int:
        """The pid of the running pgbouncer process (from its pidfile)."""
        if self.base_dir is None:
            raise LocalPartError("PgBouncer is not running")
        try:
            return int((self.base_dir / "pgbouncer.pid").read_text().strip())
        except (OSError, ValueError) as error:
            raise LocalPartError(f"PgBouncer's pidfile cannot be read: {error}") from error

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2, prepare_threshold=None) as probe:
                probe.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True


def _as_unprivileged_user(directory: Path) -> list[str]:
    """As root, the command prefix that runs PgBouncer as `postgres`, owning `directory`."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as error:
        raise LocalPartError(
            "running as root, PgBouncer needs an unprivileged `postgres` user; "
            "install the postgresql package or run as a normal user"
        ) from error
    os.chmod(directory, 0o755)
    for path in [directory, *directory.iterdir()]:
        shutil.chown(path, "postgres", "postgres")
    return ["runuser", "-u", "postgres", "--"]
