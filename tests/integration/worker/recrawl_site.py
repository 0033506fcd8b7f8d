"""A catalogue site for recurring crawls: pages with validators (ETag and Last-Modified, a 304
when either matches) under /v/<n>, pages without any under /plain/<n>, and a version per page a
test bumps to change it. It counts what it sent per path: full pages and 304s. /sitemap.xml
lists the first `sitemap_pages` /v/ pages with their `lastmod` (the time a page last changed;
a fixed date in 2023 for a page never changed)."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from email.utils import formatdate

from aiohttp import web

from .site import SITE_HOST, ThreadedServer, _port_of

PAGE = (
    "<!doctype html><html><head><title>Item {n}</title></head><body>"
    '<h1 class="name">Item {n}</h1><p class="price">{price}</p>'
    # Changes on every response: a page without validators is still compared by its result.
    '<p class="served">served {served}</p></body></html>'
)


class RecrawlSite(ThreadedServer):
    def __init__(self, sitemap_pages: int = 0) -> None:
        super().__init__()
        self.port = 0
        self.sitemap_pages = sitemap_pages
        # Page number -> when it last changed (the sitemap's lastmod).
        self.changed_at: dict[int, datetime] = {}
        # (full /v/ pages served, the pages to change once that many were).
        self._planned_change: tuple[int, tuple[int, ...]] | None = None
        # Page number -> its version (1 at first); a test bumps one to change the page.
        self.versions: collections.defaultdict[int, int] = collections.defaultdict(lambda: 1)
        self.full: collections.Counter[str] = collections.Counter()
        self.not_modified: collections.Counter[str] = collections.Counter()
        self._served = 0
        self._runners: list[web.AppRunner] = []

    def url(self, path: str) -> str:
        return f"http://{SITE_HOST}:{self.port}{path}"

    def change(self, number: int) -> None:
        self.versions[number] += 1
        self.changed_at[number] = datetime.now(UTC)

    def change_once_served(self, full_pages: int, numbers: Iterable[int]) -> None:
        """Change `numbers` as soon as the site has sent `full_pages` full /v/ pages (so a
        crawl that fetched them all finds the change on its next run, whenever that starts)."""
        self._planned_change = (full_pages, tuple(numbers))

    def full_pages(self, prefix: str) -> int:
        return sum(count for path, count in self.full.items() if path.startswith(prefix))

    def answered_304(self, prefix: str) -> int:
        return sum(count for path, count in self.not_modified.items() if path.startswith(prefix))

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/v/{n}", self._validated)
        app.router.add_get("/plain/{n}", self._plain)
        app.router.add_get("/sitemap.xml", self._sitemap)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, SITE_HOST, 0)
        await site.start()
        self.port = _port_of(site)
        self._runners.append(runner)

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def _body(self, number: int) -> str:
        self._served += 1
        version = self.versions[number]
        return PAGE.format(n=number, price=f"{number}.{version:02d}", served=self._served)

    async def _validated(self, request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        version = self.versions[number]
        etag = f'"{number}-{version}"'
        # A fixed date per version, as a file's modification time would be.
        last_modified = formatdate(1_700_000_000 + version * 3600, usegmt=True)
        headers = {"ETag": etag, "Last-Modified": last_modified, "Cache-Control": "no-cache"}
        # If-None-Match, when sent, decides alone (RFC 9110, 13.2.2).
        asked_etag = request.headers.get("If-None-Match")
        unchanged = (
            asked_etag == etag
            if asked_etag is not None
            else request.headers.get("If-Modified-Since") == last_modified
        )
        if unchanged:
            self.not_modified[request.path] += 1
            return web.Response(status=304, headers=headers)
        self.full[request.path] += 1
        text = self._body(number)
        if self._planned_change is not None and self.full_pages("/v/") >= self._planned_change[0]:
            for changed in self._planned_change[1]:
                self.change(changed)
            self._planned_change = None
        return web.Response(text=text, content_type="text/html", headers=headers)

    async def _sitemap(self, request: web.Request) -> web.Response:
        never_changed = "2023-11-14T22:13:20+00:00"
        entries = "".join(
            f"<url><loc>{self.url(f'/v/{number}')}</loc><lastmod>"
            f"{self.changed_at[number].isoformat() if number in self.changed_at else never_changed}"
            "</lastmod></url>"
            for number in range(self.sitemap_pages)
        )
        return web.Response(
            text=f'<?xml version="1.0" encoding="UTF-8"?><urlset>{entries}</urlset>',
            content_type="application/xml",
        )

    async def _plain(self, request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        self.full[request.path] += 1
        return web.Response(
            text=self._body(number),
            content_type="text/html",
            headers={"Cache-Control": "no-store"},
        )


def running_recrawl_site(sitemap_pages: int = 0) -> Iterator[RecrawlSite]:
    site = RecrawlSite(sitemap_pages)
    site.start()
    try:
        yield site
    finally:
        site.stop()
