"""A hostile little web site on loopback for the worker's tests.

It runs in a thread with its own event loop, so it keeps answering while the test's loop is
busy (an in-process worker) or blocked (waiting on a subprocess). The main site listens on
127.0.0.2 — the worker's allow-list for tests is exactly 127.0.0.2/32 — and a "bystander"
listener on 127.0.0.1 stands for an internal service that must never be reached.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Iterator
from typing import Any

from aiohttp import web

SITE_HOST = "127.0.0.2"
ALLOW_SITE = "127.0.0.2/32"

JS_PAGE = """<!doctype html><html><head><title>Product {n}</title></head><body>
<div id="app">loading…</div>
<script>
  // The content only exists after this script runs (and after a timer, like a real SPA).
  setTimeout(function () {{
    document.getElementById('app').innerHTML =
      '<h1 class="name">Laptop {n}</h1><span class="price">{price}</span>' +
      '<ul><li class="tag">new</li><li class="tag">sale</li></ul>' +
      '<a class="product" href="/js/{next}">next</a>';
  }}, 10);
</script></body></html>"""

STATIC_PAGE = """<!doctype html><html><head><title>Static {n}</title></head><body>
<h1 class="name">Static {n}</h1><p class="price">{price}</p>
<ul><li class="tag">a</li><li class="tag">b</li></ul>
<a class="product" href="/static/{next}">next</a></body></html>"""

# Sub-resources by extension: (content type, body) served at /asset/<name>.<extension>.
ASSETS: dict[str, tuple[str, bytes]] = {
    "png": ("image/png", b"\x89PNG\r\n\x1a\n"),
    "woff2": ("font/woff2", b"wOF2"),
    "wav": ("audio/wav", b"RIFF\x00\x00\x00\x00WAVE"),
    "css": ("text/css", b"h1 { color: #222; }"),
    "js": ("application/javascript", b"document.title = document.title + ' (scripted)';"),
}

LOOP_PAGE = "<!doctype html><html><body><p>spin</p><script>while (true) {}</script></body></html>"


class ThreadedServer:
    """A server running on its own event loop in a thread; subclasses define _start/_stop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError


class HostileSite(ThreadedServer):
    """The running site: `url(path)`, hit counters, and the bystander's hit count.

    `port`: serve on this port of SITE_HOST instead of a free one."""

    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self._wanted_port = port
        self.hits: collections.Counter[str] = collections.Counter()
        # Pages a test registers: `pages[name]` is served as HTML at /page/<name>.
        self.pages: dict[str, str] = {}
        # Scripts a test registers: `scripts[name]` is served as JavaScript at /script/<name>.
        self.scripts: dict[str, str] = {}
        # The User-Agent header of every request, by path, in arrival order.
        self.user_agents: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        self.bystander_hits = 0
        self.slow_in_flight = 0
        self.slow_in_flight_max = 0
        self.port = 0
        self.bystander_port = 0
        self._runners: list[web.AppRunner] = []
        self._stalls: list[asyncio.Future[None]] = []

    def url(self, path: str) -> str:
        return f"http://{SITE_HOST}:{self.port}{path}"

    def bystander_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.bystander_port}{path}"

    # --- lifecycle -----------------------------------------------------------------------

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/js/{n}", self._js)
        app.router.add_get("/static/{n}", self._static)
        app.router.add_get("/slow/{n}", self._slow)
        app.router.add_get("/loop", self._page(LOOP_PAGE))
        app.router.add_get("/never-loads", self._never_loads)
        app.router.add_get("/stall", self._stall)
        app.router.add_get("/huge", self._huge)
        app.router.add_get("/too-many", self._too_many)
        app.router.add_get("/retry-after", self._retry_after)
        app.router.add_get("/missing", self._missing)
        app.router.add_get("/to-metadata", self._to_metadata)
        app.router.add_get("/loopback-image", self._loopback_image)
        app.router.add_get("/document.pdf", self._pdf)
        app.router.add_get("/page/{name}", self._registered)
        app.router.add_get("/script/{name}", self._script)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/redirect-loop", self._redirect_loop)
        app.router.add_get("/asset/{name}", self._asset)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, SITE_HOST, self._wanted_port)
        await site.start()
        self.port = _port_of(site)
        self._runners.append(runner)

        bystander = web.Application()
        bystander.router.add_get("/{tail:.*}", self._bystander)
        runner = web.AppRunner(bystander, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.bystander_port = _port_of(site)
        self._runners.append(runner)

    async def _stop(self) -> None:
        for stall in self._stalls:
            if not stall.done():
                stall.set_result(None)
        for runner in self._runners:
            await runner.cleanup()

    # --- pages ---------------------------------------------------------------------------

    def _count(self, request: web.Request) -> None:
        self.hits[request.path] += 1
        self.user_agents[request.path].append(request.headers.get("User-Agent", ""))

    @staticmethod
    def _page(body: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(text=body, content_type="text/html")

        return handler

    async def _js(self, request: web.Request) -> web.Response:
        self._count(request)
        n = int(request.match_info["n"])
        body = JS_PAGE.format(n=n, price=f"{n}.99", next=n + 1)
        return web.Response(text=body, content_type="text/html")

    async def _static(self, request: web.Request) -> web.Response:
        self._count(request)
        n = int(request.match_info["n"])
        body = STATIC_PAGE.format(n=n, price=f"{n}.50", next=n + 1)
        return web.Response(text=body, content_type="text/html")

    async def _slow(self, request: web.Request) -> web.Response:
        """A page that takes `ms` milliseconds to answer (default 1500)."""
        self._count(request)
        self.slow_in_flight += 1
        self.slow_in_flight_max = max(self.slow_in_flight_max, self.slow_in_flight)
        try:
            await asyncio.sleep(int(request.query.get("ms", "1500")) / 1000)
        finally:
            self.slow_in_flight -= 1
        return await self._js(request)

    async def _never_loads(self, request: web.Request) -> web.Response:
        self._count(request)
        # A distinct image URL per page: Chromium's cache makes identical in-flight requests
        # wait for each other, which would hide the second page's stall.
        image = f"/stall?{request.query_string or 'page'}"
        body = f'<html><head><title>Forever</title></head><body><img src="{image}"></body></html>'
        return web.Response(text=body, content_type="text/html")

    async def _stall(self, request: web.Request) -> web.StreamResponse:
        """Accepts the request, never answers (until the site stops)."""
        self._count(request)
        stall: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stalls.append(stall)
        await stall
        return web.Response(text="late")

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        """50 MB of HTML, chunked (no Content-Length: the size is only known by reading)."""
        self._count(request)
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b"<html><head><title>Huge</title></head><body>")
        chunk = b"<p>" + b"x" * (1024 * 1024 - 7) + b"</p>\n"
        try:
            for _ in range(50):
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client gave up, as it should
        return response

    async def _too_many(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(status=429, text="slow down", headers={"Retry-After": "120"})

    async def _retry_after(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(status=503, text="busy", headers={"Retry-After": "60"})

    async def _missing(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(status=404, text="no such page")

    async def _script(self, request: web.Request) -> web.Response:
        self._count(request)
        body = self.scripts.get(request.match_info["name"])
        if body is None:
            raise web.HTTPNotFound()
        # A service worker registered from here may control the whole site (scope "/").
        return web.Response(
            text=body,
            content_type="application/javascript",
            headers={"Service-Worker-Allowed": "/"},
        )

    async def _asset(self, request: web.Request) -> web.Response:
        """A sub-resource of the kind its extension says (the bodies are stand-ins: the
        tests count requests, not pixels)."""
        self._count(request)
        name = request.match_info["name"]
        extension = name.rsplit(".", 1)[-1]
        content_type, body = ASSETS.get(extension, ("application/octet-stream", b""))
        return web.Response(body=body, content_type=content_type)

    async def _redirect(self, request: web.Request) -> web.Response:
        """A same-site redirect to wherever `to` says."""
        self._count(request)
        raise web.HTTPFound(request.query["to"])

    async def _redirect_loop(self, request: web.Request) -> web.Response:
        """A redirect to itself, forever."""
        self._count(request)
        raise web.HTTPFound("/redirect-loop")

    async def _to_metadata(self, request: web.Request) -> web.Response:
        self._count(request)
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    async def _loopback_image(self, request: web.Request) -> web.Response:
        self._count(request)
        image = self.bystander_url("/pixel.png")
        body = (
            "<html><head><title>With image</title></head><body><h1 class=name>Picture</h1>"
            f'<img src="{image}"></body></html>'
        )
        return web.Response(text=body, content_type="text/html")

    async def _pdf(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(body=b"%PDF-1.4\n%fake\n", content_type="application/pdf")

    async def _registered(self, request: web.Request) -> web.Response:
        self._count(request)
        body = self.pages.get(request.match_info["name"])
        if body is None:
            raise web.HTTPNotFound()
        return web.Response(text=body, content_type="text/html")

    async def _bystander(self, request: web.Request) -> web.Response:
        self.bystander_hits += 1
        return web.Response(body=b"\x89PNG", content_type="image/png")


def _port_of(site: web.TCPSite) -> int:
    server: Any = site._server
    port: int = server.sockets[0].getsockname()[1]
    return port


def running_site(port: int = 0) -> Iterator[HostileSite]:
    """Start a HostileSite (on `port`, if given), yield it, stop it (for fixtures)."""
    site = HostileSite(port)
    site.start()
    try:
        yield site
    finally:
        site.stop()
