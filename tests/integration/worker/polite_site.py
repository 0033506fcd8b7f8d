"""A test site that is several sites at once and writes down how it was treated.

It listens on 127.0.0.2 to 127.0.0.5, one port each; every address is its own host to scrapeq
(an IP address is its own politeness key). For each host it records every request's arrival and
end (monotonic seconds), the most requests it had in flight at once, and its robots.txt fetches.
It runs in a thread with its own event loop, so it keeps answering while the test waits.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
ALLOW_HOSTS = "127.0.0.2/31,127.0.0.4/31"  # exactly the four addresses above
CHALLENGE_PAGE = (
    "<!doctype html><html><head><title>Just a moment...</title></head><body>"
    '<div id="challenge"><h1>Verify you are human</h1><p>Checking your browser.</p></div>'
    "</body></html>"
)
# A real page whose text mentions the challenge's words, outside any challenge element.
MENTIONING_PAGE = (
    "<!doctype html><html><head><title>{path}</title></head><body><h1>{path}</h1>"
    "<p>Our forum: why do sites ask you to verify you are human?</p></body></html>"
)
PAGE = "<!doctype html><html><head><title>{path}</title></head><body><h1>{path}</h1></body></html>"


@dataclass
class Robots:
    """What /robots.txt answers on one host."""

    status: int = 404
    text: str = ""
    stall_seconds: float = 0.0


@dataclass
class HostRecord:
    arrivals: list[tuple[float, str]] = field(default_factory=list)  # (time, path)
    in_flight: int = 0
    max_in_flight: int = 0
    robots_fetches: int = 0
    # When this host answered 429 (monotonic), per path.
    limited_at: dict[str, float] = field(default_factory=dict)
    # Pages in flight at once per `group` query parameter (a page of one job, say), and the most.
    group_in_flight: collections.Counter[str] = field(default_factory=collections.Counter)
    group_max_in_flight: collections.Counter[str] = field(default_factory=collections.Counter)
    # The User-Agent of every page request, in arrival order.
    user_agents: list[str] = field(default_factory=list)
    robots_user_agents: list[str] = field(default_factory=list)


class PoliteSite:
    def __init__(self) -> None:
        self.records: collections.defaultdict[str, HostRecord] = collections.defaultdict(HostRecord)
        self.robots: dict[str, Robots] = {}
        self.ports: dict[str, int] = {}
        # /guarded/ pages answer normally this many times per host, then refuse with a 403.
        self.guard_allows = 2
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runners: list[web.AppRunner] = []

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.ports[host]}{path}"

    def arrivals(self, host: str, prefix: str = "/") -> list[float]:
        return [when for when, path in self.records[host].arrivals if path.startswith(prefix)]

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        for host in HOSTS:
            app = web.Application()
            app.router.add_get("/robots.txt", self._robots)
            app.router.add_get("/page/{name:.*}", self._page)
            app.router.add_get("/limited/{name:.*}", self._limited)
            app.router.add_get("/once-slow/{name:.*}", self._once_slow)
            app.router.add_get("/dead/{name:.*}", self._dead)
            app.router.add_get("/guarded/{name:.*}", self._guarded)
            app.router.add_get("/challenged/{name:.*}", self._challenged)
            app.router.add_get("/recovering/{name:.*}", self._recovering)
            app.router.add_get("/crowded/{name:.*}", self._crowded)
            # A request still hanging (a killed worker's) must not hold up the test's end.
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, host, 0)
            await site.start()
            self._runners.append(runner)
            server = site._server
            assert server is not None
            self.ports[host] = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        # Handlers still sleeping for a killed worker's connection end here, not at close().
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    def _host(request: web.Request) -> str:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        return str(sockname[0]) if sockname else "?"

    async def _robots(self, request: web.Request) -> web.Response:
        host = self._host(request)
        self.records[host].robots_fetches += 1
        self.records[host].robots_user_agents.append(request.headers.get("User-Agent", ""))
        robots = self.robots.get(host, Robots())
        if robots.stall_seconds:
            await asyncio.sleep(robots.stall_seconds)
        return web.Response(status=robots.status, text=robots.text, content_type="text/plain")

    async def _serve(self, request: web.Request, seconds: float) -> web.Response:
        record = self.records[self._host(request)]
        record.arrivals.append((time.monotonic(), request.path))
        group = request.query.get("group", "")
        record.user_agents.append(request.headers.get("User-Agent", ""))
        record.in_flight += 1
        record.max_in_flight = max(record.max_in_flight, record.in_flight)
        record.group_in_flight[group] += 1
        record.group_max_in_flight[group] = max(
            record.group_max_in_flight[group], record.group_in_flight[group]
        )
        try:
            await asyncio.sleep(seconds)
        finally:
            record.in_flight -= 1
            record.group_in_flight[group] -= 1
        return web.Response(text=PAGE.format(path=request.path), content_type="text/html")

    async def _page(self, request: web.Request) -> web.Response:
        return await self._serve(request, int(request.query.get("ms", "0")) / 1000)

    async def _crowded(self, request: web.Request) -> web.Response:
        """A site that slows down under load: a page takes `ms` milliseconds times the cube of
        the requests in flight on its host, this one included."""
        in_flight = self.records[self._host(request)].in_flight + 1
        return await self._serve(request, int(request.query.get("ms", "0")) / 1000 * in_flight**3)

    async def _limited(self, request: web.Request) -> web.Response:
        """The first request of each path gets 429 with Retry-After: 3, later ones a page."""
        record = self.records[self._host(request)]
        if request.path not in record.limited_at:
            record.arrivals.append((time.monotonic(), request.path))
            record.limited_at[request.path] = time.monotonic()
            return web.Response(status=429, headers={"Retry-After": "3"}, text="slow down")
        return await self._serve(request, 0)

    async def _once_slow(self, request: web.Request) -> web.Response:
        """The first request of each path hangs for a minute (a worker to kill mid-page)."""
        seen = any(path == request.path for _, path in self.records[self._host(request)].arrivals)
        return await self._serve(request, 0 if seen else 60)

    async def _dead(self, request: web.Request) -> web.Response:
        """Every request answers 500 (a removed product)."""
        self.records[self._host(request)].arrivals.append((time.monotonic(), request.path))
        return web.Response(status=500, text="gone wrong")

    async def _guarded(self, request: web.Request) -> web.Response:
        """A defended site: after `guard_allows` pages per host, every request gets a 403."""
        record = self.records[self._host(request)]
        served = sum(1 for _, path in record.arrivals if path.startswith("/guarded/"))
        if served >= self.guard_allows:
            record.arrivals.append((time.monotonic(), request.path))
            return web.Response(status=403, text="Forbidden")
        return await self._serve(request, 0)

    async def _challenged(self, request: web.Request) -> web.Response:
        """A defended site: after `guard_allows` pages per host, every request gets a challenge
        page with status 200. Every page mentions the challenge's words in its text."""
        record = self.records[self._host(request)]
        served = sum(1 for _, path in record.arrivals if path.startswith("/challenged/"))
        record.arrivals.append((time.monotonic(), request.path))
        if served >= self.guard_allows:
            body = CHALLENGE_PAGE
        else:
            body = MENTIONING_PAGE.format(path=request.path)
        return web.Response(text=body, content_type="text/html")

    async def _recovering(self, request: web.Request) -> web.Response:
        """The first two requests of each path answer 500, the third and later a page."""
        record = self.records[self._host(request)]
        tries = sum(1 for _, path in record.arrivals if path == request.path)
        if tries < 2:
            record.arrivals.append((time.monotonic(), request.path))
            return web.Response(status=500, text="not yet")
        return await self._serve(request, 0)


def running_polite_site() -> Iterator[PoliteSite]:
    site = PoliteSite()
    site.start()
    try:
        yield site
    finally:
        site.stop()
