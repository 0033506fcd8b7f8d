"""A throw-away PostgreSQL cluster on loopback, for tests, benchmarks and the demo.

It uses the machine's PostgreSQL binaries (Debian's `postgresql-15`). PostgreSQL refuses to run
as root, so when we are root every server command runs as the `postgres` user and the data
directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scrapeq.local.processes import LocalPartError, free_port, wait_until

# Settings for a disposable cluster. Durability is traded for speed because the data is thrown
# away; benchmarks that compare queues pass durable=True so commits cost what they cost in
# production.
FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
COMMON_SETTINGS = {
    "max_connections": "200",
    "shared_buffers": "256MB",
    "listen_addresses": "127.0.0.1",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


def find_postgres_bindir() -> Path:
    """Return the directory holding initdb/pg_ctl/postgres, newest major version first."""
    explicit = os.environ.get("SCRAPEQ_PG_BINDIR")
    if explicit:
        return Path(explicit)
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if (candidate / "initdb").exists():
            return candidate
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise LocalPartError(
        "PostgreSQL server binaries (initdb, pg_ctl) were not found. "
        "Install them with `apt-get install postgresql-15` or set SCRAPEQ_PG_BINDIR."
    )


@dataclass
class LocalPostgres:
    """One PostgreSQL server in a temporary directory, listening on 127.0.0.1."""

    base_dir: Path | None = None
    port: int = 0
    durable: bool = False
    user: str = "scrapeq"
    # Server settings over the defaults above, e.g. {"max_connections": "1600"} for a fleet.
    settings: dict[str, str] = field(default_factory=dict)
    _owned_dir: bool = field(default=False, init=False)
    _started: bool = field(default=False, init=False)

    @property
    def data_dir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "socket"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def _as_server_user(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam("postgres")
        except KeyError as error:
            raise LocalPartError(
                "running as root, PostgreSQL needs an unprivileged `postgres` user; "
                "install the postgresql package or run as a normal user"
            ) from error
        return ["runuser", "-u", "postgres", "--"]

    def start(self) -> str:
        """Create and start the cluster; return a DSN for the `postgres` database."""
        bindir = find_postgres_bindir()
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="scrapeq-pg-"))
            self._owned_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        prefix = self._as_server_user()
        if prefix:
            os.chmod(self.base_dir, 0o755)
            shutil.chown(self.base_dir, "postgres", "postgres")
            shutil.chown(self.socket_dir, "postgres", "postgres")
        if not self.port:
            self.port = free_port()
        if not (self.data_dir / "PG_VERSION").exists():
            _run(
                [
                    *prefix,
                    str(bindir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    self.user,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                "initdb",
            )
        settings = dict(COMMON_SETTINGS)
        if not self.durable:
            settings.update(FAST_SETTINGS)
        settings.update(self.settings)
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = str(self.socket_dir)
        options = " ".join(f"-c {key}={value}" for key, value in settings.items())
        _run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-o",
                options,
                "-l",
                str(self.base_dir / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            "pg_ctl start",
            log=self.base_dir / "server.log",
        )
        self._started = True
        return self.dsn()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (idempotent) and remove the directory if we created it."""
        self.stop_server(mode)
        if self._owned_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def restart(self) -> None:
        """Stop the server abruptly (immediate mode) and start it again: same port, same data."""
        self.stop_server("immediate")
        self.start()

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server but keep its data: `start()` brings it back on the same port.

        `immediate` is a crash as far as clients can tell (tests of database outages).
        """
        if self._started and self.base_dir is not None:
            bindir = find_postgres_bindir()
            try:
                _run(
                    [
                        *self._as_server_user(),
                        str(bindir / "pg_ctl"),
                        "-D",
                        str(self.data_dir),
                        "-m",
                        mode,
                        "-w",
                        "-t",
                        "30",
                        "stop",
                    ],
                    "pg_ctl stop",
                )
            except LocalPartError:
                self._kill_postmaster()
            self._started = False

    def start_standby_of(self, primary: LocalPostgres) -> str:
        """Copy `primary` with pg_basebackup (WAL streamed, `-R`: a standby that follows it)
        into this server's directory and start it as a hot standby; return its DSN. The
        primary needs wal_level replica (PostgreSQL's default) and replication connections
        from 127.0.0.1, which initdb's trust setup allows."""
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="scrapeq-pg-standby-"))
            self._owned_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        prefix = self._as_server_user()
        if prefix:
            os.chmod(self.base_dir, 0o755)
            shutil.chown(self.base_dir, "postgres", "postgres")
        _run(
            [
                *prefix,
                str(find_postgres_bindir() / "pg_basebackup"),
                "--host=127.0.0.1",
                f"--port={primary.port}",
                f"--username={primary.user}",
                f"--pgdata={self.data_dir}",
                "--write-recovery-conf",
                "--wal-method=stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
            "pg_basebackup",
        )
        return self.start()

    def promote(self) -> None:
        """Promote a standby to primary; return once it accepts writes."""
        assert self.base_dir is not None, "promote a started standby"
        assert self._started, "promote a running standby"
        _run(
            [
                *self._as_server_user(),
                str(find_postgres_bindir() / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-w",
                "-t",
                "60",
                "promote",
            ],
            "pg_ctl promote",
        )

    def postmaster_pid(self) -> int | None:
        """The running server's postmaster (from its postmaster.pid); None when it is not
        running."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _kill_postmaster(self) -> None:
        pid = self.postmaster_pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_until(lambda: not _alive(pid), timeout=10, what="postmaster to exit")

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run(command: list[str], what: str, log: Path | None = None) -> None:
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        details = (result.stderr or result.stdout).strip()
        if log is not None and log.exists():
            details += "\n--- server log ---\n" + log.read_text()[-4000:]
        raise LocalPartError(
            f"{what} failed after {time.monotonic() - started:.1f}s "
            f"(exit {result.returncode}): {details}"
        )
