"""The tab's request checks: every request a tab makes — the navigation, each redirect hop,
each sub-resource — is paused through the CDP `Fetch` domain and decided here before Chromium
sends it (pyppeteer's own `setRequestInterception` uses a CDP method Chromium removed).

* the network guard checks each request's URL; a blocked navigation fails the job with the
  guard's reason, a blocked sub-resource is refused and listed in the job's `blocked_requests`;
* the main document's response is looked at before it is rendered: error statuses, non-HTML
  content and oversized bodies never reach the renderer;
* the bytes a page downloads are counted, and a page past the limit is stopped;
* sub-resources of a kind the job blocks (blockResources: images, fonts, media, stylesheets)
  are refused before they leave and counted in `skipped_requests`, apart from the guard's
  refusals: a site's images the job chose not to load are not a security event.

A `PageWatch` holds what these checks learn about the page of the job holding the tab.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from pyppeteer.errors import NetworkError as PyppeteerNetworkError
from scrapeq_queue.sealed_credentials import Credentials

from .credential_headers import request_headers
from .egress_proxy import Refusal
from .errors import BlockedRequest, PermanentFailure, RetryLater, WorkerError
from .http_status import is_html
from .network_guard import NetworkGuard

# Every request is checked before it is sent; the main document's response is looked at
# before it is rendered (status, type, size).
FETCH_PATTERNS: Final = [
    {"urlPattern": "*", "requestStage": "Request"},
    {"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"},
]


# CDP's Network.ResourceType of the kinds a job may block (scrapeq_queue.payload.RESOURCE_KINDS).
_RESOURCE_KINDS: Final = {
    "Image": "image",
    "Font": "font",
    "Media": "media",
    "Stylesheet": "stylesheet",
}


class PageWatch:
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
        self.credentials: Credentials | None = None  # added per request on their origins
        self.block_resources: frozenset[str] = frozenset()  # kinds the job does not want
        self.skipped: dict[str, int] = {}  # requests not sent because of block_resources

    def fail(self, error: WorkerError) -> None:
        if not self.abort.done():
            self.abort.set_result(error)

    def record_blocked(self, url: str, reason: str, error: str) -> None:
        """Report one refused request once (the tab's check and the proxy may both see it)."""
        url = url[:500]
        if all(entry["url"] != url for entry in self.blocked):
            self.blocked.append({"url": url, "reason": reason, "error": error[:500]})

    def refused_by_proxy(self, refusal: Refusal) -> None:
        """The egress proxy refused a connection of this job's context. Before the document
        answered, a refusal of the document's own host:port ends the job (the name moved to a
        forbidden address between the tab's check and the proxy's: DNS rebinding)."""
        if self.status is None and _authority(refusal.target) == _authority(self.url):
            error_type = RetryLater if refusal.retryable else BlockedRequest
            self.fail(error_type(refusal.error, reason=refusal.reason))
        if not refusal.retryable:  # a connection that failed was not blocked
            self.record_blocked(refusal.target, refusal.reason, refusal.error)


def _authority(target: str) -> tuple[str, int] | None:
    """(host, port) of a URL or of a CONNECT target."""
    with contextlib.suppress(ValueError):
        parts = urlsplit(target if "://" in target else f"//{target}")
        default = 443 if parts.scheme == "https" else 80
        if parts.hostname:
            return parts.hostname.lower(), parts.port or default
    return None


class RequestChecks:
    """Decides the paused requests of every tab of a pool, for the job holding the tab."""

    def __init__(self, guard: NetworkGuard, *, max_response_bytes: int) -> None:
        self.guard = guard
        self.max_response_bytes = max_response_bytes
        self._background: set[asyncio.Task[None]] = set()

    def on_paused(self, client: Any, watch: PageWatch | None, event: Mapping[str, Any]) -> None:
        """`Fetch.requestPaused` of a tab; `watch` is that of the job holding it, if any."""
        if watch is None:
            # An idle tab: whatever the previous page's leftover scripts ask for is refused.
            task = asyncio.ensure_future(
                _quietly(
                    client.send(
                        "Fetch.failRequest",
                        {"requestId": event["requestId"], "errorReason": "Aborted"},
                    )
                )
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        _spawn(watch, self._paused(client, watch, event))

    def on_data(self, client: Any, watch: PageWatch | None, event: Mapping[str, Any]) -> None:
        """`Network.dataReceived` of a tab: count the bytes against the page limit."""
        if watch is not None:
            self._count_bytes(client, watch, event)

    def cancel(self) -> None:
        """Stop answering idle tabs (the pool is closing)."""
        for task in list(self._background):
            task.cancel()

    async def _paused(self, client: Any, watch: PageWatch, event: Mapping[str, Any]) -> None:
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
            kind = _RESOURCE_KINDS.get(event.get("resourceType", ""))
            if kind in watch.block_resources:
                # The job's choice, not a refusal: counted, never listed in blocked_requests,
                # and decided before the guard so it costs no DNS lookup.
                watch.skipped[kind] = watch.skipped.get(kind, 0) + 1
                await client.send(
                    "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}
                )
                return
            try:
                await self.guard.check_url(request_url)
            except (BlockedRequest, RetryLater) as refusal:
                if is_main:
                    watch.fail(refusal)
                else:
                    watch.record_blocked(request_url, refusal.reason, refusal.message)
                await client.send(
                    "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}
                )
                return
            continuation: dict[str, Any] = {"requestId": request_id}
            headers = request_headers(
                event["request"].get("headers") or {}, request_url, watch.credentials
            )
            if headers is not None:
                continuation["headers"] = [{"name": k, "value": v} for k, v in headers.items()]
            await client.send("Fetch.continueRequest", continuation)
        except (PyppeteerNetworkError, ConnectionError):
            pass  # the tab closed while we decided; nothing left to answer

    async def _paused_response(
        self,
        client: Any,
        watch: PageWatch,
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
        elif watch.content_length is not None and watch.content_length > (self.max_response_bytes):
            watch.fail(self.too_large(request_url))
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

    def too_large(self, url: str) -> PermanentFailure:
        return PermanentFailure(
            f"{url} is larger than the {self.max_response_bytes}-byte page limit",
            reason="response_too_large",
        )

    def _count_bytes(self, client: Any, watch: PageWatch, event: Mapping[str, Any]) -> None:
        watch.bytes_received += max(
            int(event.get("dataLength", 0)), int(event.get("encodedDataLength", 0))
        )
        if watch.bytes_received > self.max_response_bytes and not watch.abort.done():
            watch.fail(self.too_large(watch.url))
            _spawn(watch, _quietly(client.send("Page.stopLoading")))


def _spawn(watch: PageWatch, coroutine: Any) -> None:
    task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
    watch.tasks.add(task)
    task.add_done_callback(watch.tasks.discard)


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable
