"""A real S3 server on loopback: versitygw serving a directory through its posix backend.

versitygw is built from its Go module by tools/build.sh (cached like kube-apiserver). Each
bucket is a directory under the server's root; object metadata lives in a sidecar directory,
so the server needs no extended attributes on the file system it writes to. The server can be
stopped and started again on the same port and directory (`stop_server`, `start_server`), as a
store that goes away for a while and comes back with its objects.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scrapeq.local.controlplane import tool_path
from scrapeq.local.processes import free_port, spawn_logged, terminate, wait_until

# The region the server reports and signs with; any name works as long as clients agree.
REGION = "us-east-1"


@dataclass
class LocalS3Server:
    """One versitygw process with a root user and the buckets in `buckets`, listening on
    `host` (loopback unless told otherwise: the demo on Pods serves it on the node's pod
    network)."""

    buckets: tuple[str, ...] = ("scrapeq",)
    host: str = "127.0.0.1"
    base_dir: Path | None = None
    port: int = 0
    access_key: str = field(default_factory=lambda: "scrapeq-" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _owned_dir: bool = field(default=False, init=False)

    @property
    def endpoint(self) -> str:
        """The URL clients use (path-style addressing: http://HOST:PORT/BUCKET/KEY)."""
        return f"http://{self.host}:{self.port}"

    @property
    def region(self) -> str:
        return REGION

    @property
    def root(self) -> Path:
        """The directory the buckets live in: bucket B's object K is the file root/B/K."""
        assert self.base_dir is not None
        return self.base_dir / "root"

    def start(self) -> None:
        """Start the server with its buckets and wait until it answers HTTP."""
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="scrapeq-s3-"))
            self._owned_dir = True
        self.port = self.port or free_port()
        (self.base_dir / "sidecar").mkdir(parents=True, exist_ok=True)
        for bucket in self.buckets:
            # The posix backend's bucket is a directory of its root.
            (self.root / bucket).mkdir(parents=True, exist_ok=True)
        self.start_server()

    def start_server(self) -> None:
        """Start (or start again) the process on the same port and directory."""
        if self._process is not None and self._process.poll() is None:
            return
        binary = tool_path("versitygw")
        assert self.base_dir is not None
        self._process = spawn_logged(
            [
                str(binary),
                f"--port={self.host}:{self.port}",
                f"--region={REGION}",
                # A throw-away test credential: on the command line is fine.
                f"--access={self.access_key}",
                f"--secret={self.secret_key}",
                "--quiet",
                "posix",
                f"--sidecar={self.base_dir / 'sidecar'}",
                str(self.root),
            ],
            self.base_dir / "versitygw.log",
            append=True,
        )
        wait_until(
            self._answers,
            timeout=30,
            what="versitygw to answer on " + self.endpoint,
            failed=self._exit_reason,
        )

    def stop_server(self) -> None:
        """Stop the process; the objects stay in the directory for `start_server`."""
        if self._process is not None:
            terminate(self._process)
            self._process = None

    def _answers(self) -> bool:
        # Any HTTP answer (an unsigned request gets 403) means the listener is up.
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def _exit_reason(self) -> str | None:
        if self._process is None or self._process.poll() is None:
            return None
        assert self.base_dir is not None
        log = (self.base_dir / "versitygw.log").read_text(errors="replace")[-2000:]
        return f"versitygw exited with code {self._process.returncode}: {log}"

    def object_path(self, bucket: str, key: str) -> Path:
        """Where the server keeps object `key` of `bucket` on disk."""
        return self.root / bucket / key

    def objects(self, bucket: str) -> list[Path]:
        """The files of the objects in `bucket`, sorted (the server's own temporary files, in
        hidden folders, left out)."""
        folder = self.root / bucket
        return sorted(
            path
            for path in folder.rglob("*")
            if path.is_file()
            and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        )

    def stop(self) -> None:
        self.stop_server()
        if self._owned_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> LocalS3Server:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
