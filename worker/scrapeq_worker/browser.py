"""The browser pool: one long-lived headless Chromium per worker process, a fresh tab per job.

Launching a browser per job costs about 3 times a new tab in a warm browser (docs/worker.md), so
the worker keeps one Chromium running and opens a tab (or an incognito context, with
`isolate_pages`) for each job. Everything a hostile or broken page can do is contained here:

* every operation runs under a timeout; a page stuck in a JavaScript loop is stopped with CDP
  `Runtime.terminateExecution`, a page that never finishes loading times out;
* a renderer crash (`Inspector.targetCrashed`, pyppeteer's page `error` event) fails only that
  job: pyppeteer's emitter raises on an unhandled `error` event, so each page gets a handler;
* every request the page makes — navigation, each redirect hop, each sub-resource — is paused
  through the CDP `Fetch` domain and checked by the network guard before Chromium connects
  (pyppeteer's own `setRequestInterception` uses a CDP method Chromium removed);
* the main document's response is looked at before it is rendered: error statuses, non-HTML
  content and oversized bodies never reach the renderer;
* the browser is recycled after `recycle_after_pages` pages, when it stops answering, or when
  its processes use more than `max_memory_mb`; a retired browser finishes its open pages first.

Chromium is started here rather than with `pyppeteer.launch`, then connected to with
`pyppeteer.connect`: `launch` polls for the DevTools endpoint with a blocking `time.sleep`
loop, installs its own SIGINT/SIGTERM handlers (which would defeat the worker's drain), and
kills only the main process. Starting it ourselves puts the whole browser in its own process
group with a private profile directory, so closing it can kill the group and sweep any process
still running with that profile (the crash handler double-forks out of the group).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyppeteer
from pyppeteer.errors import NetworkError as PyppeteerNetworkError
from pyppeteer.errors import PageError as PyppeteerPageError
from pyppeteer.errors import TimeoutError as PyppeteerTimeoutError

from .errors import (
    BlockedRequest,
    BrowserUnavailable,
    PermanentFailure,
    RetryLater,
    WorkerError,
)
from .extraction import (
    BROWSER_EXTRACT_SCRIPT,
    DEFAULT_MAX_LINKS,
    ExtractedPage,
    FieldSpec,
    PageOutcome,
    browser_script_argument,
    page_from_browser,
)
from .http_status import check_status, is_html
from .job_options import JobOptions
from .network_guard import NetworkGuard
from .pyppeteer_compat import apply as _repair_pyppeteer
from .pyppeteer_compat import retrieve_exception
from .settings import DEFAULT_USER_AGENT

logger = logging.getLogger(__name__)
_repair_pyppeteer()

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

# How long a stuck renderer gets to answer a trivial evaluation before it is declared hung.
_PROBE_SECONDS: Final = 1.0
# How much later than the job's deadline pyppeteer's navigation timer may fire (see goto).
_NAVIGATION_TIMER_MARGIN_MS: Final = 2000


def find_chromium(preferred: str | None = None) -> str | None:
    """Return the Chromium executable to use: `preferred` if given and executable, else the
    first installed of EXECUTABLE_CANDIDATES, else None."""
    for candidate in ((preferred,) if preferred else ()) + EXECUTABLE_CANDIDATES:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class BrowserSettings:
    """How the pool runs Chromium. The 15 s timeouts follow Crawlee's pool (docs/worker.md)."""

    executable: str | None = None
    # Chromium leaks a little with every page; a fresh browser now and then keeps it bounded
    # (see WorkerSettings.browser_recycle_pages for the cost/benefit of the default).
    recycle_after_pages: int = 500
    # Sum of the proportional memory (PSS) of every process of the browser.
    max_memory_mb: int = 1500
    launch_timeout_seconds: float = 15.0
    # New tab, close tab, health probe: these take milliseconds when the browser is healthy.
    operation_timeout_seconds: float = 15.0
    # One incognito context per job (~51 MB and ~170 ms more per page) instead of a tab.
    isolate_pages: bool = False
    # Jobs one tab serves before it is closed. A new tab costs a renderer process (~200 ms of
    # wall time, ~360 ms CPU: docs/worker.md); navigating a warm tab costs ~80 ms.
    # A tab is only reused after a clean success, and never with isolate_pages. 1 = a new tab
    # for every job.
    tab_reuse_pages: int = 100
    # Everything one page downloads (document plus sub-resources).
    max_response_bytes: int = 10 * 1024 * 1024
    max_links: int = DEFAULT_MAX_LINKS
    health_interval_seconds: float = 10.0
    # Chromium's own sandbox cannot run as root and needs user namespaces otherwise.
    no_sandbox: bool = False
    # Sent by every tab (and navigator.userAgent) unless a job's headers set User-Agent; the
    # same string as the plain-HTTP engine's (settings.user_agent).
    user_agent: str = DEFAULT_USER_AGENT
    extra_args: tuple[str, ...] = ()


