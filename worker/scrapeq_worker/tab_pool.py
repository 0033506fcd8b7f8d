"""Browser contexts and their tabs: one context per owner (a ScrapeJob), used by one job at a
time and kept warm with its tab for the owner's next job (or a fresh context per job with
`isolate_pages`; a job with credentials always gets a context of its own, closed after it).

Each context has its own route through the egress proxy, so whatever the proxy refuses belongs
to the job holding the context. Each tab has its CDP handlers attached once: a renderer crash
fails only the job holding the tab, its paused requests go to the request checks
(request_checks.py) for that job, and its JavaScript dialogs are dismissed and counted.

Nothing a page started outlives its job for long: when the job ends, every other target of its
context (popups, shared and service workers) is closed and the scripts of its dedicated workers
are stopped. A tab kept for the owner's next job keeps its document only while that job may come
at once: the next job's navigation ends it, and a tab no job has taken within
`IDLE_BLANK_SECONDS` is navigated to `about:blank`, which ends its document with its timers,
workers and frames. Whatever an idle tab's document asks of the network meanwhile is refused
(request_checks.py). Blanking only idle tabs keeps a navigation off the path between one job of
an owner and the next (a third of a rendered page's cost when done for every job).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from pyppeteer.browser import BrowserContext
from pyppeteer.errors import NetworkError as PyppeteerNetworkError
from pyppeteer.errors import PageError as PyppeteerPageError

from .browser_settings import BrowserSettings
from .chromium_process import PROXY_BYPASS, RunningChromium
from .egress_proxy import EgressProxy, Route, UpstreamProxy
from .errors import BrowserUnavailable, PermanentFailure, RetryLater
from .memory_watch import MemoryWatch
from .request_checks import FETCH_PATTERNS, PageWatch, RequestChecks

logger = logging.getLogger(__name__)


class Context:
    """A browser context of one owner (a ScrapeJob) with its own proxy route, used by one job
    at a time: its state (cookies, cache, storage, service workers) is never seen by another
    owner's jobs, and whatever the proxy refuses on its route belongs to the job holding it."""

    def __init__(
        self,
        context: Any,
        route: Route,
        owner: str | None,
        chromium: RunningChromium,
        *,
        single_use: bool = False,
    ) -> None:
        self.context = context
        self.route = route
        self.owner = owner
        self.chromium = chromium
        # Closed when its job ends instead of kept warm (a job with credentials).
        self.single_use = single_use
        self.tab: Tab | None = None
        # The logins (LoginOptions.identity) done in this context: its cookies carry them.
        self.logins: set[str] = set()


class Tab:
    """A tab the pool reuses for up to `tab_reuse_pages` jobs of its context's owner; its CDP
    handlers are attached once and report to whichever job currently holds it (`watch`)."""

    def __init__(self, page: Any, context: Context, chromium: RunningChromium) -> None:
        self.page = page
        self.context = context
        self.chromium = chromium
        self.client: Any = page._client
        self.jobs = 0
        self.crashed = False
        self.watch: PageWatch | None = None
        # Blanks the tab once it has been idle for IDLE_BLANK_SECONDS (between jobs only).
        self.blanking: asyncio.Task[None] | None = None
        # Set once that task has begun navigating: from then on it is awaited, never cancelled
        # (a blank cut short could let its load pass for the next job's page).
        self.blank_started = False


# Targets of a context that run on their own once created and are closed with the job.
# Out-of-process iframes belong to a document and end with it; dedicated workers ("worker") do
# too, but only seconds later when they never yield, so their scripts are stopped.
_STRAY_TARGET_TYPES: Final = frozenset({"page", "shared_worker", "service_worker"})
# Workers whose script is stopped before they are closed or left to end (a service worker only
# runs to answer its pages' events: it is closed).
_WORKER_TYPES: Final = frozenset({"worker", "shared_worker"})
# How long ending one left-behind target may take (milliseconds when the browser is healthy).
_END_SECONDS: Final = 1.0
# How long a tab kept warm gets to leave its document for about:blank before it is closed
# instead (milliseconds when the renderer is healthy).
_BLANK_SECONDS: Final = 2.0
# How long a kept tab may sit idle, its document still loaded, before it is blanked. An owner's
# jobs that follow each other take the tab well within it; a spinning page that nobody takes
# stops using the browser's CPU after about this long.
IDLE_BLANK_SECONDS: Final = 0.5
# Retirement reasons of a browser that may not answer a request to close a context.
_UNANSWERING: Final = frozenset({"unresponsive", "crashed"})
# The dialogs Chromium reports (Page.javascriptDialogOpening), the metric's label values.
DIALOG_TYPES: Final = ("alert", "confirm", "prompt", "beforeunload")


