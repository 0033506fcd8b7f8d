"""A little shop on loopback whose content needs a visitor's steps: an infinite-scroll list
(items fetched and appended on scroll, ending after N, or never), a "load more" button, prices
revealed by a click, a search form with a select, a page that fetches its data later, and a
login form guarding a members' area. Its items are numbered so that a test can check it read
every one, exactly once.

It listens on SITE_HOST (the address the worker's tests allow) in a thread of its own, like
site.HostileSite.
"""

from __future__ import annotations

import collections
import html
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from aiohttp import web

from .site import SITE_HOST, ThreadedServer, _port_of

Handler = Callable[[web.Request], Awaitable[web.Response]]

# Items each fetch of the list returns.
BATCH: Final = 20
# The login the members' area accepts, and the cookie it sets.
LOGIN_USER: Final = "ada"
LOGIN_PASSWORD: Final = "correct horse battery staple"
SESSION_COOKIE: Final = "shop_session"

_HEAD = "<!doctype html><html><head><title>{title}</title><style>li {{ height: 40px; }}</style>"

# Each fetch appends BATCH items; `total` (__TOTAL__) 0 never ends. The next batch is fetched
# when the visitor scrolls near the bottom.
SCROLL_PAGE: Final = (
    _HEAD.format(title="Infinite list")
    + """</head><body><ul id="list"></ul><p id="end" hidden>the end</p>
<script>
  var total = __TOTAL__, offset = 0, loading = false, done = false;
  function more() {
    if (loading || done) return;
    loading = true;
    fetch('/api/items?offset=' + offset + '&total=' + total).then(function (r) {
      return r.json();
    }).then(function (items) {
      items.forEach(function (item) {
        var li = document.createElement('li');
        li.className = 'item';
        li.textContent = item;
        document.getElementById('list').appendChild(li);
      });
      offset += items.length;
      if (items.length === 0) { done = true; document.getElementById('end').hidden = false; }
      loading = false;
    });
  }
  window.addEventListener('scroll', function () {
    if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 100) more();
  });
  more();
</script></body></html>"""
)

# Each click of the button appends the next BATCH items; the button goes once all are there.
LOAD_MORE_PAGE: Final = (
    _HEAD.format(title="Load more")
    + """</head><body><ul id="list"></ul><button id="more">Load more</button>
<script>
  var total = __TOTAL__, offset = 0;
  var button = document.getElementById('more');
  function more() {
    button.disabled = true;
    fetch('/api/items?offset=' + offset + '&total=' + total).then(function (r) {
      return r.json();
    }).then(function (items) {
      items.forEach(function (item) {
        var li = document.createElement('li');
        li.className = 'item';
        li.textContent = item;
        document.getElementById('list').appendChild(li);
      });
      offset += items.length;
      button.disabled = false;
      if (offset >= total) button.remove();
    });
  }
  button.addEventListener('click', more);
  more();
</script></body></html>"""
)

# Prices stay hidden until the visitor clicks "show prices"; they then arrive from the API.
REVEAL_PAGE: Final = (
    _HEAD.format(title="Prices on request")
    + """</head><body>
<ul><li class="product">Laptop</li><li class="product">Phone</li>
<li class="product">Tablet</li></ul>
<button id="reveal">Show prices</button><div id="prices"></div>
<script>
  document.getElementById('reveal').addEventListener('click', function () {
    fetch('/api/prices').then(function (r) { return r.json(); }).then(function (prices) {
      document.getElementById('prices').innerHTML = prices.map(function (p) {
        return '<span class="price">' + p + '</span>';
      }).join('');
    });
  });
</script></body></html>"""
)

# A search form: a query typed in, a size selected, sent with Enter or the button; the results
# are written into the page (no navigation).
FORM_PAGE: Final = (
    _HEAD.format(title="Search")
    + """</head><body><form id="search">
<input name="q" value="placeholder text">
<select id="size"><option value="s">Small</option><option value="xl">Extra large</option></select>
<button type="submit">Search</button></form>
<p id="hovered"></p><p id="result"></p>
<script>
  document.getElementById('search').addEventListener('submit', function (event) {
    event.preventDefault();
    var q = document.querySelector('input[name=q]').value;
    var size = document.getElementById('size').value;
    document.getElementById('result').textContent = 'query=' + q + ' size=' + size;
  });
  document.querySelector('button').addEventListener('mouseover', function () {
    document.getElementById('hovered').textContent = 'hovered';
  });
</script></body></html>"""
)

# Two "buy" buttons: the first never shown, the second far below the fold. A click says which
# button took it and whether the browser itself sent it (a trusted event), and the mouse events
# the button saw before it, in order (untrusted ones marked).
BUTTONS_PAGE: Final = (
    _HEAD.format(title="Buy")
    + """</head><body><button class="buy" data-which="hidden" style="display: none">Buy</button>
<div style="height: 3000px"></div><button class="buy" data-which="shown">Buy</button>
<p id="bought"></p><p id="seen"></p>
<script>
  var seen = [];
  document.querySelectorAll('button.buy').forEach(function (button) {
    ['mouseover', 'mousemove', 'mousedown', 'mouseup'].forEach(function (type) {
      button.addEventListener(type, function (event) {
        if (seen[seen.length - 1] !== type) seen.push(type + (event.isTrusted ? '' : '?'));
      });
    });
    button.addEventListener('click', function (event) {
      document.getElementById('seen').textContent = seen.join(' ');
      document.getElementById('bought').innerHTML = '<span class="done">' +
        button.dataset.which + (event.isTrusted ? ' trusted' : ' untrusted') + '</span>';
    });
  });
</script></body></html>"""
)

