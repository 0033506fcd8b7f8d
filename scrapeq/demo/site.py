"""The demo shop: a small JS-rendered website served on loopback for `make demo` and tests.

Every page is an empty shell that a script fills in, so only a real browser sees the content:
- `/` lists the categories;
- `/category/<slug>` lists that category's product links (`a.product`);
- `/product/<id>` shows `h1` (name) and `.price`, both inserted by script;
- `/broken` always answers 500, for the example that fails on purpose.

The catalogue is generated from a fixed seed, so tests know every name and price in advance.
"""

from __future__ import annotations

import html
import http.server
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

CATEGORIES = {
    "laptops": "Laptops",
    "phones": "Phones",
    "cameras": "Cameras",
}
PRODUCTS_PER_CATEGORY = 4
ADJECTIVES = ("Swift", "Quiet", "Bright", "Nimble", "Sturdy", "Compact")


@dataclass(frozen=True)
class Product:
    id: int
    category: str
    name: str
    price: str


def catalogue() -> list[Product]:
    """Every product of the demo shop, in a fixed order."""
    products = []
    for category_index, (slug, title) in enumerate(CATEGORIES.items()):
        for position in range(PRODUCTS_PER_CATEGORY):
            product_id = category_index * 100 + position + 1
            adjective = ADJECTIVES[(product_id * 7) % len(ADJECTIVES)]
            singular = title.removesuffix("s")
            price = f"{(product_id * 37) % 900 + 99}.{(product_id * 13) % 100:02d}"
            products.append(
                Product(product_id, slug, f"{adjective} {singular} {product_id}", price)
            )
    return products


PRODUCTS = {product.id: product for product in catalogue()}

# The shell every page shares: content arrives from a script after load, as on many shops.
SHELL = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title></head>
<body><main id="app">Loading…</main>
<script>
const data = {data};
setTimeout(() => {{
  const app = document.getElementById('app');
  app.innerHTML = '';
  if (data.kind === 'product') {{
    const h1 = document.createElement('h1'); h1.textContent = data.name; app.appendChild(h1);
    const price = document.createElement('span'); price.className = 'price';
    price.textContent = data.price; app.appendChild(price);
  }} else {{
    const h1 = document.createElement('h1'); h1.textContent = data.heading; app.appendChild(h1);
    for (const link of data.links) {{
      const a = document.createElement('a'); a.href = link.href; a.className = link.cls;
      a.textContent = link.text; app.appendChild(a);
      app.appendChild(document.createElement('br'));
    }}
  }}
}}, 30);
</script></body></html>"""


def render(path: str) -> tuple[int, str]:
    """Return (status, HTML) for a path of the demo shop."""
    parts = [part for part in urlsplit(path).path.split("/") if part]
    if not parts:
        links = [
            {"href": f"/category/{slug}", "cls": "category", "text": title}
            for slug, title in CATEGORIES.items()
        ]
        return 200, _page("Demo shop", {"kind": "list", "heading": "Demo shop", "links": links})
    if len(parts) == 2 and parts[0] == "category" and parts[1] in CATEGORIES:
        links = [
            {"href": f"/product/{product.id}", "cls": "product", "text": product.name}
            for product in PRODUCTS.values()
            if product.category == parts[1]
        ]
        heading = CATEGORIES[parts[1]]
        return 200, _page(heading, {"kind": "list", "heading": heading, "links": links})
    if len(parts) == 2 and parts[0] == "product" and parts[1].isdigit():
        product = PRODUCTS.get(int(parts[1]))
        if product is not None:
            data = {"kind": "product", "name": product.name, "price": product.price}
            return 200, _page(product.name, data)
    if parts == ["broken"]:
        return 500, "<!doctype html><title>broken</title><p>This page always fails.</p>"
    return 404, "<!doctype html><title>not found</title><p>No such page.</p>"


def _page(title: str, data: Mapping[str, object]) -> str:
    # json.dumps output is safe inside <script> once "</" cannot close the element.
    encoded = json.dumps(data).replace("</", "<\\/")
    return SHELL.format(title=html.escape(title), data=encoded)


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "scrapeq-demo-shop"

    def do_GET(self) -> None:
        status, body = render(self.path)
        encoded = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request logging; the demo prints its own progress."""


class DemoShop:
    """The demo shop on `host` (127.0.0.1 by default), served from a background thread."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self._host = host
        self._server = http.server.ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-shop")

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._server.server_address[1]}"

    def start(self) -> DemoShop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()