class TabPool:
    """Hands out a tab of a context of an owner for one job and takes it back afterwards."""

    def __init__(
        self,
        settings: BrowserSettings,
        proxy: EgressProxy,
        checks: RequestChecks,
        *,
        retire: Callable[[RunningChromium, str], None],
        closing: Callable[[], bool],
        on_dialog: Callable[[str], None] | None = None,
        memory: MemoryWatch | None = None,
    ) -> None:
        self.settings = settings
        self.proxy = proxy
        self.checks = checks
        # Retires a browser that cannot do a tab operation in time (the pool's lifecycle).
        self._retire = retire
        self._closing = closing
        self._on_dialog = on_dialog
        # Explains a crash that was the memory watch's doing (or V8's heap limit).
        self._memory = memory
        # Warm contexts per browser, least recently used first.
        self._idle: dict[RunningChromium, dict[Context, None]] = {}

    async def _take_context(
        self,
        chromium: RunningChromium,
        owner: str | None,
        *,
        single_use: bool = False,
        upstreams: Sequence[UpstreamProxy] = (),
    ) -> Context:
        """An idle context of `owner` (the most recently used), or a new one with its own
        proxy route (always new, and closed after its job, when `single_use` or when the job
        brings its own `upstreams`)."""
        single_use = single_use or bool(upstreams)
        if not self.settings.isolate_pages and not single_use:
            idle = self._idle.get(chromium, {})
            for context in reversed(idle):
                if context.owner == owner:
                    del idle[context]
                    return context
        return await self._open_context(chromium, owner, single_use, upstreams)

    async def _open_context(
        self,
        chromium: RunningChromium,
        owner: str | None,
        single_use: bool,
        upstreams: Sequence[UpstreamProxy],
    ) -> Context:
        """A new browser context of `owner` with a proxy route of its own."""
        route = await self.proxy.open_route(upstreams=upstreams)
        try:
            answer = await self._operation(
                chromium,
                chromium.browser._connection.send(
                    "Target.createBrowserContext",
                    {"proxyServer": route.url, "proxyBypassList": PROXY_BYPASS},
                ),
                "open a context",
            )
        except BaseException:
            await route.close()
            raise
        context_id = answer["browserContextId"]
        browser_context = BrowserContext(chromium.browser, context_id)
        chromium.browser._contexts[context_id] = browser_context
        return Context(browser_context, route, owner, chromium, single_use=single_use)

    async def _give_back_context(self, context: Context) -> None:
        """Keep a context warm for its owner's next job (its route's connections cut: nothing
        the job opened outlives it); the least recently used idle context beyond
        `idle_contexts` is closed."""
        chromium = context.chromium
        await context.route.release()
        if not self._keeps(context):
            await self.close_context(context)
            return
        idle = self._idle.setdefault(chromium, {})
        idle[context] = None
        while len(idle) > self.settings.idle_contexts:
            oldest = next(iter(idle))
            del idle[oldest]
            await self.close_context(oldest)

    async def forget(self, chromium: RunningChromium) -> None:
        """Drop the idle contexts of a browser that has stopped, and close their routes."""
        for context in self._idle.pop(chromium, {}):
            if context.tab is not None:
                await _stop_blanking(context.tab)
            await context.route.close()

    async def close_context(self, context: Context) -> None:
        """Close a context's tab, the context (with whatever else runs in it: popups,
        workers) and its route. A browser that stopped answering or is being closed takes its
        contexts with it: no waiting on one that may not answer. One retired for its page
        count or its memory still serves other jobs' pages until they end, so what this job
        started is closed now."""
        if context.tab is not None:
            await _stop_blanking(context.tab)
            await self._close_tab(context.tab)
        chromium = context.chromium
        if chromium.alive and chromium.retire_reason not in _UNANSWERING and not self._closing():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.operation_timeout_seconds):
                    await context.context.close()
        await context.route.close()

    async def take_tab(
        self,
        chromium: RunningChromium,
        owner: str | None,
        *,
        single_use: bool = False,
        upstreams: Sequence[UpstreamProxy] = (),
    ) -> Tab:
        """The warm tab of an idle context of `owner`, or a new one with the pool's handlers
        attached (in a new context when needed; its route through one of `upstreams`, when
        given, instead of the pool's upstream proxy)."""
        context = await self._take_context(
            chromium, owner, single_use=single_use, upstreams=upstreams
        )
        try:
            return await self._tab_of(context)
        except BaseException:
            await self.close_context(context)
            raise

    async def _tab_of(self, context: Context) -> Tab:
        chromium = context.chromium
        if context.tab is not None:
            tab = context.tab
            await _settle_blanking(tab)
        if context.tab is not None:
            tab = context.tab
            if not tab.crashed and not tab.page.isClosed():
                return tab
            await self._close_tab(tab)
        page = await self._operation(chromium, context.context.newPage(), "open a tab")
        tab = Tab(page, context, chromium)
        context.tab = tab
        # pyppeteer raises from emit('error') when nobody listens: a crash would escape into
        # the connection's reader task. This handler turns it into this job's failure only.
        page.on("error", lambda error: self._on_crash(tab, error))
        # Requests are decided for whichever job holds the tab when they pause.
        checks, client = self.checks, tab.client
        client.on("Fetch.requestPaused", lambda event: checks.on_paused(client, tab.watch, event))
        client.on("Network.dataReceived", lambda event: checks.on_data(client, tab.watch, event))
        client.on("Page.javascriptDialogOpening", lambda event: self._dismiss(client, event))
        try:
            await self._operation(
                chromium,
                tab.client.send("Fetch.enable", {"patterns": FETCH_PATTERNS}),
                "enable request checks",
            )
        except BaseException:
            await self._close_tab(tab)
            raise
        return tab

    async def give_back(self, tab: Tab, *, clean: bool) -> None:
        """End everything the job started but its tab's document, then keep its tab (in its
        context, blanked once it stays idle) for the owner's next job only after a clean
        success; close it otherwise. The context goes back either way, without popups or
        workers."""
        tab.watch = None
        context = tab.context
        keep = (
            clean
            and not tab.crashed
            and tab.jobs < self.settings.tab_reuse_pages
            and tab.chromium.alive
            and self._keeps(context)
        )
        if keep:
            # Its workers' scripts too: a document whose dedicated worker never yields is
            # left only when Chromium ends that worker by force, seconds later.
            await self._close_strays(context)
            tab.blank_started = False
            tab.blanking = asyncio.ensure_future(self._blank_when_idle(tab))
        else:
            await self._close_tab(tab)
            if self._keeps(context):
                await self._close_strays(context)
        await self._give_back_context(context)

    async def _blank_when_idle(self, tab: Tab) -> None:
        """Blank a kept tab that no job has taken within IDLE_BLANK_SECONDS, then close what
        its document opened meanwhile; a tab that does not let go is closed instead."""
        await asyncio.sleep(IDLE_BLANK_SECONDS)
        context = tab.context
        if context.tab is not tab or not tab.chromium.alive or self._closing():
            return
        tab.blank_started = True
        try:
            if not await self._blank(tab):
                await self._close_tab(tab)
                return
            await self._close_strays(context, listing=True)
        except Exception:
            logger.exception("unexpected error blanking an idle tab")
            await self._close_tab(tab)

    def _keeps(self, context: Context) -> bool:
        """Whether a context that goes back is kept warm (else it is closed, and everything
        in it with it)."""
        chromium = context.chromium
        return not (
            self.settings.isolate_pages
            or context.single_use
            or not chromium.alive
            or chromium.retire_reason is not None
            or self._closing()
        )

    async def _blank(self, tab: Tab) -> bool:
        """Navigate a kept tab to about:blank: its document, timers, dedicated workers and
        frames end now instead of running on until the owner's next job. False when the
        renderer does not let go in time (the tab is then closed instead)."""
        try:
            async with asyncio.timeout(_BLANK_SECONDS):
                answer = await tab.client.send("Page.navigate", {"url": "about:blank"})
                await _blank_loaded(tab.page, answer.get("loaderId"))
        except (TimeoutError, PyppeteerNetworkError, PyppeteerPageError):
            return False
        return True

    async def _close_strays(self, context: Context, *, listing: bool = False) -> None:
        """Close every target of `context` that runs on its own other than its tab: popups
        (and their popups), shared workers, service workers; and stop the scripts of
        dedicated workers whose document has gone. The browser is asked for the list when
        pyppeteer knows of such a target, or always with `listing`."""
        chromium = context.chromium
        keep = context.tab.page._target._targetId if context.tab is not None else None
        if not listing and not _others_known(chromium, context, keep):
            # pyppeteer learns of every target the browser discovers (Target.targetCreated,
            # the same set Target.getTargets lists): with none besides the tab, the round trip
            # that would list them is saved. One created since is closed with the next job or
            # by the idle blank, whose listing is not skipped.
            return
        try:
            async with asyncio.timeout(self.settings.operation_timeout_seconds / 3):
                answer = await chromium.browser._connection.send("Target.getTargets")
        except (TimeoutError, PyppeteerNetworkError):
            # A browser that cannot list its targets is not fit for the next job either.
            self._retire(chromium, "unresponsive")
            return
        mine = [
            info
            for info in answer.get("targetInfos", ())
            if info.get("browserContextId") == context.context._id and info.get("targetId") != keep
        ]
        connection = chromium.browser._connection
        endings = [
            _end_target(connection, info)
            for info in mine
            if info.get("type") in _STRAY_TARGET_TYPES or info.get("type") in _WORKER_TYPES
        ]
        if endings:
            await asyncio.gather(*endings)

    async def _close_tab(self, tab: Tab) -> None:
        if tab.context.tab is tab:
            tab.context.tab = None
        await self._close_page(tab.chromium, tab.page)

    def _dismiss(self, client: Any, event: dict[str, Any]) -> None:
        """Answer a JavaScript dialog at once, as a user who clicks it away: alert, confirm
        and prompt are dismissed (confirm is false, prompt null); a beforeunload is accepted
        (the page may be left). An open dialog stops the page's scripts and its load, so an
        unanswered one would hold the job until its deadline."""
        kind = event.get("type")
        # The reply future is only watched (pyppeteer_compat marks its error retrieved): a tab
        # that closes meanwhile has no dialog left to answer.
        client.send("Page.handleJavaScriptDialog", {"accept": kind == "beforeunload"})
        if self._on_dialog is not None:
            self._on_dialog(kind if kind in DIALOG_TYPES else "other")

    def _on_crash(self, tab: Tab, error: object) -> None:
        tab.crashed = True
        if tab.watch is None:
            return
        verdict = (
            self._memory.explains_crash(tab.chromium.stderr_log)
            if self._memory is not None
            else None
        )
        if verdict is not None:
            reason, words = verdict
            # Over its own ceiling a page fails for good; killed as the largest of several
            # it may fit another time.
            failure = PermanentFailure if reason == "page_memory" else RetryLater
            tab.watch.fail(failure(f"{tab.watch.url} was stopped: {words}", reason=reason))
            return
        tab.watch.fail(
            RetryLater(
                f"the page's renderer crashed while loading {tab.watch.url}: {error}",
                reason="renderer_crash",
            )
        )

    async def _operation(self, chromium: RunningChromium, awaitable: Any, what: str) -> Any:
        """Run a browser-level operation; a browser that cannot do it in time is retired."""
        try:
            async with asyncio.timeout(self.settings.operation_timeout_seconds):
                return await awaitable
        except TimeoutError as error:
            self._retire(chromium, "unresponsive")
            raise BrowserUnavailable(
                f"browser did not {what} within {self.settings.operation_timeout_seconds:g}s"
            ) from error

    async def _close_page(self, chromium: RunningChromium, page: Any) -> None:
        """Close a tab; if even that hangs, stop its scripts, and if still stuck retire the
        browser (its processes go with it)."""
        if not chromium.alive:
            return
        for attempt in range(2):
            try:
                async with asyncio.timeout(self.settings.operation_timeout_seconds / 3):
                    await _close_target(page)
                return
            except (TimeoutError, PyppeteerNetworkError, PyppeteerPageError):
                if attempt == 0:
                    await terminate_scripts(page)
            except Exception:
                logger.exception("unexpected error closing a tab")
                break
        self._retire(chromium, "unresponsive")


