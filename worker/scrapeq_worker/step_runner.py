"""Runs a job's page steps (payload `steps`) on a loaded tab, in order, before it is read.

Each step is a fixed action on elements named by CSS selectors (scrapeq_queue.page_steps); it
drives the tab through pyppeteer and CDP, never through code the job supplied. Every step has
its own timeout, and the caller's `bounded` holds each one to the job's deadline and stops it
when the page's own checks end the job (a click that navigates to a forbidden address fails
with the guard's reason, exactly as a first navigation would: the same tab, the same checks,
the same egress route).

A step that cannot do its work fails the job with reason `step_failed` (retried like any
temporary failure) and a message naming the step's position and action. A scroll or a "load
more" that reaches its cap is not a failure: it stops and says why in the page's result.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from pyppeteer.errors import ElementHandleError as PyppeteerElementHandleError
from pyppeteer.errors import NetworkError as PyppeteerNetworkError
from pyppeteer.errors import PageError as PyppeteerPageError
from pyppeteer.errors import TimeoutError as PyppeteerTimeoutError
from scrapeq_queue.payload import URLPattern
from scrapeq_queue.sealed_credentials import origin_of

from .errors import BadInput, RetryLater
from .job_options import PageStep

# bounded(awaitable, what): the awaitable's result, or the job's own failure (deadline, guard).
Bounded = Callable[[Awaitable[Any], str], Awaitable[Any]]

# A scroll or "load more" checks its own time between rounds; this much more than its
# timeoutSeconds is allowed for the round under way before the step counts as stuck.
_ROUND_GRACE_SECONDS: Final = 2.0
# How often the page is looked at while a round waits for it to grow.
_POLL_MS: Final = 50
# After the first change a click of "load more" causes, the page must be quiet this long
# before the next click (a spinner, then the items).
_QUIET_MS: Final = 150
# Responses kept for waitForResponse steps that have not matched them yet.
_KEPT_RESPONSES: Final = 1000
# What Chromium answers an evaluation whose document went away under it.
_NAVIGATED_AWAY: Final = (
    "Execution context was destroyed",
    "Cannot find context with specified id",
    "Inspected target navigated or closed",
)
# Chromium's answer while a tab has no document to evaluate in (between two of them).
_NO_CONTEXT: Final = "default execution context"
# An element's wait gives up inside the page after this long and is asked again, so the page
# holds no observer long after its step ended (the step's own timer ends the step).
_ELEMENT_WAIT_MS: Final = 5000
# Selectors and values are quoted in messages up to this many characters.
_QUOTED_CHARS: Final = 80

# One scroll round: scroll to the bottom, then wait (at most settleMs) for the document to grow
# or for more elements to match. Returns whether it grew and how many elements match.
_SCROLL_ROUND: Final = """async (arg) => {
  const root = document.scrollingElement || document.documentElement;
  const count = () => (arg.selector ? document.querySelectorAll(arg.selector).length : 0);
  const height = () => Math.max(root.scrollHeight, document.body ? document.body.scrollHeight : 0);
  const beforeHeight = height();
  const beforeCount = count();
  window.scrollTo(0, beforeHeight);
  const deadline = Date.now() + arg.settleMs;
  let grew = false;
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, arg.pollMs));
    if (height() > beforeHeight || count() > beforeCount) { grew = true; break; }
  }
  return {grew: grew, count: count()};
}"""

# Wait until an element matching a selector is visible (or, `hidden`, until none is), then do
# the little a step needs of the first visible match, all in one evaluation: "point" scrolls it
# into view if it is not wholly there and gives its centre (where the trusted mouse events go),
# "focus" focuses it, "clear" focuses and empties it, "select" chooses the option whose value is
# `value`. Visible means what pyppeteer's waitForSelector means: a computed visibility other
# than hidden and a bounding box that is not all zero. A change to the document wakes the check
# at once; a poll catches what changes without one (a style sheet's rule, the viewport). Gives
# up by itself after timeoutMs, so no observer outlives its step for long.
_ELEMENT: Final = """async (arg) => {
  const visible = (el) => {
    if (!el || !el.isConnected) return false;
    const style = getComputedStyle(el);
    if (!style || style.visibility === 'hidden') return false;
    const r = el.getBoundingClientRect();
    return !!(r.top || r.bottom || r.width || r.height);
  };
  const firstVisible = () => {
    for (const el of document.querySelectorAll(arg.selector)) { if (visible(el)) return el; }
    return null;
  };
  const ready = () => (arg.hidden ? firstVisible() === null : firstVisible() !== null);
  if (!ready()) {
    const appeared = await new Promise((resolve) => {
      let timer = 0;
      let poll = 0;
      const observer = new MutationObserver(() => { if (ready()) finish(true); });
      const finish = (value) => {
        observer.disconnect();
        clearTimeout(timer);
        clearInterval(poll);
        resolve(value);
      };
      observer.observe(document, {childList: true, subtree: true, attributes: true,
                                  characterData: true});
      poll = setInterval(() => { if (ready()) finish(true); }, arg.pollMs);
      timer = setTimeout(() => finish(false), arg.timeoutMs);
    });
    if (!appeared) return {state: 'timeout'};
  }
  if (arg.hidden || !arg.then) return {state: 'ready'};
  const el = firstVisible();
  if (arg.then === 'point') {
    let r = el.getBoundingClientRect();
    if (r.top < 0 || r.left < 0 || r.bottom > innerHeight || r.right > innerWidth) {
      el.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
      r = el.getBoundingClientRect();
    }
    const x = Math.min(Math.max(r.left + r.width / 2, 0), Math.max(innerWidth - 1, 0));
    const y = Math.min(Math.max(r.top + r.height / 2, 0), Math.max(innerHeight - 1, 0));
    return {state: 'ready', x: x, y: y};
  }
  if (arg.then === 'select') {
    if (el.tagName !== 'SELECT') return {state: 'not_select'};
    const option = Array.from(el.options).find((o) => o.value === arg.value);
    if (!option) return {state: 'no_option'};
    el.value = arg.value;
    el.dispatchEvent(new Event('input', {bubbles: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
    return {state: 'ready'};
  }
  el.focus();
  if (arg.then === 'clear') {
    if ('value' in el) { el.value = ''; } else { el.textContent = ''; }
  }
  return {state: 'ready'};
}"""

# The elements matching a selector, counted.
_COUNT: Final = "(arg) => document.querySelectorAll(arg.selector).length"

# One "load more" click: find the button (gone when absent or invisible), wait while it is
# disabled, click it, then wait (at most settleMs) for the document to change and go quiet.
_LOAD_MORE_ROUND: Final = """async (arg) => {
  const sleep = () => new Promise((resolve) => setTimeout(resolve, arg.pollMs));
  const visible = (el) => !!el && el.isConnected && el.getClientRects().length > 0 &&
    getComputedStyle(el).visibility !== 'hidden';
  const deadline = Date.now() + arg.settleMs;
  let button = document.querySelector(arg.selector);
  while (visible(button) && button.disabled && Date.now() < deadline) {
    await sleep();
    button = document.querySelector(arg.selector);
  }
  if (!visible(button)) return {state: 'gone'};
  if (button.disabled) return {state: 'disabled'};
  let changedAt = 0;
  const observer = new MutationObserver(() => { changedAt = Date.now(); });
  observer.observe(document, {childList: true, subtree: true, characterData: true});
  button.scrollIntoView({block: 'center'});
  button.click();
  try {
    while (Date.now() < deadline) {
      await sleep();
      if (changedAt && Date.now() - changedAt >= arg.quietMs) break;
    }
  } finally {
    observer.disconnect();
  }
  return {state: changedAt ? 'clicked' : 'unchanged'};
}"""


class StepFailed(RetryLater):
    """A step could not do its work; the message names the step."""

    default_reason = "step_failed"


def _quoted(text: str) -> str:
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= _QUOTED_CHARS else shown[: _QUOTED_CHARS - 4] + '..."'


class _Requests:
    """What the page's network did since the steps began: the requests in flight (for
    waitForNetworkIdle) and the responses not yet matched by a waitForResponse, so that a
    response a click caused counts even when it arrives before the next step begins.
    `changed` wakes a waiter."""

    def __init__(self, page: Any) -> None:
        self._page = page
        self.in_flight: set[object] = set()
        # (URL, status) of each response, oldest first; a waitForResponse consumes up to its
        # match. The oldest go first past the cap (a page that fetches without end).
        self.responses: collections.deque[tuple[str, int]] = collections.deque(
            maxlen=_KEPT_RESPONSES
        )
        self.changed = asyncio.Event()
        page.on("request", self._started)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)
        page.on("response", self._answered)

    def _answered(self, response: Any) -> None:
        self.responses.append((str(response.url), int(response.status)))
        self.changed.set()

    def take_response(self, pattern: URLPattern) -> tuple[str, int] | None:
        """The first unmatched response whose URL `pattern` matches, with every response
        before it consumed; None (nothing consumed) when there is none yet."""
        for position, (url, status) in enumerate(self.responses):
            if pattern.search(url) is not None:
                for _ in range(position + 1):
                    self.responses.popleft()
                return url, status
        return None

    def _started(self, request: object) -> None:
        self.in_flight.add(request)
        self.changed.set()

    def _ended(self, request: object) -> None:
        self.in_flight.discard(request)
        self.changed.set()

    def close(self) -> None:
        self._page.remove_listener("request", self._started)
        self._page.remove_listener("requestfinished", self._ended)
        self._page.remove_listener("requestfailed", self._ended)
        self._page.remove_listener("response", self._answered)


class StepRunner:
    """Runs the steps of one page; `run` returns what each step reports for the result."""

    def __init__(self, page: Any, bounded: Bounded) -> None:
        self._page = page
        self._bounded = bounded
        # What the step under way is waiting for, for the message if its time runs out.
        self._waiting = ""

    async def run(self, steps: Sequence[PageStep]) -> list[dict[str, Any]]:
        """Run `steps` in order; raise StepFailed (or the job's own failure) at the first
        that fails. Each step's report: its action, its milliseconds, and what it found."""
        reports: list[dict[str, Any]] = []
        requests = _Requests(self._page)
        try:
            for position, step in enumerate(steps):
                started = time.monotonic()
                report = await self._run_one(position, step, requests)
                report["ms"] = round((time.monotonic() - started) * 1000, 1)
                reports.append(report)
        finally:
            requests.close()
        return reports

    async def _run_one(self, position: int, step: PageStep, requests: _Requests) -> dict[str, Any]:
        name = f"step {position} ({step.action})"
        self._waiting = "it did not finish"
        # A scroll or "load more" stops itself when its time is up; the grace is for a round
        # that is under way then.
        limit = step.timeout_seconds + (
            _ROUND_GRACE_SECONDS if step.action in ("scroll", "loadMore") else 0.0
        )
        try:
            report: dict[str, Any] = await self._bounded(
                self._within(limit, self._act(step, requests)), f"run {name} on"
            )
        except TimeoutError as error:
            raise StepFailed(f"{name}: {self._waiting} within {step.timeout_seconds:g}s") from error
        except BadInput as error:
            raise BadInput(f"{name}: {error.message}", reason=error.reason) from error
        except StepFailed as error:
            raise StepFailed(f"{name}: {error.message}") from error
        except (PyppeteerElementHandleError, PyppeteerPageError, PyppeteerTimeoutError) as error:
            if "is not a valid selector" in str(error):
                raise BadInput(
                    f"{name}: invalid CSS selector ({_first_line(error)})", reason="bad_selector"
                ) from error
            raise StepFailed(f"{name}: {_first_line(error)}") from error
        except PyppeteerNetworkError as error:
            if "is not a valid selector" in str(error):
                raise BadInput(
                    f"{name}: invalid CSS selector ({_first_line(error)})", reason="bad_selector"
                ) from error
            if any(text in str(error) for text in _NAVIGATED_AWAY):
                # The page left for another document under the step (an earlier click's
                # navigation): the step did not do its work; the browser is fine.
                raise StepFailed(
                    f"{name}: the page navigated away while the step ran (a click before it "
                    "may need waitForNavigation)"
                ) from error
            raise
        return {"action": step.action, **report}

    @staticmethod
    async def _within(seconds: float, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        async with asyncio.timeout(seconds):
            return await work

    # --- actions ------------------------------------------------------------------------------

    async def _act(self, step: PageStep, requests: _Requests) -> dict[str, Any]:
        page = self._page
        action = step.action
        if action == "scroll":
            return await self._scroll(step)
        if action == "loadMore":
            return await self._load_more(step)
        if action == "waitForResponse":
            return await self._wait_for_response(step, requests)
        if action == "waitForNetworkIdle":
            await self._wait_for_network_idle(step, requests)
            return {}
        if action == "press" and step.selector is None:
            await page.keyboard.press(step.key)
            return {}
        assert step.selector is not None
        if action == "waitFor":
            hidden = step.state == "hidden"
            self._waiting = (
                f"{_quoted(step.selector)} was still visible"
                if hidden
                else f"no visible element matched {_quoted(step.selector)}"
            )
            await self._element(step.selector, hidden=hidden)
            return {}
        if action in ("click", "hover"):
            answer = await self._element(step.selector, then="point")
            point = (float(answer["x"]), float(answer["y"]))
            if action == "hover":
                await self._mouse("mouseMoved", point)
            else:
                await self._click(step, point)
            return {}
        if action == "select":
            answer = await self._element(step.selector, then="select", value=step.value or "")
            if answer["state"] == "not_select":
                raise StepFailed(f"{_quoted(step.selector)} is not a <select> element")
            if answer["state"] == "no_option":
                value = _quoted(step.value or "")
                raise StepFailed(f"{_quoted(step.selector)} has no option with value {value}")
            return {}
        # type, fill, press: the element has the focus, then the keyboard acts.
        await self._element(step.selector, then="clear" if action == "fill" else "focus")
        if action in ("type", "fill") and step.sealed_origins is not None:
            self._check_origin(step.sealed_origins)
        if action == "press":
            await page.keyboard.press(step.key)
        elif action == "type":
            await page.keyboard.type(step.value or "")
        elif action == "fill":
            await page.keyboard.sendCharacter(step.value or "")
        return {}

    def _check_origin(self, origins: tuple[str, ...]) -> None:
        """Refuse to type a sealed value into a page of an origin it was not sealed for (a
        redirect or a click took the tab elsewhere)."""
        here = origin_of(str(self._page.url))
        if here not in origins:
            raise StepFailed(
                f"the page is on {here or 'no http(s) origin'}, and its sealed value is typed "
                f"only on {', '.join(origins) or 'no origin'}"
            )

    async def _element(
        self, selector: str, *, hidden: bool = False, then: str | None = None, value: str = ""
    ) -> dict[str, Any]:
        """Wait, as long as the step's time allows, until an element matching `selector` is
        visible (or, `hidden`, until none is), then do `then` to the first visible one (see
        _ELEMENT) and return what that gave. One evaluation, however long the wait; a wait
        the document's navigation interrupts goes on in the next document, once it has one."""
        if not hidden:
            self._waiting = f"no visible element matched {_quoted(selector)}"
        while True:
            argument = {
                "selector": selector,
                "hidden": hidden,
                "then": then,
                "value": value,
                "pollMs": _POLL_MS,
                "timeoutMs": _ELEMENT_WAIT_MS,
            }
            try:
                answer = await self._evaluate(_ELEMENT, argument)
            except PyppeteerNetworkError as error:
                if not any(text in str(error) for text in (*_NAVIGATED_AWAY, _NO_CONTEXT)):
                    raise
                # Between two documents there is no context to look in for a moment.
                await asyncio.sleep(_POLL_MS / 1000)
                continue
            if answer["state"] != "timeout":
                return dict(answer)

    def _mouse(self, kind: str, point: tuple[float, float], **extra: Any) -> Awaitable[Any]:
        """Send one trusted mouse event at `point` (CSS pixels of the viewport) now; the
        answer comes when the renderer has handled it."""
        answer: Awaitable[Any] = self._page._client.send(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": point[0], "y": point[1], "modifiers": 0, **extra},
        )
        return answer

    async def _click(self, step: PageStep, point: tuple[float, float]) -> None:
        async def click() -> None:
            # Sent together, in order, each answered once handled. A move alone waits for the
            # renderer's next frame (Chromium aligns mouse moves to frames); the press that
            # follows it makes the renderer handle the move at once, a frame (about 16 ms)
            # sooner than waiting for the move's answer before pressing.
            await asyncio.gather(
                self._mouse("mouseMoved", point),
                self._mouse("mousePressed", point, button="left", clickCount=1),
                self._mouse("mouseReleased", point, button="left", clickCount=1),
            )

        if step.wait_for_navigation:
            navigation = asyncio.ensure_future(
                self._page.waitForNavigation({"waitUntil": "load", "timeout": 0})
            )
            try:
                await click()
                self._waiting = "the click started no navigation that finished loading"
                await navigation
            finally:
                navigation.cancel()
            return
        await click()
        if step.wait_for is not None:
            self._waiting = f"after the click, no visible element matched {_quoted(step.wait_for)}"
            await self._element(step.wait_for)

    async def _scroll(self, step: PageStep) -> dict[str, Any]:
        ends = time.monotonic() + step.timeout_seconds
        report: dict[str, Any] = {"rounds": 0}
        argument = {"selector": step.selector, "pollMs": _POLL_MS}
        count = await self._count(step.selector) if step.selector else None
        stopped = "max_rounds"
        while report["rounds"] < step.max_rounds:
            if count is not None and step.count is not None and count >= step.count:
                stopped = "count"
                break
            left = ends - time.monotonic()
            if left <= 0:
                stopped = "timeout"
                break
            round_result = await self._evaluate(
                _SCROLL_ROUND, {**argument, "settleMs": int(min(step.settle_seconds, left) * 1000)}
            )
            report["rounds"] += 1
            count = round_result["count"] if step.selector else None
            if not round_result["grew"]:
                stopped = "timeout" if time.monotonic() >= ends else "end"
                break
        if stopped == "max_rounds" and count is not None and count >= (step.count or count + 1):
            stopped = "count"
        report["stopped"] = stopped
        if count is not None:
            report["count"] = count
        return report

    async def _load_more(self, step: PageStep) -> dict[str, Any]:
        ends = time.monotonic() + step.timeout_seconds
        clicks = 0
        stopped = "max_clicks"
        while clicks < step.max_rounds:
            left = ends - time.monotonic()
            if left <= 0:
                stopped = "timeout"
                break
            answer = await self._evaluate(
                _LOAD_MORE_ROUND,
                {
                    "selector": step.selector,
                    "pollMs": _POLL_MS,
                    "quietMs": _QUIET_MS,
                    "settleMs": int(min(step.settle_seconds, left) * 1000),
                },
            )
            state = answer["state"]
            if state in ("gone", "disabled"):
                stopped = state
                break
            clicks += 1
            if state == "unchanged":
                stopped = "timeout" if time.monotonic() >= ends else "unchanged"
                break
        return {"clicks": clicks, "stopped": stopped}

    async def _wait_for_response(self, step: PageStep, requests: _Requests) -> dict[str, Any]:
        pattern = step.url_pattern
        assert pattern is not None
        self._waiting = "no response's URL matched the urlPattern"
        while True:
            requests.changed.clear()
            found = requests.take_response(pattern)
            if found is not None:
                return {"status": found[1]}
            await requests.changed.wait()

    async def _wait_for_network_idle(self, step: PageStep, requests: _Requests) -> None:
        self._waiting = (
            f"the page never went {step.idle_seconds:g}s without a request in flight "
            f"({len(requests.in_flight)} in flight at the end)"
        )
        while True:
            requests.changed.clear()
            if requests.in_flight:
                await requests.changed.wait()
                self._waiting = (
                    f"the page never went {step.idle_seconds:g}s without a request in flight "
                    f"({len(requests.in_flight)} in flight at the end)"
                )
                continue
            try:
                async with asyncio.timeout(step.idle_seconds):
                    await requests.changed.wait()
            except TimeoutError:
                return  # quiet for the whole idle time

    async def _count(self, selector: str) -> int:
        answer = await self._evaluate(_COUNT, {"selector": selector})
        return int(answer)

    async def click_next(self, selector: str, *, settle_seconds: float) -> str:
        """Click the first visible match of `selector` (a "next page" button run by a script)
        and wait for the page to change: "clicked" (the document changed, then stayed quiet
        for a moment), "navigated" (the click loaded another document, now loaded), or why
        there is no next page: "gone" (no visible match), "disabled", "unchanged" (nothing
        changed within `settle_seconds`)."""
        self._waiting = f"the page did not settle after clicking {_quoted(selector)}"

        async def click() -> str:
            try:
                answer = await self._evaluate(
                    _LOAD_MORE_ROUND,
                    {
                        "selector": selector,
                        "pollMs": _POLL_MS,
                        "quietMs": _QUIET_MS,
                        "settleMs": int(settle_seconds * 1000),
                    },
                )
            except PyppeteerNetworkError as error:
                if not any(text in str(error) for text in _NAVIGATED_AWAY):
                    raise
                await self._document_loaded()
                return "navigated"
            return str(answer["state"])

        async def within() -> str:
            async with asyncio.timeout(settle_seconds + _ROUND_GRACE_SECONDS):
                return await click()

        return str(
            await self._bounded(within(), f"click the next page button {_quoted(selector)} on")
        )

    async def _document_loaded(self) -> None:
        """Wait until the tab's new document has loaded (after a navigation the page began)."""
        while True:
            try:
                state = await self._page._client.send(
                    "Runtime.evaluate",
                    {"expression": "document.readyState", "returnByValue": True},
                )
            except PyppeteerNetworkError as error:
                # Between two documents there may be no context to evaluate in yet.
                if not any(text in str(error) for text in (*_NAVIGATED_AWAY, _NO_CONTEXT)):
                    raise
                state = {}
            if state.get("result", {}).get("value") == "complete":
                return
            await asyncio.sleep(_POLL_MS / 1000)

    async def _evaluate(self, function: str, argument: dict[str, Any]) -> Any:
        """Run one of this module's page functions with `argument` (one round trip)."""
        answer = await self._page._client.send(
            "Runtime.evaluate",
            {
                "expression": f"({function})({json.dumps(argument)})",
                "awaitPromise": True,
                "returnByValue": True,
            },
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = str(details.get("exception", {}).get("description") or details.get("text"))
            if "is not a valid selector" in text:
                raise BadInput(
                    f"invalid CSS selector ({text.splitlines()[0]})", reason="bad_selector"
                )
            raise StepFailed(text.splitlines()[0] if text else "the page refused the step")
        return answer.get("result", {}).get("value")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