# Fetches its data a while after it loaded (a dashboard's late API call).
FETCHING_PAGE: Final = (
    _HEAD.format(title="Dashboard")
    + """</head><body><p id="data">waiting</p>
<script>
  setTimeout(function () {
    fetch('/api/data?kind=sales').then(function (r) { return r.json(); }).then(function (d) {
      document.getElementById('data').textContent = d.sales;
    });
  }, 300);
</script></body></html>"""
)

LOGIN_PAGE: Final = (
    _HEAD.format(title="Sign in")
    + """</head><body><form method="post" action="/login">
<input name="user"><input name="password" type="password"><button type="submit">Sign in</button>
</form><p class="error">__ERROR__</p></body></html>"""
)

MEMBERS_PAGE: Final = (
    _HEAD.format(title="Members")
    + """</head><body><p class="welcome">Welcome, __USER__</p>
<span class="member-price">__PRICE__</span></body></html>"""
)


def item_text(number: int) -> str:
    return f"Item {number}"


def items(count: int) -> list[str]:
    """Every item of a list of `count`, in order, as the pages show them."""
    return [item_text(number) for number in range(1, count + 1)]


class StepSite(ThreadedServer):
    """The running shop: `url(path)`, request counts by path, the sessions it handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.port = 0
        self.hits: collections.Counter[str] = collections.Counter()
        self.logins = 0
        self.sessions: set[str] = set()
        self._runners: list[web.AppRunner] = []

    def url(self, path: str) -> str:
        return f"http://{SITE_HOST}:{self.port}{path}"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/scroll", self._templated(SCROLL_PAGE))
        app.router.add_get("/load-more", self._templated(LOAD_MORE_PAGE))
        app.router.add_get("/reveal", self._fixed(REVEAL_PAGE))
        app.router.add_get("/form", self._fixed(FORM_PAGE))
        app.router.add_get("/buttons", self._fixed(BUTTONS_PAGE))
        app.router.add_get("/fetching", self._fixed(FETCHING_PAGE))
        app.router.add_get("/api/items", self._items)
        app.router.add_get("/api/prices", self._json(["$1,299.00", "$499.00", "$329.00"]))
        app.router.add_get("/api/data", self._json({"sales": "42 sold"}))
        app.router.add_get("/login", self._login_form)
        app.router.add_post("/login", self._login)
        app.router.add_get("/members/{n}", self._members)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, SITE_HOST, 0)
        await site.start()
        self.port = _port_of(site)
        self._runners.append(runner)

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def _count(self, request: web.Request) -> None:
        self.hits[request.path] += 1

    def _fixed(self, body: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            self._count(request)
            return web.Response(text=body, content_type="text/html")

        return handler

    def _templated(self, template: str) -> Handler:
        """A list page of `total` items (query parameter; 0: endless)."""

        async def handler(request: web.Request) -> web.Response:
            self._count(request)
            total = int(request.query.get("total", "100"))
            body = template.replace("__TOTAL__", str(total))
            return web.Response(text=body, content_type="text/html")

        return handler

    def _json(self, value: object) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            self._count(request)
            return web.Response(text=json.dumps(value), content_type="application/json")

        return handler

    async def _items(self, request: web.Request) -> web.Response:
        """The next BATCH items from `offset`, up to `total` (0: there is always more)."""
        self._count(request)
        offset = int(request.query["offset"])
        total = int(request.query["total"])
        end = offset + BATCH if total == 0 else min(offset + BATCH, total)
        batch = [item_text(number) for number in range(offset + 1, end + 1)]
        return web.Response(text=json.dumps(batch), content_type="application/json")

    async def _login_form(self, request: web.Request) -> web.Response:
        self._count(request)
        error = html.escape(request.query.get("error", ""))
        return web.Response(text=LOGIN_PAGE.replace("__ERROR__", error), content_type="text/html")

    async def _login(self, request: web.Request) -> web.Response:
        self._count(request)
        form = await request.post()
        if form.get("user") != LOGIN_USER or form.get("password") != LOGIN_PASSWORD:
            raise web.HTTPFound("/login?error=wrong+user+or+password")
        self.logins += 1
        session = f"s{self.logins}"
        self.sessions.add(session)
        response = web.HTTPFound("/members/1")
        response.set_cookie(SESSION_COOKIE, session, httponly=True)
        raise response

    async def _members(self, request: web.Request) -> web.Response:
        """A members' page; without a session, the login form (as shops do)."""
        self._count(request)
        if request.cookies.get(SESSION_COOKIE) not in self.sessions:
            raise web.HTTPFound("/login")
        number = int(request.match_info["n"])
        price = f"${number}00.00 for members"
        body = MEMBERS_PAGE.replace("__USER__", LOGIN_USER).replace("__PRICE__", price)
        return web.Response(text=body, content_type="text/html")


def running_step_site() -> Iterator[StepSite]:
    """Start a StepSite, yield it, stop it (for fixtures)."""
    site = StepSite()
    site.start()
    try:
        yield site
    finally:
        site.stop()