async def _close_target(page: Any) -> None:
    """pyppeteer's page.close() without its flaw: a timeout around page.close() cancels the
    future pyppeteer settles when the target is gone, so a second attempt would end at once
    in CancelledError (and the job with it, unreported). Here that future is only watched."""
    connection = page._client._connection
    if connection is None or page.isClosed():
        return
    await connection.send("Target.closeTarget", {"targetId": page._target._targetId})
    await asyncio.shield(page._target._isClosedPromise)


async def _end_target(connection: Any, info: dict[str, Any]) -> None:
    """End a target a job left behind. A worker's script is stopped first: Chromium asks a
    worker to end and lets one that does not yield run on for seconds before it ends it by
    force. A dedicated worker then ends with its document (`Target.closeTarget` does not apply
    to it); the others are closed."""
    kind = info.get("type")
    if kind in _WORKER_TYPES:
        # A worker on its way out may never answer the attach: it is then left to Chromium.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_END_SECONDS):
                session = await connection.createSession(info)
                try:
                    await session.send("Runtime.terminateExecution")
                finally:
                    with contextlib.suppress(Exception):
                        await session.detach()
    if kind in _STRAY_TARGET_TYPES:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_END_SECONDS):
                await connection.send("Target.closeTarget", {"targetId": info["targetId"]})