class _Chromium:
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
        self.idle_tabs: list[_Tab] = []

    @property
    def profile_dir(self) -> Path:
        return self.workdir / "profile"

    @property
    def alive(self) -> bool:
        connection = self.browser._connection
        return self.process.returncode is None and bool(getattr(connection, "_connected", False))


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


# Every request is checked before it is sent; the main document's response is looked at
# before it is rendered (status, type, size).
_FETCH_PATTERNS: Final = [
    {"urlPattern": "*", "requestStage": "Request"},
    {"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"},
]


class _Tab:
    """A tab the pool reuses for up to `tab_reuse_pages` jobs; its CDP handlers are attached
    once and report to whichever job currently holds it (`watch`)."""

    def __init__(self, page: Any, context: Any, chromium: _Chromium) -> None:
        self.page = page
        self.context = context
        self.chromium = chromium
        self.client: Any = page._client
        self.jobs = 0
        self.crashed = False
        self.watch: _PageWatch | None = None


class _PageWatch:
    """Per-page state the CDP event handlers fill in while the page loads."""

    def __init__(self, url: str, main_frame_id: str, timeout_seconds: float) -> None:
        self.url = url
        self.main_frame_id = main_frame_id
        self.timeout_seconds = timeout_seconds  # the job's whole budget, for messages
        loop = asyncio.get_running_loop()
        # Set (once) by any handler that decides the job must end now.
        self.abort: asyncio.Future[WorkerError] = loop.create_future()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.content_type: str | None = None
        self.content_length: int | None = None
        self.final_url: str = url
        self.stopped_early = False  # the main document was answered without rendering it
        self.blocked: list[dict[str, str]] = []
        self.bytes_received = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def fail(self, error: WorkerError) -> None:
        if not self.abort.done():
            self.abort.set_result(error)


