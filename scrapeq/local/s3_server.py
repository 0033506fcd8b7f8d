"""A real S3 server on loopback: versitygw serving a directory through its posix backend.

versitygw is built from its Go module by tools/build.sh (cached like kube-apiserver). Each
bucket is a directory under the server's root; object metadata lives in a sidecar directory,
so the server needs no extended attributes on the file system it writes to. The server can be
stopped and started again on the same port and directory (`stop_server`, `start_server`), as a
store that goes away for a while and comes back with its objects.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scrapeq_worker.object_store import ObjectStoreConfig

from scrapeq.local.controlplane import tool_path
from scrapeq.local.processes import LoggedPart, free_port, wait_until

# The region the server reports and signs with; any name works as long as clients agree.
REGION = "us-east-1"


@dataclass
class LocalS3Server(LoggedPart):
    """One versitygw process with a root user and the buckets in `buckets`, listening on
    `host` (loopback unless told otherwise: the demo on Pods serves it on the node's pod
    network)."""

    log_name = "versitygw"
    buckets: tuple[str, ...] = ("scrapeq",)
    host: str = "127.0.0.1"
    port: int = 0
    access_key: str = field(default_factory=lambda: "scrapeq-" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def endpoint(self) -> str:
        """The URL clients use (path-style addressing: http://HOST:PORT/BUCKET/KEY)."""
        return f"http://{self.host}:{self.port}"

    @property
    def region(self) -> str:
        return REGION

    def store_config(self, bucket: str, *, prefix: str = "") -> ObjectStoreConfig:
        """How the worker's object-store client reaches `bucket` of this server, as root."""
        return ObjectStoreConfig(
            bucket=bucket,
            endpoint=self.endpoint,
            region=self.region,
            prefix=prefix,
            path_style=True,
            access_key_id=self.access_key,
            secret_access_key=self.secret_key,
        )

    @property
    def root(self) -> Path:
        """The directory the buckets live in: bucket B's object K is the file root/B/K."""
        assert self.base_dir is not None
        return self.base_dir / "root"

    def start(self) -> None:
        """Start the server with its buckets and wait until it answers HTTP."""
        base_dir = self._working_dir()
        self.port = self.port or free_port()
        (base_dir / "sidecar").mkdir(parents=True, exist_ok=True)
        for bucket in self.buckets:
            # The posix backend's bucket is a directory of its root.
            (self.root / bucket).mkdir(parents=True, exist_ok=True)
        self.start_server()

    def start_server(self) -> None:
        """Start (or start again) the process on the same port and directory."""
        if self._running():
            return
        binary = tool_path("versitygw")
        base_dir = self._working_dir()
        self._spawn(
            [
                str(binary),
                f"--port={self.host}:{self.port}",
                f"--region={REGION}",
                # A throw-away test credential: on the command line is fine.
                f"--access={self.access_key}",
                f"--secret={self.secret_key}",
                "--quiet",
                "posix",
                f"--sidecar={base_dir / 'sidecar'}",
                str(self.root),
            ],
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
        self._stop_process()

    def _answers(self) -> bool:
        # Any HTTP answer (an unsigned request gets 403) means the listener is up.
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

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