async def terminate_scripts(page: Any, *, within: float = 2.0) -> bool:
    """Stop whatever JavaScript the page is running (CDP `Runtime.terminateExecution`);
    whether Chromium answered within `within` seconds.

    Chromium answers once the JavaScript call it stopped returns: within milliseconds for a
    script in a loop, but only after the task ends for a renderer busy laying out a page (no
    JavaScript is running there to stop)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(within):
            await page._client.send("Runtime.terminateExecution")
            return True
    return False


def _others_known(chromium: RunningChromium, context: Context, keep: str | None) -> bool:
    """Whether pyppeteer knows of a target of `context` other than the one `keep`s."""
    context_id = context.context._id
    return any(
        target._targetInfo.get("browserContextId") == context_id and target._targetId != keep
        for target in list(chromium.browser._targets.values())
    )


async def _settle_blanking(tab: Tab) -> None:
    """Before a kept tab serves a job: a blank still waiting is called off (the job's own
    navigation ends the document), one under way is waited for."""
    task, tab.blanking = tab.blanking, None
    if task is None:
        return
    if not task.done() and not tab.blank_started:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return
    # Shielded: a job cancelled while it waits must not cut the blank short.
    await asyncio.shield(task)


async def _stop_blanking(tab: Tab) -> None:
    """Call off a tab's blank, under way or not: the tab is being closed."""
    task, tab.blanking = tab.blanking, None
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _blank_loaded(page: Any, loader_id: str | None) -> None:
    """Return once pyppeteer's view of the page's main frame has the blank document loaded (its
    lifecycle events arrive after Page.navigate answers). The next job's `goto` takes the
    frame's current loader as the one to leave: were the blank's events still on their way, the
    blank's load would pass for the job's page, and the job would extract from about:blank."""
    if not loader_id:
        return
    frame = page.mainFrame
    loaded = asyncio.Event()

    def check(*_: Any) -> None:
        if frame._loaderId == loader_id and "load" in frame._lifecycleEvents:
            loaded.set()

    frames = page._frameManager
    frames.on("lifecycleevent", check)
    try:
        check()
        await loaded.wait()
    finally:
        frames.remove_listener("lifecycleevent", check)
