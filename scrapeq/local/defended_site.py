"""A defended site for the session tests and the sessions benchmark (`make bench-sessions`):
it blocks a (client
address, visitor cookie) pair after `allows` pages, as sites behind a bot defence block a
(proxy, cookie) pair.

A request without the site's cookie gets a new one with its page, `allows` times per address
(a client that never keeps its cookie is a bot too); each pair is served `allows` pages. Past
either budget a request is refused with a 403 or, with `challenge`, a 200 challenge page (a
block marker finds it). A client that keeps its cookies gets about `allows`² pages through one
address; one that drops them gets `allows`. It listens on 127.0.0.2 (the worker tests'
allowed address) and tells proxies apart by the address their connections come from
(tinyproxy's Bind). It runs in a thread with its own event loop, so it keeps answering while a
worker runs in the caller's loop.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
from collections.abc import Iterator
from typing import Any

from aiohttp import web

SITE_HOST = "127.0.0.2"

COOKIE = "visitor"
CHALLENGE_PAGE = (
    "<!doctype html><html><head><title>Just a moment...</title></head><body>"
    '<div id="challenge">Verify you are human</div></body></html>'
)
PAGE = (
    "<!doctype html><html><head><title>Item {n}</title></head><body>"
    '<h1 class="name">Item {n}</h1></body></html>'
)


class DefendedSite:
    """The running site: `url(path)`, pages served and refused per client address."""

    def __init__(self, *, allows: int, challenge: bool = False) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.allows = allows
        self.challenge = challenge
        self.port = 0
        self.pages: collections.Counter[tuple[str, str]] = collections.Counter()
        self.fresh_visitors: collections.Counter[str] = collections.Counter()
        self.served: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        self._visitors = itertools.count(1)
        self._runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://{SITE_HOST}:{self.port}{path}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _page(self, request: web.Request) -> web.StreamResponse:
        address = request.remote or "?"
        visitor = request.cookies.get(COOKIE)
        fresh = visitor is None
        if visitor is None:
            visitor = f"v{next(self._visitors)}"
            self.fresh_visitors[address] += 1
        self.pages[(address, visitor)] += 1
        if (
            self.pages[(address, visitor)] > self.allows
            or self.fresh_visitors[address] > self.allows
        ):
            self.refused[address] += 1
            if self.challenge:
                return web.Response(text=CHALLENGE_PAGE, content_type="text/html")
            return web.Response(status=403, text="Forbidden")
        self.served[address] += 1
        response = web.Response(
            text=PAGE.format(n=request.match_info["n"]), content_type="text/html"
        )
        if fresh:
            response.set_cookie(COOKIE, visitor, path="/")
        return response

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/item/{n}", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, SITE_HOST, 0)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def running_defended_site(*, allows: int, challenge: bool = False) -> Iterator[DefendedSite]:
    """Start a DefendedSite, yield it, stop it (for fixtures and `with` blocks)."""
    site = DefendedSite(allows=allows, challenge=challenge)
    site.start()
    try:
        yield site
    finally:
        site.stop()
