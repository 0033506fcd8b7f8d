"""The plain-HTTP engine for `render: false` jobs: aiohttp plus lexbor (extraction.py).

No browser means no JavaScript, a fraction of the CPU, and hundreds of pages per second. The
same network guard applies: every hop is checked by URL (scheme, IP literals) and aiohttp's
resolver is replaced by `GuardedResolver`, so the address actually connected to is always one
the guard approved. Redirects are followed here, hop by hop, rather than inside aiohttp, so
each hop's URL passes the guard too. With an upstream proxy (per worker pool), requests go
through a route of the worker's egress proxy instead, which checks the address again and asks
the upstream for a tunnel to that checked address (egress_proxy.py). It fetches the document
only, never a sub-resource, so a job's blockResources has nothing to skip here. Every page is
parsed and extracted in a child process within the job's timeout (extraction_processes.py),
never on the event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urljoin

import aiohttp
from scrapeq_queue.payload import ITEM_ELEMENT_SELECTOR
from scrapeq_queue.sealed_credentials import Credentials

from .credential_headers import request_headers
from .egress_proxy import REFUSAL_HEADER, EgressProxy, UpstreamProxy
from .errors import BlockedRequest, PermanentFailure, RetryLater
from .extraction import (
    DEFAULT_MAX_LINKS,
    MAX_EXTRACTED_CHARACTERS,
    ExtractedPage,
    FieldSpec,
    ItemsSpec,
    PageOutcome,
    check_selector,
)
from .extraction_processes import DEFAULT_PROCESSES, ExtractionProcesses
from .http_status import charset_of, check_status, is_html
from .job_options import JobOptions
from .network_guard import GuardedResolver, NetworkGuard
from .session_cookies import cookie_jar, jar_cookies
from .structured_data import StructuredData
from .user_agent import DEFAULT_USER_AGENT
from .xpath_tree import check_xpath

# Browsers stop at 20 redirects; a scraper that needs more is being led in circles.
MAX_REDIRECTS: Final = 10
# Up to this many distinct selectors are checked on the event loop before the request (about
# 40 µs each, and cached); more are checked in an extraction process.
_SELECTORS_CHECKED_ON_LOOP: Final = 100
# The body of a streamed response arrives in pieces of at most this size.
STREAM_CHUNK_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class StreamedResponse:
    """A response whose body is read as it arrives (HttpEngine.stream)."""

    url: str  # the final URL, after redirects
    status: int
    headers: Mapping[str, str]  # lower-case names
    chunks: AsyncIterator[bytes]


class HttpEngine:
    """Fetches and extracts static pages. Use `async with` or start()/close()."""

    def __init__(
        self,
        guard: NetworkGuard,
        *,
        max_response_bytes: int = 10 * 1024 * 1024,
        max_result_bytes: int = MAX_EXTRACTED_CHARACTERS,
        max_links: int = DEFAULT_MAX_LINKS,
        user_agent: str = DEFAULT_USER_AGENT,
        connections: int = 100,
        upstream_proxy: UpstreamProxy | None = None,
        extraction_processes: int = DEFAULT_PROCESSES,
    ) -> None:
        self.guard = guard
        # Routes through the egress proxy: the pool's (with its upstream proxy) and one per job
        # that brings its own upstream proxies (spec.proxy).
        self._egress = EgressProxy(guard, upstream=upstream_proxy)
        self._upstream_proxy = upstream_proxy
        self._proxy_url: str | None = None
        self.max_response_bytes = max_response_bytes
        # The stored result's limit: field values copy at most this many characters of a page.
        self.max_result_bytes = max_result_bytes
        self.max_links = max_links
        self.user_agent = user_agent
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._extraction_processes = extraction_processes
        self.extraction: ExtractionProcesses | None = None

    async def __aenter__(self) -> HttpEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self.extraction is None:
            self.extraction = ExtractionProcesses(self._extraction_processes)
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self.guard),
                limit=self._connections,
                # The guard caches resolutions itself, for a bounded time.
                use_dns_cache=False,
            )
            # trust_env=False: a proxy from the environment would connect on our behalf to
            # addresses the guard never saw.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
            if self._upstream_proxy is not None:
                # An IP literal: aiohttp connects to it without asking the resolver.
                self._proxy_url = (await self._egress.open_route()).url

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._egress.close()
        if self.extraction is not None:
            await self.extraction.close()
            self.extraction = None

    async def fetch(
        self,
        url: str,
        options: JobOptions,
        *,
        follow_selector: str | None = None,
        conditional: Mapping[str, str] | None = None,
    ) -> PageOutcome:
        """Fetch `url` (following guarded redirects), check the status, extract if HTML.

        `conditional` (If-None-Match / If-Modified-Since, recrawl.py) goes with the request; a
        304 then returns an outcome with `not_modified` set and nothing read or extracted.
        Raises the same WorkerError kinds as BrowserPool.render.
        """
        if self._session is None:
            await self.start()
        assert self._session is not None
        if (
            options.credentials is None
            and not options.upstream_proxies
            and options.session_cookies is None
        ):
            return await self._fetch(
                self._session, url, options, follow_selector, self._proxy_url, conditional
            )
        # A job with credentials gets a cookie jar of its own (on the shared connections): a
        # session cookie the site sets in return ends with the job, as in the browser. A job
        # with its own upstream proxies gets a route through one of them for this page. A
        # page of a session starts with the session's jar and hands it back in its outcome.
        jar = cookie_jar(options.session_cookies or ())
        async with (
            self._proxy_for(options.upstream_proxies) as proxy_url,
            aiohttp.ClientSession(
                connector=self._session.connector,
                connector_owner=False,
                trust_env=False,
                cookie_jar=jar,
            ) as session,
        ):
            outcome = await self._fetch(
                session, url, options, follow_selector, proxy_url, conditional
            )
        if options.session_cookies is not None:
            outcome.cookies = jar_cookies(jar)
        return outcome

    async def not_modified(
        self, url: str, options: JobOptions, conditional: Mapping[str, str]
    ) -> PageOutcome | None:
        """Ask for `url` with `conditional` headers the way `fetch` would (the guard, the job's
        headers, credentials and upstream proxies) before a rendered row renders it: the 304
        outcome when the site says it did not change, None when it sent anything else (whose
        body is not read: the browser fetches the page itself)."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        started = time.monotonic()
        headers = {"User-Agent": self.user_agent, "Accept": "text/html,*/*;q=0.8"}
        headers.update(options.headers or {})
        headers.update(conditional)
        async with (
            self._proxy_for(options.upstream_proxies) as proxy_url,
            aiohttp.ClientSession(
                connector=self._session.connector, connector_owner=False, trust_env=False
            ) as session,
            self._response(
                session, url, headers, options.timeout_seconds, options.credentials, proxy_url
            ) as (final_url, response),
        ):
            if response.status != 304:
                # The connection is closed rather than drained: the body is not wanted.
                response.close()
                return None
            return _not_modified_outcome(url, final_url, response, started)

    @contextlib.asynccontextmanager
    async def _proxy_for(self, upstreams: tuple[UpstreamProxy, ...]) -> AsyncIterator[str | None]:
        """The proxy URL requests go through: a route of their own through the next of
        `upstreams` (a job's own proxies), else the engine's."""
        if not upstreams:
            yield self._proxy_url
            return
        route = await self._egress.open_route(upstreams=upstreams)
        try:
            yield route.url
        finally:
            await route.close()

    async def _fetch(
        self,
        session: aiohttp.ClientSession,
        url: str,
        options: JobOptions,
        follow_selector: str | None,
        proxy_url: str | None,
        conditional: Mapping[str, str] | None = None,
    ) -> PageOutcome:
        started = time.monotonic()
        deadline = started + options.timeout_seconds
        # Reject selectors the static engine cannot parse before any network traffic.
        specs: list[FieldSpec | ItemsSpec] = [*options.read_fields]
        if options.items is not None:
            specs += [options.items, *options.items.fields]
        for spec in specs:
            if spec.xpath:
                # Compiling an XPath of bounded length is quick: done here.
                check_xpath(spec.selector)
        wanted = (
            *(spec.selector for spec in specs if not spec.xpath),
            follow_selector,
            options.next.selector if options.next else None,
            options.wait_for,
        )
        selectors = list(
            dict.fromkeys(
                selector for selector in wanted if selector and selector != ITEM_ELEMENT_SELECTOR
            )
        )
        if len(selectors) <= _SELECTORS_CHECKED_ON_LOOP:
            for selector in selectors:
                check_selector(selector)
        else:
            assert self.extraction is not None
            await self.extraction.check_selectors(selectors, url=url, deadline=deadline)
        headers = {"User-Agent": self.user_agent, "Accept": "text/html,*/*;q=0.8"}
        headers.update(options.headers or {})
        headers.update(conditional or {})
        async with self._response(
            session, url, headers, options.timeout_seconds, options.credentials, proxy_url
        ) as (final_url, response):
            if conditional and response.status == 304:
                return _not_modified_outcome(url, final_url, response, started)
            return await self._finish(
                url, final_url, response, options, follow_selector, started, deadline
            )

    async def fetch_text(
        self,
        url: str,
        *,
        timeout_seconds: float,
        max_bytes: int,
        upstream_proxies: tuple[UpstreamProxy, ...] = (),
        user_agent: str | None = None,
    ) -> tuple[int, str]:
        """GET `url` like `fetch` (guard, redirects, a job's own `upstream_proxies`) and return
        the final (status, body as text), the body cut at `max_bytes`; no status is an error
        here. For small documents the worker reads itself (robots.txt). `user_agent` replaces
        the pool's (a site policy's)."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        headers = {"User-Agent": user_agent or self.user_agent}
        async with (
            self._proxy_for(upstream_proxies) as proxy_url,
            self._response(self._session, url, headers, timeout_seconds, None, proxy_url) as (
                _,
                response,
            ),
        ):
            body = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                body.extend(chunk)
                if len(body) >= max_bytes:
                    break
            charset = charset_of(response.headers.get("Content-Type"))
            return response.status, _decode(bytes(body[:max_bytes]), charset)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        url: str,
        *,
        timeout_seconds: float,
        upstream_proxies: tuple[UpstreamProxy, ...] = (),
        accept: str = "*/*",
    ) -> AsyncIterator[StreamedResponse]:
        """GET `url` like `fetch` (guard, redirects, a job's own `upstream_proxies`) and yield
        its final response with its body as chunks, never held whole: for documents of any
        size that the worker reads itself (a source row's sitemap). No status is an error
        here; errors while the caller reads the chunks are translated as in `fetch`, and the
        whole exchange, reading included, ends within `timeout_seconds`."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        headers = {"User-Agent": self.user_agent, "Accept": accept}
        async with (
            self._proxy_for(upstream_proxies) as proxy_url,
            self._response(self._session, url, headers, timeout_seconds, None, proxy_url) as (
                final_url,
                response,
            ),
        ):
            yield StreamedResponse(
                url=final_url,
                status=response.status,
                headers={name.lower(): value for name, value in response.headers.items()},
                chunks=response.content.iter_chunked(STREAM_CHUNK_BYTES),
            )

    @contextlib.asynccontextmanager
    async def _response(
        self,
        session: aiohttp.ClientSession,
        url: str,
        headers: Mapping[str, str],
        timeout_seconds: float,
        credentials: Credentials | None,
        proxy_url: str | None,
    ) -> AsyncIterator[tuple[str, aiohttp.ClientResponse]]:
        """GET `url` within `timeout_seconds`, following redirects hop by hop, each hop's URL
        checked by the guard; yield (final URL, its response).

        Raises the guard's BlockedRequest, PermanentFailure (too_many_redirects) and
        RetryLater (timeout, network_error), also for errors while the caller reads the body.
        `credentials` go only to the hops they were sealed for (request_headers); every hop
        goes through `proxy_url` (the worker's egress proxy route), when given.
        """
        deadline = time.monotonic() + timeout_seconds
        current = url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                await self.guard.check_url(current)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                async with session.get(
                    current,
                    headers=request_headers(headers, current, credentials) or dict(headers),
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=remaining),
                    proxy=proxy_url,
                ) as response:
                    await self._check_refusal(response, current, proxy_url)
                    location = response.headers.get("Location")
                    if 300 <= response.status < 400 and location:
                        current = urljoin(current, location)
                        continue
                    yield current, response
                    return
            raise PermanentFailure(
                f"more than {MAX_REDIRECTS} redirects from {url}", reason="too_many_redirects"
            )
        except TimeoutError as error:
            raise RetryLater(
                f"timed out after {timeout_seconds:g}s fetching {current}", reason="timeout"
            ) from error
        except aiohttp.ClientHttpProxyError as error:
            # A tunnel (https) the egress proxy refused; its reason is in the status.
            if error.status == 403:
                raise BlockedRequest(
                    f"blocked request to {current}: the egress proxy refused it",
                    reason="blocked_address",
                ) from error
            raise RetryLater(
                f"could not fetch {current} through the upstream proxy: {error.status} "
                f"{error.message}",
                reason="upstream_proxy_error",
            ) from error
        except aiohttp.ClientError as error:
            raise RetryLater(
                f"could not fetch {current}: {error}", reason="network_error"
            ) from error

    async def _check_refusal(
        self, response: aiohttp.ClientResponse, url: str, proxy_url: str | None
    ) -> None:
        """The egress proxy's own refusal of a plain-HTTP request (not the site's answer)."""
        if proxy_url is None or REFUSAL_HEADER not in response.headers:
            return
        reason = response.headers[REFUSAL_HEADER]
        message = (await response.text())[:500] or f"the egress proxy refused {url}"
        if response.status == 403:
            raise BlockedRequest(message, reason=reason)
        raise RetryLater(message, reason=reason)

    async def _finish(
        self,
        url: str,
        final_url: str,
        response: aiohttp.ClientResponse,
        options: JobOptions,
        follow_selector: str | None,
        started: float,
        deadline: float,
    ) -> PageOutcome:
        headers = {name.lower(): value for name, value in response.headers.items()}
        check_status(response.status, headers, url=final_url)
        content_type = headers.get("content-type")
        length = headers.get("content-length")
        content_length = int(length) if length and length.isdigit() else None
        if content_length is not None and content_length > self.max_response_bytes:
            raise self._too_large(final_url)
        loaded = time.monotonic()
        if not is_html(content_type):
            # Recorded, not downloaded: a PDF or an image has no fields to extract.
            return PageOutcome(
                url=url,
                final_url=final_url,
                status=response.status,
                content_type=content_type,
                extracted=None,
                content_length=content_length,
                headers=headers,
                timing_ms={
                    "load_ms": round((loaded - started) * 1000, 1),
                    "total_ms": round((loaded - started) * 1000, 1),
                },
            )
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body.extend(chunk)
            if len(body) > self.max_response_bytes:
                raise self._too_large(final_url)
        loaded = time.monotonic()
        text = _decode(bytes(body), charset_of(content_type))
        assert self.extraction is not None
        extracted = await self.extraction.extract(
            text,
            options.read_fields,
            url=final_url,
            base_url=final_url,
            follow_selector=follow_selector,
            max_links=self.max_links,
            wait_for=options.wait_for,
            max_characters=options.result_chars or self.max_result_bytes,
            deadline=deadline,
            text_sample=options.text_sample,
            items=options.items,
            structured_data=options.structured_data,
            next_selector=options.next.selector if options.next else None,
            text_chars=options.text_chars,
        )
        finished = time.monotonic()
        return PageOutcome(
            url=url,
            final_url=final_url,
            status=response.status,
            content_type=content_type,
            extracted=extracted,
            content_length=len(body),
            content_hash=hashlib.sha256(body).digest(),
            headers=headers,
            html=text[: options.html_limit] if options.html_limit else None,
            html_truncated=0 < options.html_limit < len(text),
            timing_ms={
                "load_ms": round((loaded - started) * 1000, 1),
                "extract_ms": round((finished - loaded) * 1000, 1),
                "total_ms": round((finished - started) * 1000, 1),
            },
        )

    async def transform(
        self,
        page: ExtractedPage,
        fields: Sequence[FieldSpec],
        items: ItemsSpec | None,
        *,
        url: str,
        deadline: float,
    ) -> ExtractedPage:
        """`page` with its fields' transforms applied in one of this engine's extraction
        processes by `deadline`, whichever engine extracted it."""
        if self.extraction is None:
            raise RetryLater("the worker is stopping", reason="internal_error")
        return await self.extraction.transform(page, fields, items, url=url, deadline=deadline)

    async def structured_data(
        self, html: str, syntaxes: Sequence[str], *, url: str, base_url: str, deadline: float
    ) -> StructuredData:
        """The structured data of a rendered page's `html`, read in one of this engine's
        extraction processes by `deadline` (the parse is the same for both engines)."""
        if self.extraction is None:
            raise RetryLater("the worker is stopping", reason="internal_error")
        return await self.extraction.structured_data(
            html, syntaxes, url=url, base_url=base_url, deadline=deadline
        )

    def _too_large(self, url: str) -> PermanentFailure:
        return PermanentFailure(
            f"{url} is larger than the {self.max_response_bytes}-byte page limit",
            reason="response_too_large",
        )


def _not_modified_outcome(
    url: str, final_url: str, response: aiohttp.ClientResponse, started: float
) -> PageOutcome:
    """The outcome of a 304 answer to a conditional request: nothing read, nothing extracted."""
    elapsed = round((time.monotonic() - started) * 1000, 1)
    return PageOutcome(
        url=url,
        final_url=final_url,
        status=304,
        content_type=None,
        extracted=None,
        headers={name.lower(): value for name, value in response.headers.items()},
        timing_ms={"load_ms": elapsed, "total_ms": elapsed},
        not_modified=True,
    )


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            pass
    return body.decode("utf-8", errors="replace")


__all__ = ["MAX_REDIRECTS", "HttpEngine"]
