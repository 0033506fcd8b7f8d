"""Chromium's process side: which binary, which switches, every process of a running browser
(to measure its memory and to kill all of it), and `RunningChromium`, one running browser,
which launches and stops itself.

Chromium is started here rather than with `pyppeteer.launch`, then connected to with
`pyppeteer.connect`: `launch` polls for the DevTools endpoint with a blocking `time.sleep`
loop, installs its own SIGINT/SIGTERM handlers (which would defeat the worker's drain), and
kills only the main process. Starting it ourselves puts the whole browser in its own process
group with a private profile directory, so stopping it can kill the group and sweep any process
still running with that profile (the crash handler double-forks out of the group).

The switches that make the worker's egress proxy the browser's only way out live here too; the
proxy itself is egress_proxy.py (docs/worker.md, "The SSRF guard").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import pyppeteer

from .browser_settings import BrowserSettings
from .egress_proxy import Route
from .errors import BrowserUnavailable

logger = logging.getLogger(__name__)

# The real binaries first: Debian's /usr/bin/chromium-headless-shell is a `sh -e` wrapper that
# does not `exec`, so signalling it would leave the browser running. headless-shell starts in a
# third of the time and uses half the memory of full Chromium (0.12 s and ~160 MB against
# 0.36 to 0.47 s and ~310 MB: docs/worker.md, "Measured browser costs").
EXECUTABLE_CANDIDATES: Final = (
    "/usr/lib/chromium/chromium-headless-shell",
    "/usr/bin/chromium-headless-shell",
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium",
)

# Flags for a server-side, unattended browser: nothing phones home, nothing is throttled
# because it is "in the background" (all our tabs are), and /dev/shm (64 MB in containers) is
# not used for shared memory.
CHROMIUM_FLAGS: Final = (
    "--headless",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-hang-monitor",
    "--disable-popup-blocking",
    "--disable-prompt-on-repost",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-features=Translate,MediaRouter,OptimizationHints,InterestFeedContentSuggestions",
    "--metrics-recording-only",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--hide-scrollbars",
)

# The browser's only way out is the worker's egress proxy (egress_proxy.py). Without
# `<-loopback>` Chromium bypasses any proxy for loopback AND link-local (169.254.169.254)
# addresses. UDP never uses a proxy: WebRTC's non-proxied UDP is off (the headless shell honours
# the `force-` switch, full Chromium the other; each ignores the other's) and so is QUIC.
# Measured on Chromium 156: docs/worker.md, "Threat model".
PROXY_BYPASS: Final = "<-loopback>"
EGRESS_FLAGS: Final = (
    f"--proxy-bypass-list={PROXY_BYPASS}",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-quic",
)


def renderer_limit_flags(settings: BrowserSettings) -> tuple[str, ...]:
    """The switches that bound what one renderer may use (docs/worker.md, "Containment")."""
    return (f"--js-flags=--max-old-space-size={settings.js_heap_mb}",)


def find_chromium(preferred: str | None = None) -> str | None:
    """Return the Chromium executable to use: `preferred` if given and executable, else the
    first installed of EXECUTABLE_CANDIDATES, else None."""
    for candidate in ((preferred,) if preferred else ()) + EXECUTABLE_CANDIDATES:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _process_table() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, session id, command line) for every process we can read."""
    table: dict[int, tuple[int, int, bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b") ", 1)[1].split()
            if fields[0] == b"Z":
                continue  # a zombie holds no memory; tini (or we) reap it
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                table[int(entry.name)] = (int(fields[1]), int(fields[3]), cmdline.read())
        except (OSError, IndexError, ValueError):
            continue
    return table


def browser_processes(root_pid: int, profile_marker: str) -> list[int]:
    """Every live process of one browser: the main process, its descendants, its session
    (it is started as a session leader) and anything whose command line names its profile
    (the crash handler double-forks away from its parent)."""
    table = _process_table()
    needle = profile_marker.encode()
    found = {
        pid
        for pid, (_, session, cmdline) in table.items()
        if pid == root_pid or session == root_pid or needle in cmdline
    }
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return sorted(found)


def memory_mb(pids: list[int]) -> float:
    """Proportional set size of `pids` in MiB (shared pages split between sharers)."""
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total_kb += int(line.split()[1])
                        break
        except OSError:
            continue
    return total_kb / 1024


async def kill_group(process: asyncio.subprocess.Process, profile_marker: str) -> None:
    """Kill the browser's process group and any straggler that still uses its profile."""
    # Even when the leader has exited, its children may live on in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await process.wait()
    for pid in browser_processes(process.pid, profile_marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class RunningChromium:
    """One running browser: its process, its pyppeteer connection and its bookkeeping.

    `launch` starts one; `stop` ends it and everything it started."""

    def __init__(
        self, process: asyncio.subprocess.Process, browser: Any, workdir: Path, number: int
    ) -> None:
        self.process = process
        self.browser = browser
        self.workdir = workdir
        self.number = number
        self.pages_served = 0
        self.open_pages = 0
        self.retire_reason: str | None = None
        self.closed = asyncio.Event()
        self.endpoint: str = browser.wsEndpoint
        self.default_route: Route | None = None

    @property
    def profile_dir(self) -> Path:
        return self.workdir / "profile"

    @property
    def stderr_log(self) -> Path:
        """Where the browser's (and its renderers') stderr goes."""
        return self.workdir / "stderr.log"

    @property
    def alive(self) -> bool:
        connection = self.browser._connection
        return self.process.returncode is None and bool(getattr(connection, "_connected", False))

    def process_ids(self) -> list[int]:
        """Every live process of this browser."""
        return browser_processes(self.process.pid, str(self.profile_dir))

    @classmethod
    async def launch(
        cls,
        executable: str,
        settings: BrowserSettings,
        *,
        default_route: Route,
        number: int,
    ) -> RunningChromium:
        """Start Chromium (its own session, a fresh profile, its traffic on `default_route`)
        and connect to it. Raises BrowserUnavailable with the browser's last words when it
        cannot start."""
        try:
            workdir = Path(tempfile.mkdtemp(prefix="scrapeq-chromium-"))
            profile = workdir / "profile"
            profile.mkdir()
        except OSError as error:
            raise BrowserUnavailable(
                f"cannot create Chromium's profile directory: {error}",
                reason="temp_dir_unwritable",
            ) from error
        args = [
            executable,
            *CHROMIUM_FLAGS,
            *(["--no-sandbox"] if settings.no_sandbox or os.geteuid() == 0 else []),
            *settings.extra_args,
            *renderer_limit_flags(settings),
            f"--proxy-server={default_route.url}",
            *EGRESS_FLAGS,
            f"--user-agent={settings.user_agent}",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        stderr_path = workdir / "stderr.log"
        started = time.monotonic()
        stderr = await asyncio.to_thread(open, stderr_path, "wb")
        try:
            # Its own session: the browser and its helpers form one process group we can kill.
            process = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        finally:
            stderr.close()
        try:
            endpoint = await _endpoint(executable, settings, process, profile, stderr_path)
            async with asyncio.timeout(settings.launch_timeout_seconds):
                browser = await pyppeteer.connect(browserWSEndpoint=endpoint, defaultViewport=None)
        except BaseException:
            await kill_group(process, str(profile))
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        chromium = cls(process, browser, workdir, number)
        chromium.default_route = default_route
        logger.info(
            "launched browser %d (%s, pid %d) in %.0f ms",
            number,
            executable,
            process.pid,
            (time.monotonic() - started) * 1000,
        )
        return chromium

    async def stop(self) -> None:
        """End the browser and every process it started, and remove its profile; idempotent.

        It is killed rather than asked to close (`Browser.close`): its profile is thrown away
        with it, so a polite close would only have it write out state nobody reads, and the
        wait for that (about 50 ms) would hold up a recycle and every worker's exit."""
        if self.closed.is_set():
            return
        self.closed.set()
        await kill_group(self.process, str(self.profile_dir))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.browser._connection.dispose()
        shutil.rmtree(self.workdir, ignore_errors=True)


async def _endpoint(
    executable: str,
    settings: BrowserSettings,
    process: asyncio.subprocess.Process,
    profile: Path,
    stderr_path: Path,
) -> str:
    """Wait for Chromium to write DevToolsActivePort (port 0 = it picks a free one)."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + settings.launch_timeout_seconds
    while time.monotonic() < deadline:
        if process.returncode is not None:
            break
        with contextlib.suppress(OSError, ValueError, IndexError):
            lines = port_file.read_text().splitlines()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{int(lines[0])}{lines[1]}"
        await asyncio.sleep(0.01)
    output = await asyncio.to_thread(stderr_path.read_bytes)
    tail = output[-2000:].decode(errors="replace").strip()
    state = (
        f"exited with status {process.returncode}"
        if process.returncode is not None
        else f"did not start within {settings.launch_timeout_seconds:g}s"
    )
    raise BrowserUnavailable(
        f"Chromium ({executable}) {state}: {tail or 'no output'}",
        reason="browser_launch_failed",
    )


__all__ = [
    "CHROMIUM_FLAGS",
    "EGRESS_FLAGS",
    "EXECUTABLE_CANDIDATES",
    "PROXY_BYPASS",
    "RunningChromium",
    "browser_processes",
    "find_chromium",
    "kill_group",
    "memory_mb",
    "renderer_limit_flags",
]
