"""The browser pool: one long-lived headless Chromium per worker process, a warm tab per job.

Launching a browser per job costs about 3 times a new tab in a warm browser (docs/worker.md), so
the worker keeps one Chromium running. This module is the pool's face: it launches, watches,
recycles and stops the browser, and renders one page per call. Its parts:

* browser_settings.py: how Chromium is run (`BrowserSettings`);
* chromium_process.py: the binary, its switches, every process of a running browser, and its
  launch and kill;
* tab_pool.py: browser contexts per owner (the ScrapeJob), their warm tabs and idle contexts;
* request_checks.py: every request a tab makes is paused and checked before Chromium sends it,
  and the main document's response is looked at before it is rendered.

Everything a hostile or broken page can do is contained:

* the browser's only way out is the worker's egress proxy (egress_proxy.py): Chromium runs
  with `--proxy-server` and `--proxy-bypass-list=<-loopback>`, each context has its own proxy
  route, and UDP (WebRTC's non-proxied UDP, QUIC) is off; whatever the proxy refuses on a
  context's route is reported by the job holding that context;
* every operation runs under a timeout; a page stuck in a JavaScript loop is stopped with CDP
  `Runtime.terminateExecution`, a page that never finishes loading (or laying out) times out;
* nothing a page started outlives its job (tab_pool.py closes its popups and workers and
  blanks or closes its tab), its dialogs are dismissed, its renderer is killed when it
  outgrows its memory ceiling (memory_watch.py), and the extraction script copies no more out
  of it than a result can hold (extraction.py);
* a renderer crash (`Inspector.targetCrashed`, pyppeteer's page `error` event) fails only that
  job: pyppeteer's emitter raises on an unhandled `error` event, so each page gets a handler;
* the browser is recycled after `recycle_after_pages` pages, when it stops answering, or when
  its processes still use more than `max_memory_mb` (PSS) after the memory watch did what it
  could; a retired browser finishes its open pages first.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from pyppeteer.errors import NetworkError as PyppeteerNetworkError
from pyppeteer.errors import PageError as PyppeteerPageError
from pyppeteer.errors import PyppeteerError
from pyppeteer.errors import TimeoutError as PyppeteerTimeoutError
from scrapeq_queue.payload import validate_payload

from .browser_settings import (
    CAPTURE_MAX_BYTES,
    SCREENSHOT_MAX_HEIGHT_PX,
    SCREENSHOT_MAX_WIDTH_PX,
    BrowserSettings,
)
from .chromium_process import (
    CHROMIUM_FLAGS,
    EXECUTABLE_CANDIDATES,
    RunningChromium,
    browser_processes,
    find_chromium,
    memory_mb,
)
from .clicked_pages import merge_clicked_pages, same_content
from .egress_proxy import EgressProxy
from .errors import (
    BlockedRequest,
    BrowserUnavailable,
    PermanentFailure,
    RetryLater,
)
from .extraction import (
    BROWSER_EXTRACT_SCRIPT,
    ExtractedPage,
    FieldSpec,
    PageOutcome,
    browser_script_argument,
    page_from_browser,
    parse_fields,
    parse_items,
)
from .http_status import check_status, navigation_failure
from .job_options import JobOptions, LoginOptions, NextOptions, PageStep, page_steps_from_raw
from .memory_watch import MemoryWatch
from .metrics import WorkerMetrics
from .network_guard import NetworkGuard
from .parser_api import PageActions
from .pyppeteer_compat import apply as _repair_pyppeteer
from .pyppeteer_compat import retrieve_exception
from .request_checks import PageWatch, RequestChecks
from .session_cookies import cdp_cookie, merged
from .step_runner import StepFailed, StepRunner
from .tab_pool import Tab, TabPool, terminate_scripts

logger = logging.getLogger(__name__)
_repair_pyppeteer()

# How long a stuck renderer gets to answer a trivial evaluation before it is declared hung.
_PROBE_SECONDS: Final = 1.0
# How soon Chromium answers Runtime.terminateExecution when it stopped a running script (a
# loop: about 6 ms idle). A renderer busy laying out answers when the layout ends, seconds
# later; one that answers later than this is not counted as a stopped script.
_TERMINATE_ANSWER_SECONDS: Final = 0.5
# How much later than the job's deadline pyppeteer's navigation timer may fire (see goto).
_NAVIGATION_TIMER_MARGIN_MS: Final = 2000
# Clicking through "next" pages (next.click) stops when less of the job's time is left than this
# for one more click, settle and read: the pages read so far are the result.
_NEXT_CLICK_RESERVE_SECONDS: Final = 2.0
# A page that navigates itself while it is extracted (a script redirect) is extracted again
# where it lands, this many times at most; one that keeps going is retried
# (`navigated_during_extraction`, docs/worker.md).
MAX_EXTRACT_NAVIGATIONS: Final = 3
# Serialises the document for a parser inside the page: only the first `limit` characters
# cross to the worker, however large the DOM (docs/parsers.md, "The page object").
PAGE_HTML_SCRIPT: Final = """(limit) => {
  const root = document.documentElement;
  const html = root ? root.outerHTML : "";
  const doctype = document.doctype ? "<!DOCTYPE " + document.doctype.name + ">" : "";
  const whole = doctype + html;
  return {html: whole.slice(0, limit), truncated: whole.length > limit};
}"""
# What Chromium answers a Runtime.evaluate whose document went away under it.
_NAVIGATED_AWAY: Final = (
    "Inspected target navigated or closed",
    "Execution context was destroyed",
    "Cannot find context with specified id",
)


class _Landing:
    """Resolves when the page's main frame has committed a new document and that document
    fired its load event: where a page that navigated itself has landed."""

    def __init__(self, page: Any) -> None:
        self._page = page
        self._committed = False
        self.loaded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        page.on("framenavigated", self._on_navigated)
        page.on("load", self._on_load)

    def _on_navigated(self, frame: Any) -> None:
        if frame.parentFrame is None:
            self._committed = True

    def _on_load(self, *_: Any) -> None:
        if self._committed and not self.loaded.done():
            self.loaded.set_result(None)

    def close(self) -> None:
        self._page.remove_listener("framenavigated", self._on_navigated)
        self._page.remove_listener("load", self._on_load)
        self.loaded.cancel()


def _navigated_away(error: BaseException) -> bool:
    return any(text in str(error) for text in _NAVIGATED_AWAY)


class BrowserPool:
    """Renders pages in a shared, self-healing Chromium. Use `async with` or start()/close()."""

    def __init__(
        self,
        settings: BrowserSettings,
        guard: NetworkGuard,
        *,
        on_restart: Callable[[str], None] | None = None,
        on_page_count: Callable[[int], None] | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        """`on_restart(reason)`: a browser was retired; `on_page_count(delta)`: pages open;
        `metrics`: where dismissed dialogs and killed renderers are counted."""
        self.settings = settings
        self._metrics = metrics
        self.guard = guard
        self._on_restart = on_restart
        self._on_page_count = on_page_count
        self._current: RunningChromium | None = None
        self._retired: set[RunningChromium] = set()
        self._launch_lock = asyncio.Lock()
        self._launches = 0
        self._health_task: asyncio.Task[None] | None = None
        self._memory_task: asyncio.Task[None] | None = None
        self.memory = MemoryWatch(
            settings,
            on_kill=(
                (lambda reason: metrics.renderers_killed.labels(reason).inc()) if metrics else None
            ),
        )
        self._closing = False
        self._closers: set[asyncio.Task[None]] = set()
        self.executable = find_chromium(settings.executable)
        self.proxy = EgressProxy(guard, upstream=settings.upstream_proxy)
        self.checks = RequestChecks(guard, max_response_bytes=settings.max_response_bytes)
        self.tabs = TabPool(
            settings,
            self.proxy,
            self.checks,
            retire=self._retire,
            closing=lambda: self._closing,
            on_dialog=(
                (lambda kind: metrics.browser_dialogs.labels(kind).inc()) if metrics else None
            ),
            memory=self.memory,
        )

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
        for task in (self._health_task, self._memory_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._health_task = self._memory_task = None
        self.checks.cancel()
        browsers = list(self._retired) + ([self._current] if self._current else [])
        self._current = None
        self._retired.clear()
        await asyncio.gather(*(self._stop(chromium) for chromium in browsers))
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)
        await self.proxy.close()

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
            pids.extend(chromium.process_ids())
        return pids

    async def _browser(self) -> RunningChromium:
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
            if self._memory_task is None:
                self._memory_task = asyncio.create_task(self._memory_loop(), name="browser-memory")
            return chromium

    def _retire(self, chromium: RunningChromium, reason: str) -> None:
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

    def _maybe_close_retired(self, chromium: RunningChromium) -> None:
        if chromium in self._retired and (chromium.open_pages == 0 or not chromium.alive):
            self._retired.discard(chromium)
            task = asyncio.create_task(self._stop(chromium), name="browser-close")
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    async def _launch(self) -> RunningChromium:
        if self.executable is None:
            raise BrowserUnavailable(
                "no Chromium executable found (looked for "
                + ", ".join(EXECUTABLE_CANDIDATES)
                + "); install Debian's chromium or chromium-headless-shell",
                reason="browser_missing",
            )
        # The default context serves no job: its route lets nothing out. Every job's context
        # gets a route of its own (tab_pool.py).
        default_route = await self.proxy.open_route(refuse_all=True)
        try:
            chromium = await RunningChromium.launch(
                self.executable,
                self.settings,
                default_route=default_route,
                number=self._launches + 1,
            )
        except BaseException:
            await default_route.close()
            raise
        self._launches += 1
        return chromium

    async def _stop(self, chromium: RunningChromium) -> None:
        """Stop a browser and close the routes of its contexts."""
        if chromium.closed.is_set():
            return
        await chromium.stop()
        await self.tabs.forget(chromium)
        if chromium.default_route is not None:
            await chromium.default_route.close()
        logger.info("closed browser %d after %d pages", chromium.number, chromium.pages_served)

    async def _memory_loop(self) -> None:
        """Hold every renderer and browser under its ceiling (memory_watch.py)."""
        while True:
            await asyncio.sleep(self.settings.memory_watch_seconds)
            owned = list(self._retired) + ([self._current] if self._current else [])
            roots = [chromium.process.pid for chromium in owned if chromium.alive]
            if roots:
                await asyncio.to_thread(self.memory.look, roots)

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
            async with asyncio.timeout(self.settings.operation_timeout_seconds):
                await chromium.browser._connection.send("Browser.getVersion")
        except (TimeoutError, PyppeteerNetworkError, ConnectionError):
            self._retire(chromium, "unresponsive")
            return
        used = memory_mb(chromium.process_ids())
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
        owner: str | None = None,
        finish: Finish | None = None,
    ) -> PageOutcome:
        """Load `url` in a warm tab of a browser context of `owner` (the ScrapeJob's uid; jobs
        without one share the anonymous owner's contexts), or of a fresh context with
        `isolate_pages`; apply `options`, extract, and hand the tab back (or close it if
        anything went wrong). `finish(outcome, actions)`, when given, runs before the tab goes
        back, with the live page as parser_api.PageActions (a parser's call).

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
        tab: Tab | None = None
        clean = False
        try:
            try:
                # A job whose credentials change its requests gets a context of its own,
                # closed after it: cookies a site sets for them never reach another job, even
                # of the same owner. (Values its steps type are the owner's login: the
                # cookies it earns serve the owner's later pages.)
                tab = await self.tabs.take_tab(
                    chromium,
                    owner,
                    single_use=options.credentials is not None and options.credentials.for_requests,
                    upstreams=options.upstream_proxies,
                )
            except PyppeteerNetworkError as error:
                self._retire(chromium, "crashed")
                raise BrowserUnavailable(f"browser connection lost: {error}") from error
            tab.jobs += 1
            opened = time.monotonic()
            login_ms: float | None = None
            try:
                login = options.login
                if login is not None and login.identity not in tab.context.logins:
                    await self._log_in(tab, login, options, started)
                    tab.context.logins.add(login.identity)
                    login_ms = round((time.monotonic() - opened) * 1000, 1)
                    opened = time.monotonic()
                outcome = await self._load_and_extract(
                    tab, url, options, follow_selector, started, opened
                )
                if login_ms is not None:
                    outcome.timing_ms["login_ms"] = login_ms
                if options.session_cookies is not None:
                    outcome.cookies = await _session_jar(tab, options, url, outcome.final_url)
                if finish is not None:
                    actions = _LiveActions(self, tab, options, started + options.timeout_seconds)
                    try:
                        await finish(outcome, actions)
                    finally:
                        actions.ended = True
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
                await self.tabs.give_back(tab, clean=clean)
            chromium.open_pages -= 1
            if self._on_page_count is not None:
                self._on_page_count(-1)
            self._maybe_close_retired(chromium)

    async def _log_in(
        self, tab: Tab, login: LoginOptions, options: JobOptions, started: float
    ) -> None:
        """Log the tab's context in: load the login page, run its steps, and see the success
        selector if the login names one; within the job's deadline.

        Raises PermanentFailure(login_failed) when the steps or the success selector fail
        (trying again would repeat the same attempt, and could lock the account),
        RetryLater(login_failed) when the login page cannot be loaded now, and the guard's
        own error for a login page on a forbidden address.
        """
        page = tab.page
        watch = PageWatch(login.url, page.mainFrame._id, options.timeout_seconds)
        tab.watch = watch
        watch.credentials = options.credentials
        watch.block_resources = options.block_resources
        tab.context.route.holder = watch.refused_by_proxy
        deadline = started + options.timeout_seconds
        where = f"login at {login.url}"
        try:
            navigation = page.goto(
                login.url,
                {
                    "waitUntil": "load",
                    "timeout": max(1, int((deadline - time.monotonic()) * 1000))
                    + _NAVIGATION_TIMER_MARGIN_MS,
                },
            )
            try:
                response = await self._bounded(
                    watch, navigation, deadline, page, "load the login page"
                )
            except PyppeteerPageError as error:
                if watch.abort.done():
                    raise watch.abort.result() from error
                raise navigation_failure(login.url, str(error)) from error
            if watch.abort.done():
                raise watch.abort.result()
            status = watch.status if watch.status is not None else getattr(response, "status", None)
            if status is None or status >= 400 or watch.stopped_early:
                raise RetryLater(
                    f"{where} failed: the login page answered HTTP {status} instead of a page",
                    reason="login_failed",
                )
            runner = StepRunner(
                page, lambda work, what: self._bounded(watch, work, deadline, page, what)
            )
            steps = list(login.steps)
            if login.success_selector is not None:
                steps.append(PageStep(action="waitFor", selector=login.success_selector))
            try:
                await runner.run(steps)
            except StepFailed as error:
                if login.success_selector is not None and error.message.startswith(
                    f"step {len(steps) - 1} (waitFor)"
                ):
                    raise PermanentFailure(
                        f"{where} failed: after its steps the page (now {page.url}) showed no "
                        f"{login.success_selector!r} (successSelector)",
                        reason="login_failed",
                    ) from error
                raise PermanentFailure(
                    f"{where} failed: {error.message}", reason="login_failed"
                ) from error
            if watch.abort.done():
                raise watch.abort.result()
        except BlockedRequest:
            raise
        except RetryLater as error:
            if error.reason == "login_failed" or isinstance(error, BrowserUnavailable):
                raise
            raise RetryLater(f"{where} failed: {error.message}", reason="login_failed") from error

    async def _load_and_extract(
        self,
        tab: Tab,
        url: str,
        options: JobOptions,
        follow_selector: str | None,
        started: float,
        opened: float,
    ) -> PageOutcome:
        page = tab.page
        client = tab.client
        watch = PageWatch(url, page.mainFrame._id, options.timeout_seconds)
        tab.watch = watch
        watch.credentials = options.credentials
        watch.block_resources = options.block_resources
        tab.context.route.holder = watch.refused_by_proxy
        deadline = started + options.timeout_seconds
        setup: list[Any] = []
        if options.headers:
            setup.append(
                client.send("Network.setExtraHTTPHeaders", {"headers": dict(options.headers)})
            )
            agent = next((v for k, v in options.headers.items() if k.lower() == "user-agent"), None)
            if agent:
                setup.append(client.send("Network.setUserAgentOverride", {"userAgent": agent}))
        if options.session_cookies:
            # The session's jar (session_pool.py): the context is the page's own (a session's
            # page goes through its proxy in a context of its own), so nothing else sees it.
            setup.append(
                client.send(
                    "Network.setCookies",
                    {"cookies": [cdp_cookie(cookie) for cookie in options.session_cookies]},
                )
            )
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
                raise navigation_failure(url, str(error)) from error
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
                skipped_requests=watch.skipped,
                headers=watch.headers,
            )
        step_reports: list[dict[str, Any]] = []
        if options.steps:
            runner = StepRunner(
                page, lambda work, what: self._bounded(watch, work, deadline, page, what)
            )
            step_reports = await runner.run(options.steps)
            if watch.abort.done():
                raise watch.abort.result()
            stepped = time.monotonic()
            timing["steps_ms"] = round((stepped - loaded) * 1000, 1)
            loaded = stepped
        extracted = await self._extract(
            page, watch, options.read_fields, options, follow_selector, deadline
        )
        pagination: dict[str, Any] | None = None
        if options.next is not None and options.next.click:
            merged, pagination = await self._click_through(
                page, watch, options, options.next, follow_selector, deadline, extracted[0]
            )
            extracted = (merged, extracted[1])
        html = await self._page_html(page, watch, options.html_limit, deadline)
        captures, too_large = await self._captures(page, watch, options.keep, deadline)
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
            skipped_requests=watch.skipped,
            headers=watch.headers,
            html=html[0] if html else None,
            html_truncated=html[1] if html else False,
            steps=step_reports,
            pagination=pagination,
            captures=captures,
            too_large=too_large,
        )

    async def _click_through(
        self,
        page: Any,
        watch: PageWatch,
        options: JobOptions,
        pagination: NextOptions,
        follow_selector: str | None,
        deadline: float,
        first: ExtractedPage,
    ) -> tuple[ExtractedPage, dict[str, Any]]:
        """Read the pages a "next" button shows in turn (next.click): click, let the page
        settle, read it, until the button is gone or disabled, a click changes nothing, the
        chain has next.maxPages pages, or the job's time runs short (what was read is kept)."""
        runner = StepRunner(
            page, lambda work, what: self._bounded(watch, work, deadline, page, what)
        )
        pages = [first]
        end = "max_pages"
        while len(pages) < pagination.max_pages:
            left = deadline - time.monotonic()
            if left < _NEXT_CLICK_RESERVE_SECONDS:
                end = "timeout"
                break
            try:
                state = await runner.click_next(
                    pagination.selector,
                    settle_seconds=min(
                        pagination.settle_seconds, left - _NEXT_CLICK_RESERVE_SECONDS
                    ),
                )
            except TimeoutError:
                end = "timeout"
                break
            if watch.abort.done():
                raise watch.abort.result()
            if state in ("gone", "disabled"):
                end = "last_page"
                break
            if state == "unchanged":
                end = "unchanged"
                break
            shown = (
                await self._extract(
                    page, watch, options.read_fields, options, follow_selector, deadline
                )
            )[0]
            if same_content(shown, pages[-1]):
                end = "unchanged"
                break
            pages.append(shown)
        merged = merge_clicked_pages(pages, self.settings.max_links)
        return merged, {"click": True, "pages": len(pages), "end": end}

    async def _extract(
        self,
        page: Any,
        watch: PageWatch,
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
            max_result_bytes=options.result_chars or self.settings.max_result_bytes,
            next_selector=options.next.selector if options.next else None,
            text_sample=options.text_sample,
            items=options.items,
            document_html_chars=self.settings.max_response_bytes if options.structured_data else 0,
            text_chars=options.text_chars,
        )
        # One Runtime.evaluate round trip (pyppeteer's evaluate takes three).
        expression = f"({BROWSER_EXTRACT_SCRIPT.strip()})({json.dumps(argument)})"
        for navigations in range(MAX_EXTRACT_NAVIGATIONS + 1):
            landing = _Landing(page)
            try:
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
                break
            except PyppeteerNetworkError as error:
                if page.isClosed() or not _navigated_away(error):
                    raise
                if navigations == MAX_EXTRACT_NAVIGATIONS:
                    raise RetryLater(
                        f"{watch.url} kept navigating itself while it was extracted (more "
                        f"than {MAX_EXTRACT_NAVIGATIONS} times, last to {page.url})",
                        reason="navigated_during_extraction",
                    ) from error
                # The page navigated itself (a script redirect): extract where it lands.
                await self._bounded(
                    watch, asyncio.shield(landing.loaded), deadline, page, "extract (it navigated)"
                )
            finally:
                landing.close()
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

    async def _page_html(
        self, page: Any, watch: PageWatch, limit: int, deadline: float
    ) -> tuple[str, bool] | None:
        """The rendered document's HTML for a parser: at most `limit` characters leave the page
        (None when no parser asked, `limit` 0)."""
        if limit <= 0:
            return None
        try:
            answer = await self._bounded(
                watch,
                page._client.send(
                    "Runtime.evaluate",
                    {
                        "expression": f"({PAGE_HTML_SCRIPT})({int(limit)})",
                        "returnByValue": True,
                    },
                ),
                deadline,
                page,
                "read the HTML",
            )
        except PyppeteerNetworkError as error:
            if page.isClosed() or not _navigated_away(error):
                raise
            # Its fields are from one document and its HTML would be from another.
            raise RetryLater(
                f"{watch.url} navigated itself while its HTML was read for its parser (to "
                f"{page.url})",
                reason="navigated_during_extraction",
            ) from error
        value = answer.get("result", {}).get("value") or {}
        html = value.get("html")
        if not isinstance(html, str):
            return None
        return html[:limit], bool(value.get("truncated")) or len(html) > limit

    async def _captures(
        self, page: Any, watch: PageWatch, keep: frozenset[str], deadline: float
    ) -> tuple[dict[str, bytes], list[str]]:
        """The screenshot (PNG of the whole page, within SCREENSHOT_MAX_WIDTH_PX by
        SCREENSHOT_MAX_HEIGHT_PX) and PDF the job keeps, within its deadline; a capture over
        its cap is named in the second part."""
        captures: dict[str, bytes] = {}
        too_large: list[str] = []
        wanted = [kind for kind in ("screenshot", "pdf") if kind in keep]
        for kind in wanted:
            if kind == "screenshot":
                metrics = await self._bounded(
                    watch, page._client.send("Page.getLayoutMetrics"), deadline, page, "measure"
                )
                size = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
                width = max(1, min(math.ceil(size.get("width", 0)), SCREENSHOT_MAX_WIDTH_PX))
                height = max(1, min(math.ceil(size.get("height", 0)), SCREENSHOT_MAX_HEIGHT_PX))
                request = page._client.send(
                    "Page.captureScreenshot",
                    {
                        "format": "png",
                        "captureBeyondViewport": True,
                        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
                    },
                )
            else:
                request = page._client.send("Page.printToPDF", {"printBackground": True})
            answer = await self._bounded(watch, request, deadline, page, f"take the {kind}")
            data = base64.b64decode(answer.get("data") or "")
            if len(data) > CAPTURE_MAX_BYTES[kind]:
                too_large.append(kind)
            else:
                captures[kind] = data
        return captures, too_large

    async def _bounded(
        self, watch: PageWatch, awaitable: Any, deadline: float, page: Any, step: str
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
        # pending, a probe can go unanswered on a busy machine too.) A renderer that does not
        # answer is stuck in JavaScript only if Chromium stops a running script at once and the
        # renderer then answers. One laying out or painting a heavy page answers the stop only
        # when that work ends: a timeout too, even when the work happens to end soon after.
        hung = False
        if watch.status is not None and not await self._answers(page):
            stopped = await terminate_scripts(page, within=_TERMINATE_ANSWER_SECONDS)
            hung = stopped and await self._answers(page)
        if hung:
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
            async with asyncio.timeout(_PROBE_SECONDS):
                await page._client.send(
                    "Runtime.evaluate", {"expression": "1", "returnByValue": True}
                )
        except (TimeoutError, PyppeteerNetworkError, PyppeteerTimeoutError):
            return False
        return True


# How long reading a session's jar after its page may take: a few CDP round trips.
_JAR_READ_SECONDS: Final = 5.0


async def _session_jar(
    tab: Tab, options: JobOptions, url: str, final_url: str | None
) -> list[dict[str, Any]] | None:
    """The session's jar after the page: the cookies it started with, with those Chromium now
    holds for the page's URLs laid over them; None (the jar stays as it was) when Chromium
    does not answer in time."""
    urls = list(dict.fromkeys(u for u in (url, final_url) if u))
    try:
        async with asyncio.timeout(_JAR_READ_SECONDS):
            answer = await tab.client.send("Network.getCookies", {"urls": urls})
    except (TimeoutError, PyppeteerNetworkError, PyppeteerError):
        return None
    return merged(options.session_cookies or (), answer.get("cookies") or [])


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


# What a caller runs on a rendered page before its tab goes back (BrowserPool.render): the
# outcome so far, and the live page for a parser.
Finish = Callable[[PageOutcome, PageActions], Awaitable[None]]


class _LiveActions(PageActions):
    """parser_api.PageActions on the tab of the job under way: the same step runner, checks,
    deadline and egress route as the job's own steps; usable only during the parser's call."""

    def __init__(self, pool: BrowserPool, tab: Tab, options: JobOptions, deadline: float) -> None:
        self._pool = pool
        self._tab = tab
        self._options = options
        self._deadline = deadline
        self.ended = False

    def _watch(self) -> PageWatch:
        watch = self._tab.watch
        if self.ended or watch is None:
            raise RuntimeError("page.actions acts on the page only during the parser's call")
        return watch

    def _bounded(self, watch: PageWatch) -> Callable[[Awaitable[Any], str], Awaitable[Any]]:
        page = self._tab.page
        return lambda work, what: self._pool._bounded(watch, work, self._deadline, page, what)

    async def run_steps(self, steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        watch = self._watch()
        raw = [dict(step) if isinstance(step, Mapping) else step for step in steps]
        if any(
            isinstance(step, dict) and ("valueFrom" in step or "sealedValue" in step)
            for step in raw
        ):
            raise ValueError(
                "a parser's steps type literal values: read a secret from the parser image's "
                "environment, not from valueFrom"
            )
        problems = validate_payload({"steps": raw, "timeoutSeconds": self._options.timeout_seconds})
        if problems:
            raise ValueError("; ".join(problems))
        reports = await StepRunner(self._tab.page, self._bounded(watch)).run(
            page_steps_from_raw(raw)
        )
        if watch.abort.done():
            raise watch.abort.result()
        return reports

    async def html(self) -> str | None:
        watch = self._watch()
        limit = self._options.html_limit or self._pool.settings.max_response_bytes
        found = await self._pool._page_html(self._tab.page, watch, limit, self._deadline)
        return found[0] if found else None

    async def extract(
        self,
        extract: Mapping[str, Any] | None = None,
        *,
        items: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        watch = self._watch()
        spec: dict[str, Any] = {}
        if extract is not None:
            spec["extract"] = dict(extract)
        if items is not None:
            spec["items"] = dict(items)
        problems = validate_payload(spec)
        if problems:
            raise ValueError("; ".join(problems))
        items_spec = parse_items(spec.get("items"))
        options = replace(
            self._options,
            wait_for=None,
            next=None,
            items=items_spec,
            fields=parse_fields(spec.get("extract")),
            structured_data=(),
        )
        found, _ = await self._pool._extract(
            self._tab.page, watch, options.fields, options, None, self._deadline
        )
        return {"fields": found.fields, "items": found.items}
