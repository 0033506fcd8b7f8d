"""A real tinyproxy (Debian's) on loopback with BasicAuth, for the upstream-proxy tests of the
worker and of ScrapeJobs' spec.proxy. A missing tinyproxy skips on a developer's machine and
fails under CI=true (tests.conftest.missing_part), never a silent pass."""

from __future__ import annotations

import base64
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
PASSWORD = "s3cret-upstream-pw"


@dataclass
class Tinyproxy:
    port: int
    log: Path

    def url(self, password: str = PASSWORD) -> str:
        return f"http://{USER}:{password}@127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "Request (" in line]


def secrets_in(text: str) -> list[str]:
    """The proxy password, alone or as the Basic credentials, wherever it appears in `text`."""
    encoded = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return [secret for secret in (PASSWORD, encoded) if secret in text]


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def running_tinyproxy(directory: Path, *, bind: str | None = None) -> Iterator[Tinyproxy]:
    """tinyproxy listening on a free loopback port, logging every request to `directory`;
    with `bind`, its connections to sites leave from that loopback address (so a site can
    tell the proxies apart, as it tells real proxies apart by their addresses)."""
    if shutil.which("tinyproxy") is None:
        missing_part("tinyproxy", "not installed (apt-get install tinyproxy)")
    directory.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = directory / "tinyproxy.conf"
    config.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 60\nLogLevel Connect\nMaxClients 50\n"
        f"Allow 127.0.0.1\nBasicAuth {USER} {PASSWORD}\n" + (f"Bind {bind}\n" if bind else "")
    )
    log = directory / "tinyproxy.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["tinyproxy", "-d", "-c", str(config)], stdout=output, stderr=output
        )
    try:

        def listening() -> bool:
            assert process.poll() is None, log.read_text()
            return _listening(port)

        eventually_blocking(listening, within=10, what="tinyproxy to listen", every=0.05)
        yield Tinyproxy(port, log)
    finally:
        process.terminate()
        process.wait(timeout=10)
