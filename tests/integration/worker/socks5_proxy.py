"""A real SOCKS5 proxy (Debian's microsocks) on loopback with a login, for the socks5://
upstream tests. A missing microsocks skips on a developer's machine and fails under CI=true
(tests.conftest.missing_part), never a silent pass."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import missing_part
from tests.waiting import eventually_blocking

USER = "scrapeq"
PASSWORD = "s3cret-socks-pw"


@dataclass
class Socks5Proxy:
    port: int
    log: Path

    def url(self, password: str = PASSWORD) -> str:
        return f"socks5://{USER}:{password}@127.0.0.1:{self.port}"


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def running_socks5_proxy(directory: Path, *, bind: str | None = None) -> Iterator[Socks5Proxy]:
    """microsocks listening on a free loopback port with a login; with `bind`, its connections
    to sites leave from that loopback address (a site sees the proxy by it)."""
    if shutil.which("microsocks") is None:
        missing_part("microsocks", "not installed (apt-get install microsocks)")
    directory.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["microsocks", "-i", "127.0.0.1", "-p", str(port), "-u", USER, "-P", PASSWORD]
    if bind is not None:
        command += ["-b", bind]
    log = directory / "microsocks.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=output)
    try:

        def listening() -> bool:
            assert process.poll() is None, log.read_text()
            return _listening(port)

        eventually_blocking(listening, within=10, what="microsocks to listen", every=0.05)
        yield Socks5Proxy(port, log)
    finally:
        process.terminate()
        process.wait(timeout=10)