class BrowserPool:
    """Renders pages in a shared, self-healing Chromium. Use `async with` or start()/close()."""

    def __init__(
        self,
        settings: BrowserSettings,
        guard: NetworkGuard,
        *,
        on_restart: Callable[[str], None] | None = None,
        on_page_count: Callable[[int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.guard = guard
        self._on_restart = on_restart
        self._on_page_count = on_page_count
        self._current: _Chromium | None = None
        self._retired: set[_Chromium] = set()
        self._launch_lock = asyncio.Lock()
        self._launches = 0
        self._health_task: asyncio.Task[None] | None = None
        self._closing = False
        self._closers: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.executable = find_chromium(settings.executable)

    async def __aenter__(self) -> BrowserPool:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the browser now instead of on the first page (health checks start with it)."""
        await self._browser()

    async def close(self) -> None:
        """Close every browser this pool started and remove their profiles; idempotent."""
        self._closing = True
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        for task in list(self._background):
            task.cancel()
        browsers = list(self._retired) + ([self._current] if self._current else [])
        self._current = None
        self._retired.clear()
        await asyncio.gather(*(self._stop(chromium) for chromium in browsers))
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)

    @property
    def ready(self) -> bool:
        """True when a healthy browser is running (for /readyz)."""
        current = self._current
        return current is not None and current.alive and current.retire_reason is None

    @property
    def launches(self) -> int:
        return self._launches

    @property
    def debugging_endpoint(self) -> str | None:
        """The current browser's DevTools WebSocket URL (tests use it to crash a renderer)."""
        return self._current.endpoint if self._current else None

    def process_ids(self) -> list[int]:
        """Every process of every browser this pool currently owns."""
        owned = list(self._retired) + ([self._current] if self._current else [])
        pids: list[int] = []
        for chromium in owned:
            pids.extend(browser_processes(chromium.process.pid, str(chromium.profile_dir)))
        return pids

    async def _browser(self) -> _Chromium:
        current = self._current
        if current is not None and current.alive and current.retire_reason is None:
            return current
        async with self._launch_lock:
            current = self._current
            if current is not None and current.alive and current.retire_reason is None:
                return current
            if self._closing:
                raise BrowserUnavailable("the worker is shutting down")
            if current is not None:
                self._retire(current, "crashed")
            chromium = await self._launch()
            self._current = chromium
            if self._health_task is None:
                self._health_task = asyncio.create_task(self._health_loop(), name="browser-health")
            return chromium

    def _retire(self, chromium: _Chromium, reason: str) -> None:
        """Stop giving `chromium` new pages; close it once its open pages are done.

        Only the first retirement of a browser counts (and is reported to `on_restart`).
        """
        if self._current is chromium:
            self._current = None
        if chromium.retire_reason is not None or chromium.closed.is_set():
            return
        chromium.retire_reason = reason
        self._retired.add(chromium)
        if self._on_restart is not None:
            self._on_restart(reason)
        logger.info("retiring browser %d: %s", chromium.number, reason)
        self._maybe_close_retired(chromium)

    def _maybe_close_retired(self, chromium: _Chromium) -> None:
        if chromium in self._retired and (chromium.open_pages == 0 or not chromium.alive):
            self._retired.discard(chromium)
            task = asyncio.create_task(self._stop(chromium), name="browser-close")
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    async def _launch(self) -> _Chromium:
        if self.executable is None:
            raise BrowserUnavailable(
                "no Chromium executable found (looked for "
                + ", ".join(EXECUTABLE_CANDIDATES)
                + "); install Debian's chromium or chromium-headless-shell",
                reason="browser_missing",
            )
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
            self.executable,
            *CHROMIUM_FLAGS,
            *(["--no-sandbox"] if self.settings.no_sandbox or os.geteuid() == 0 else []),
            *self.settings.extra_args,
            f"--user-agent={self.settings.user_agent}",
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
            endpoint = await self._endpoint(process, profile, stderr_path)
            browser = await asyncio.wait_for(
                pyppeteer.connect(browserWSEndpoint=endpoint, defaultViewport=None),
                self.settings.launch_timeout_seconds,
            )
        except BaseException:
            await _kill_group(process, str(profile))
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        self._launches += 1
        chromium = _Chromium(process, browser, workdir, self._launches)
        logger.info(
            "launched browser %d (%s, pid %d) in %.0f ms",
            chromium.number,
            self.executable,
            process.pid,
            (time.monotonic() - started) * 1000,
        )
        return chromium

    async def _endpoint(
        self, process: asyncio.subprocess.Process, profile: Path, stderr_path: Path
    ) -> str:
        """Wait for Chromium to write DevToolsActivePort (port 0 = it picks a free one)."""
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.settings.launch_timeout_seconds
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
            else f"did not start within {self.settings.launch_timeout_seconds:g}s"
        )
        raise BrowserUnavailable(
            f"Chromium ({self.executable}) {state}: {tail or 'no output'}",
            reason="browser_launch_failed",
        )

    async def _stop(self, chromium: _Chromium) -> None:
        """Close the browser politely, then make sure no process of it is left."""
        if chromium.closed.is_set():
            return
        chromium.closed.set()
        connection = chromium.browser._connection
        if chromium.alive:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.send("Browser.close"), 5.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.dispose(), 2.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(chromium.process.wait(), 5.0)
        await _kill_group(chromium.process, str(chromium.profile_dir))
        shutil.rmtree(chromium.workdir, ignore_errors=True)
        logger.info("closed browser %d after %d pages", chromium.number, chromium.pages_served)

    async def _health_loop(self) -> None:
        """Retire a browser that stops answering or outgrows its memory limit."""
        while True:
            await asyncio.sleep(self.settings.health_interval_seconds)
            await self.check_health()

    async def check_health(self) -> None:
        """Probe the current browser once (answering? memory under the limit?)."""
        chromium = self._current
        if chromium is None or chromium.retire_reason is not None:
            return
        if not chromium.alive:
            self._retire(chromium, "crashed")
            return
        try:
            await asyncio.wait_for(
                chromium.browser._connection.send("Browser.getVersion"),
                self.settings.operation_timeout_seconds,
            )
        except (TimeoutError, PyppeteerNetworkError, ConnectionError):
            self._retire(chromium, "unresponsive")
            return
        used = memory_mb(browser_processes(chromium.process.pid, str(chromium.profile_dir)))
        if used > self.settings.max_memory_mb:
            logger.warning(
                "browser %d uses %.0f MB (limit %d)",
                chromium.number,
                used,
                self.settings.max_memory_mb,
            )
            self._retire(chromium, "memory")

    # --- one page ----------------------------------------------------------------------------

    async def render(
        self,
        url: str,
        options: JobOptions,
        *,
        follow_selector: str | None = None,
    ) -> PageOutcome:
        """Load `url` in a warm tab (or a fresh incognito context with `isolate_pages`), apply
        `options`, extract, and hand the tab back (or close it if anything went wrong).

        Raises a WorkerError subclass for every failure: BlockedRequest (guard), RetryLater
        (timeouts, crashes, 5xx, 429/503 with the site's delay), PermanentFailure (4xx, script
        hang, too large), BadInput (invalid selector), BrowserUnavailable.
        """
        self.guard.check_scheme(url)
        # Resolve and check before any tab is touched: a blocked URL costs no browser work.
        await self.guard.check_url(url)
        started = time.monotonic()
        chromium = await self._browser()
        chromium.open_pages += 1
        chromium.pages_served += 1
        if chromium.pages_served >= self.settings.recycle_after_pages:
            # Its last page: no new page goes to this browser; it closes after its open ones.
            self._retire(chromium, "page_limit")
        if self._on_page_count is not None:
            self._on_page_count(1)
        tab: _Tab | None = None
        clean = False
        try:
            try:
                tab = await self._take_tab(chromium)
            except PyppeteerNetworkError as error:
                self._retire(chromium, "crashed")
                raise BrowserUnavailable(f"browser connection lost: {error}") from error
            tab.jobs += 1
            opened = time.monotonic()
            try:
                outcome = await self._load_and_extract(
                    tab, url, options, follow_selector, started, opened
                )
            except (PyppeteerNetworkError, ConnectionError) as error:
                # The tab's session or the whole browser connection went away mid-page.
                if not chromium.alive:
                    self._retire(chromium, "crashed")
                raise BrowserUnavailable(
                    f"lost the browser while loading {url}: {error}"
                ) from error
            clean = outcome.extracted is not None and not options.headers
            return outcome
        finally:
            if tab is not None:
                await self._give_back(tab, clean=clean)
            chromium.open_pages -= 1
            if self._on_page_count is not None:
                self._on_page_count(-1)
            self._maybe_close_retired(chromium)

    async def _take_tab(self, chromium: _Chromium) -> _Tab:
        """An idle warm tab of `chromium`, or a new one with the pool's handlers attached."""
        while chromium.idle_tabs:
            tab = chromium.idle_tabs.pop()
            if not tab.crashed and not tab.page.isClosed():
                return tab
            await self._close_tab(tab)
        context: Any = None
        if self.settings.isolate_pages:
            context = await self._operation(
                chromium, chromium.browser.createIncognitoBrowserContext(), "open a context"
            )
        try:
            page = await self._operation(
                chromium, (context or chromium.browser).newPage(), "open a tab"
            )
        except BaseException:
            if context is not None:
                await _quietly(asyncio.wait_for(context.close(), 5.0))
            raise
        tab = _Tab(page, context, chromium)
        # pyppeteer raises from emit('error') when nobody listens: a crash would escape into
        # the connection's reader task. This handler turns it into this job's failure only.
        page.on("error", lambda error: self._on_crash(tab, error))
        tab.client.on("Fetch.requestPaused", lambda event: self._on_paused(tab, event))
        tab.client.on("Network.dataReceived", lambda event: self._on_data(tab, event))
        tab.client.on("Network.responseReceived", lambda event: self._on_response(tab, event))
        try:
            await self._operation(
                chromium,
                tab.client.send("Fetch.enable", {"patterns": _FETCH_PATTERNS}),
                "enable request checks",
            )
        except BaseException:
            await self._close_tab(tab)
            raise
        return tab

    async def _give_back(self, tab: _Tab, *, clean: bool) -> None:
        """Keep a tab for the next job only after a clean success; close it otherwise."""
        tab.watch = None
        chromium = tab.chromium
        if (
            clean
            and tab.context is None
            and not tab.crashed
            and tab.jobs < self.settings.tab_reuse_pages
            and chromium.alive
            and chromium.retire_reason is None
            and not self._closing
        ):
            chromium.idle_tabs.append(tab)
            return
        await self._close_tab(tab)

    async def _close_tab(self, tab: _Tab) -> None:
        await self._close_page(tab.chromium, tab.page)
        if tab.context is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(tab.context.close(), self.settings.operation_timeout_seconds)

    def _on_crash(self, tab: _Tab, error: object) -> None:
        tab.crashed = True
        if tab.watch is not None:
            tab.watch.fail(
                RetryLater(
                    f"the page's renderer crashed while loading {tab.watch.url}: {error}",
                    reason="renderer_crash",
                )
            )

    def _on_paused(self, tab: _Tab, event: Mapping[str, Any]) -> None:
        watch = tab.watch
        if watch is None:
            # An idle tab: whatever the previous page's leftover scripts ask for is refused.
            task = asyncio.ensure_future(
                _quietly(
                    tab.client.send(
                        "Fetch.failRequest",
                        {"requestId": event["requestId"], "errorReason": "Aborted"},
                    )
                )
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self._spawn(watch, self._paused(tab.client, watch, event))

    def _on_data(self, tab: _Tab, event: Mapping[str, Any]) -> None:
        if tab.watch is not None:
            self._count_bytes(tab.client, tab.watch, event)

    def _on_response(self, tab: _Tab, event: Mapping[str, Any]) -> None:
        if tab.watch is not None:
            self._check_remote(tab.watch, event)

    async def _operation(self, chromium: _Chromium, awaitable: Any, what: str) -> Any:
        """Run a browser-level operation; a browser that cannot do it in time is retired."""
        try:
            return await asyncio.wait_for(awaitable, self.settings.operation_timeout_seconds)
        except TimeoutError as error:
            self._retire(chromium, "unresponsive")
            raise BrowserUnavailable(
                f"browser did not {what} within {self.settings.operation_timeout_seconds:g}s"
            ) from error

    async def _load_and_extract(
        self,
        tab: _Tab,
        url: str,
        options: JobOptions,
        follow_selector: str | None,
        started: float,
        opened: float,
    ) -> PageOutcome:
        page = tab.page
        client = tab.client
        watch = _PageWatch(url, page.mainFrame._id, options.timeout_seconds)
        tab.watch = watch
        deadline = started + options.timeout_seconds
        setup: list[Any] = []
        if options.headers:
            setup.append(
                client.send("Network.setExtraHTTPHeaders", {"headers": dict(options.headers)})
            )
            agent = next((v for k, v in options.headers.items() if k.lower() == "user-agent"), None)
            if agent:
                setup.append(client.send("Network.setUserAgentOverride", {"userAgent": agent}))
        if setup:
            await self._bounded(watch, asyncio.gather(*setup), deadline, page, "prepare the tab")

        navigation = page.goto(
            url,
            {
                "waitUntil": options.wait_until,
                # Later than the job's deadline on purpose: `_bounded` must be the one to time
                # out, because it tells a hung renderer from a slow page and reports `timeout`.
                # pyppeteer's own timer firing first would surface as an unexplained error.
                "timeout": max(1, int((deadline - time.monotonic()) * 1000))
                + _NAVIGATION_TIMER_MARGIN_MS,
            },
        )
        try:
            response = await self._bounded(watch, navigation, deadline, page, "load")
        except PyppeteerPageError as error:
            # The main request failed: our own Fetch decisions explain it better than
            # Chromium's net::ERR_* text, so they win when present.
            if watch.abort.done():
                raise watch.abort.result() from error
            if watch.stopped_early:
                response = None
            else:
                raise RetryLater(
                    f"could not load {url}: {error}", reason="network_error"
                ) from error
        loaded = time.monotonic()
        if watch.abort.done():
            raise watch.abort.result()
        if response is not None and watch.status is None:
            watch.status = response.status
            watch.headers = {k.lower(): v for k, v in (response.headers or {}).items()}
            watch.content_type = watch.headers.get("content-type")
        check_status(watch.status, watch.headers, url=url)
        timing = {
            "open_ms": round((opened - started) * 1000, 1),
            "load_ms": round((loaded - opened) * 1000, 1),
        }
        if watch.stopped_early:
            # Non-HTML content: recorded, not rendered.
            timing["total_ms"] = round((time.monotonic() - started) * 1000, 1)
            return PageOutcome(
                url=url,
                final_url=watch.final_url,
                status=watch.status,
                content_type=watch.content_type,
                extracted=None,
                timing_ms=timing,
                blocked_requests=watch.blocked,
                content_length=watch.content_length,
            )
        extracted = await self._extract(
            page, watch, options.fields, options, follow_selector, deadline
        )
        finished = time.monotonic()
        timing["extract_ms"] = round((finished - loaded) * 1000, 1)
        timing["total_ms"] = round((finished - started) * 1000, 1)
        return PageOutcome(
            url=url,
            final_url=extracted[1] or page.url or url,
            status=watch.status,
            content_type=watch.content_type,
            extracted=extracted[0],
            timing_ms=timing,
            blocked_requests=watch.blocked,
        )

    async def _extract(
        self,
        page: Any,
        watch: _PageWatch,
        fields: tuple[FieldSpec, ...],
        options: JobOptions,
        follow_selector: str | None,
        deadline: float,
    ) -> tuple[ExtractedPage, str | None]:
        argument = browser_script_argument(
            fields,
            wait_for=options.wait_for,
            wait_for_ms=max(0, int((deadline - time.monotonic()) * 1000) - 200),
            follow_selector=follow_selector,
            max_links=self.settings.max_links,
        )
        # One Runtime.evaluate round trip (pyppeteer's evaluate takes three).
        expression = f"({BROWSER_EXTRACT_SCRIPT.strip()})({json.dumps(argument)})"
        answer = await self._bounded(
            watch,
            page._client.send(
                "Runtime.evaluate",
                {"expression": expression, "awaitPromise": True, "returnByValue": True},
            ),
            deadline,
            page,
            "extract",
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise RetryLater(f"extraction failed on {watch.url}: {text}", reason="extract_error")
        raw = answer.get("result", {}).get("value") or {}
        if raw.get("waitForTimedOut"):
            raise RetryLater(
                f"waitFor selector {options.wait_for!r} did not appear on {watch.url} within "
                f"{options.timeout_seconds:g}s",
                reason="wait_for_timeout",
            )
        if raw.get("finalUrl"):
            watch.final_url = raw["finalUrl"]
        if raw.get("contentType"):
            watch.content_type = watch.content_type or raw["contentType"]
        page = page_from_browser(raw, page_url=watch.final_url, max_links=self.settings.max_links)
        return page, raw.get("finalUrl")

    async def _bounded(
        self, watch: _PageWatch, awaitable: Any, deadline: float, page: Any, step: str
    ) -> Any:
        """Await `awaitable` until the job's deadline, or until a handler aborts the page.

        On timeout, tells a hung renderer (no answer to a trivial evaluation) from a slow page
        and stops the former's JavaScript so the tab can be closed.
        """
        work = asyncio.ensure_future(awaitable)
        # When the job is stopped from outside (a drain, a lost lease) the operation stops with
        # it, and however it ends is not logged as an exception never retrieved.
        work.add_done_callback(retrieve_exception)
        remaining = max(0.0, deadline - time.monotonic())
        try:
            done, _ = await asyncio.wait(
                {work, watch.abort}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            work.cancel()
            raise
        if work in done and not watch.abort.done():
            return work.result()
        # A handler's verdict (crash, blocked navigation, too large) explains the failure
        # better than whatever the interrupted operation raised.
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        if watch.abort.done():
            raise watch.abort.result()
        # Until the server has answered the document there is no script of its to hang: a slow
        # server is a timeout to retry, never a page to give up on. (While a navigation is
        # pending, a probe can go unanswered on a busy machine too.)
        hung = watch.status is not None and not await self._answers(page)
        if hung:
            await self._terminate_scripts(page)
            raise PermanentFailure(
                f"the page's JavaScript never yielded while trying to {step} {watch.url}; it "
                "was stopped (Runtime.terminateExecution)",
                reason="script_hang",
            )
        raise RetryLater(
            f"timed out trying to {step} {watch.url}: the job's {watch.timeout_seconds:g}s "
            "timeout ran out",
            reason="timeout",
        )

    @staticmethod
    async def _answers(page: Any) -> bool:
        try:
            await asyncio.wait_for(
                page._client.send("Runtime.evaluate", {"expression": "1", "returnByValue": True}),
                _PROBE_SECONDS,
            )
        except (TimeoutError, PyppeteerNetworkError, PyppeteerTimeoutError):
            return False
        return True

    @staticmethod
    async def _terminate_scripts(page: Any) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(page._client.send("Runtime.terminateExecution"), 2.0)

    async def _close_page(self, chromium: _Chromium, page: Any) -> None:
        """Close a tab; if even that hangs, stop its scripts, and if still stuck retire the
        browser (its processes go with it)."""
        if not chromium.alive:
            return
        for attempt in range(2):
            try:
                await asyncio.wait_for(page.close(), self.settings.operation_timeout_seconds / 3)
                return
            except (TimeoutError, PyppeteerNetworkError, PyppeteerPageError):
                if attempt == 0:
                    await self._terminate_scripts(page)
            except Exception:
                logger.exception("unexpected error closing a tab")
                break
        self._retire(chromium, "unresponsive")

    @staticmethod
    def _spawn(watch: _PageWatch, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        watch.tasks.add(task)
        task.add_done_callback(watch.tasks.discard)

    async def _paused(self, client: Any, watch: _PageWatch, event: Mapping[str, Any]) -> None:
        """Decide one paused request: check it with the guard (request stage) or look at the
        main document's response before it is rendered (response stage)."""
        request_id = event["requestId"]
        request_url: str = event["request"]["url"]
        is_main = event.get("resourceType") == "Document" and event.get("frameId") == (
            watch.main_frame_id
        )
        try:
            if "responseStatusCode" in event or "responseErrorReason" in event:
                await self._paused_response(client, watch, event, request_id, request_url)
                return
            try:
                await self.guard.check_url(request_url)
            except (BlockedRequest, RetryLater) as refusal:
                if is_main:
                    watch.fail(refusal)
                else:
                    watch.blocked.append(
                        {
                            "url": request_url[:500],
                            "reason": refusal.reason,
                            "error": refusal.message[:500],
                        }
                    )
                await client.send(
                    "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}
                )
                return
            await client.send("Fetch.continueRequest", {"requestId": request_id})
        except (PyppeteerNetworkError, ConnectionError):
            pass  # the tab closed while we decided; nothing left to answer

    async def _paused_response(
        self,
        client: Any,
        watch: _PageWatch,
        event: Mapping[str, Any],
        request_id: str,
        request_url: str,
    ) -> None:
        if event.get("frameId") != watch.main_frame_id:
            await client.send("Fetch.continueRequest", {"requestId": request_id})
            return
        status = event.get("responseStatusCode")
        headers = {h["name"].lower(): h["value"] for h in event.get("responseHeaders") or []}
        if status is not None and 300 <= status < 400 and "location" in headers:
            # The next hop arrives as a new paused request and is checked then.
            await client.send("Fetch.continueRequest", {"requestId": request_id})
            return
        watch.status = status
        watch.headers = headers
        watch.final_url = request_url
        watch.content_type = headers.get("content-type")
        length = headers.get("content-length")
        watch.content_length = int(length) if length and length.isdigit() else None
        stop = False
        if status is not None and status >= 400:
            stop = True  # the status decides the job; there is nothing worth rendering
        elif watch.content_length is not None and watch.content_length > (
            self.settings.max_response_bytes
        ):
            watch.fail(self._too_large(request_url))
            stop = True
        elif watch.content_type and not is_html(watch.content_type):
            stop = True  # PDFs, images, JSON...: recorded, not rendered
        if stop:
            watch.stopped_early = True
            await client.send(
                "Fetch.failRequest", {"requestId": request_id, "errorReason": "Aborted"}
            )
        else:
            await client.send("Fetch.continueRequest", {"requestId": request_id})

    def _too_large(self, url: str) -> PermanentFailure:
        return PermanentFailure(
            f"{url} is larger than the {self.settings.max_response_bytes}-byte page limit",
            reason="response_too_large",
        )

    def _count_bytes(self, client: Any, watch: _PageWatch, event: Mapping[str, Any]) -> None:
        watch.bytes_received += max(
            int(event.get("dataLength", 0)), int(event.get("encodedDataLength", 0))
        )
        if watch.bytes_received > self.settings.max_response_bytes and not watch.abort.done():
            watch.fail(self._too_large(watch.url))
            self._spawn(watch, _quietly(client.send("Page.stopLoading")))

    def _check_remote(self, watch: _PageWatch, event: Mapping[str, Any]) -> None:
        """Defence in depth against DNS rebinding: Chromium resolves names itself, so look at
        the address it actually connected to."""
        address = (event.get("response") or {}).get("remoteIPAddress")
        if not address:
            return
        try:
            parsed = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return
        try:
            self.guard.check_address(parsed, url=(event.get("response") or {}).get("url", "?"))
        except BlockedRequest as refusal:
            if event.get("type") == "Document" and event.get("frameId") == watch.main_frame_id:
                watch.fail(refusal)
            else:
                watch.blocked.append(
                    {
                        "url": str(event.get("response", {}).get("url"))[:500],
                        "reason": refusal.reason,
                        "error": refusal.message[:500],
                    }
                )


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable


async def _kill_group(process: asyncio.subprocess.Process, profile_marker: str) -> None:
    """Kill the browser's process group and any straggler that still uses its profile."""
    # Even when the leader has exited, its children may live on in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 5.0)
    for pid in browser_processes(process.pid, profile_marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


__all__ = [
    "CHROMIUM_FLAGS",
    "EXECUTABLE_CANDIDATES",
    "BrowserPool",
    "BrowserSettings",
    "PageOutcome",
    "browser_processes",
    "find_chromium",
    "memory_mb",
]
