"""The shop's parsers: a listing page's parser that sends each product to the product parser,
and the product parser. Registered in pyproject.toml under the `scrapeq.parsers` group."""

from __future__ import annotations

import asyncio
import html
import json
import re
from typing import Any

from scrapeq_worker.parser_api import FollowRequest, Page, ParserResult, RetryPage

_PRODUCT_LINK = re.compile(r"/products?/[^/?#]+$")
_JSON_LD = re.compile(
    r'<script[^>]+type="application/ld\+json"[^>]*>(.*?)</script>', re.DOTALL | re.IGNORECASE
)


def listing(page: Page) -> ParserResult:
    """A category page: how many products it lists; each product page goes to `shop.product`.

    A plain function: the worker runs it in a thread, so it may take its time (within the
    job's timeoutSeconds) without holding up other pages."""
    if page.status == 200 and page.html is not None and "Please wait" in page.html:
        # The shop's waiting room: the same URL is worth another try later.
        raise RetryPage("the shop served its waiting room", delay_seconds=60)
    products = [link for link in page.links if _PRODUCT_LINK.search(link)]
    return ParserResult(
        data={"category": page.title, "products": len(products)},
        follow=[FollowRequest(link, label="shop.product") for link in products],
    )


async def product(page: Page) -> dict[str, Any]:
    """A product page: name, price and currency from its JSON-LD, else from the declarative
    fields. An `async def` parser runs on the worker's event loop: it must never block."""
    await asyncio.sleep(0)
    offer: dict[str, Any] = {}
    name = page.fields.get("name") or page.title
    for block in _JSON_LD.findall(page.html or ""):
        try:
            data = json.loads(html.unescape(block))
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("@type") == "Product":
            name = data.get("name", name)
            offers = data.get("offers")
            offer = offers if isinstance(offers, dict) else {}
    return {
        "name": name,
        "price": offer.get("price", page.fields.get("price")),
        "currency": offer.get("priceCurrency"),
        "url": page.final_url,
    }
