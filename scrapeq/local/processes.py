"""Small process primitives shared by the local real parts: ports, readiness polling, teardown."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self


class LocalPartError(RuntimeError):
    """A real part (PostgreSQL, kube-apiserver, Prometheus, Chromium) could not be provided."""


def spawn_logged(
    command: list[str], log_path: Path, *, append: bool = False
) -> subprocess.Popen[bytes]:
    """Start a long-running part with its output in `log_path`, in a session of its own, so
    that stopping it never signals whoever started it and another shell can stop it by pid."""
    log = open(log_path, "ab" if append else "wb")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()


def run_kubectl(
    kubeconfig: Path,
    *arguments: str,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against `kubeconfig`; with `check`, a failure raises LocalPartError with
    kubectl's own message."""
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise LocalPartError(
            f"kubectl {' '.join(arguments)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


@dataclass
class LoggedPart:
    """A local part that is one long-running process: its working directory (`base_dir`; a
    temporary one, made on start and removed on stop, unless given) and its output in
    `<log_name>.log` there, whose tail says why it exited early.

    A part defines `log_name` and `start()`, which calls `_working_dir()` and `_spawn()`; it is
    stopped by `stop()` or by leaving its `with` block.
    """

    log_name: ClassVar[str]
    base_dir: Path | None = field(default=None, kw_only=True)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _owned_dir: bool = field(default=False, init=False)

    def start(self) -> object:
        raise NotImplementedError

    def _working_dir(self) -> Path:
        """The part's directory, made (and owned) now if none was given."""
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix=f"scrapeq-{self.log_name}-"))
            self._owned_dir = True
        return self.base_dir

    @property
    def log_path(self) -> Path:
        if self.base_dir is None:
            raise LocalPartError(f"{self.log_name} has no directory: it was not started")
        return self.base_dir / f"{self.log_name}.log"

    def _spawn(self, command: list[str], *, append: bool = False) -> subprocess.Popen[bytes]:
        """Start the process, its output in `log_path` (appended to with `append`)."""
        self._working_dir()
        self._process = spawn_logged(command, self.log_path, append=append)
        return self._process

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _exit_reason(self) -> str | None:
        """None while the process runs; once it has exited, its code and the log's tail."""
        if self._process is None or self._process.poll() is None or self.base_dir is None:
            return None
        log = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        return f"{self.log_name} exited with code {self._process.returncode}: {log.strip()}"

    def _stop_process(self) -> None:
        """Stop the process (idempotent); the directory stays."""
        if self._process is not None:
            terminate(self._process)
            self._process = None

    def stop(self) -> None:
        """Stop the process (idempotent) and remove the directory if the part made it."""
        self._stop_process()
        if self._owned_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None
            self._owned_dir = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def wait_for_established_crd(kubeconfig: Path, name: str, *, timeout: float = 60) -> None:
    """Wait until CustomResourceDefinition `name` is Established (its resources are served).

    Polled rather than `kubectl wait --for=condition=Established`: that fails at once, rather
    than waits, while a freshly created CRD has no conditions yet.
    """
    established = '{.status.conditions[?(@.type=="Established")].status}'

    def is_established() -> bool:
        result = run_kubectl(
            kubeconfig, "get", "crd", name, "-o", f"jsonpath={established}", check=False
        )
        return result.returncode == 0 and result.stdout.strip() == "True"

    wait_until(is_established, timeout=timeout, what=f"CRD {name} to be Established", interval=0.2)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    failed: Callable[[], str | None] | None = None,
) -> None:
    """Poll `condition` until it is true; raise LocalPartError naming `what` at the deadline.

    `failed`, when given, is asked on every round whether waiting is pointless (for example,
    the process being waited for has exited) and returns the reason.
    """
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if failed is not None:
            reason = failed()
            if reason:
                raise LocalPartError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() >= deadline:
            raise LocalPartError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def terminate(process: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    """Stop a process and its process group: SIGTERM, then SIGKILL after `grace` seconds."""
    if process.poll() is not None:
        return
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)


def terminate_pid(pid: int, *, grace: float = 10.0) -> None:
    """Like `terminate`, for a process we did not start in this Python process."""
    if not pid_alive(pid):
        return
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        _signal_group(pid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers signal 0; treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
