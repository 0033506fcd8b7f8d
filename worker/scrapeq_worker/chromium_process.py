"""Chromium's process side: which binary, which switches, and every process of a running
browser (to measure its memory and to kill all of it), and `RunningChromium`, the pool's record
of one running browser. The pool (browser.py) launches it.

The switches that make the worker's egress proxy the browser's only way out live here too; the
proxy itself is egress_proxy.py (docs/worker.md, "The SSRF guard").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .egress_proxy import Route
    from .tab_pool import Context

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
# Switches that would open another way out or change where names resolve; refused in
# extra_args (a clear error beats a silent hole).
FORBIDDEN_EXTRA_ARGS: Final = (
    "--proxy",
    "--no-proxy-server",
    "--host-resolver-rules",
    "--host-rules",
    "--webrtc-ip-handling-policy",
    "--force-webrtc-ip-handling-policy",
    "--enable-quic",
    "--origin-to-force-quic-on",
)


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
    """One running browser: its process, its pyppeteer connection and its bookkeeping."""

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
        # Warm contexts by owner, least recently used first.
        self.idle_contexts: dict[Context, None] = {}
        self.default_route: Route | None = None

    @property
    def profile_dir(self) -> Path:
        return self.workdir / "profile"

    @property
    def alive(self) -> bool:
        connection = self.browser._connection
        return self.process.returncode is None and bool(getattr(connection, "_connected", False))


__all__ = [
    "CHROMIUM_FLAGS",
    "EGRESS_FLAGS",
    "EXECUTABLE_CANDIDATES",
    "FORBIDDEN_EXTRA_ARGS",
    "PROXY_BYPASS",
    "RunningChromium",
    "browser_processes",
    "find_chromium",
    "kill_group",
    "memory_mb",
]
