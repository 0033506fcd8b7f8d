"""Labelled routes: the payload a page followed under a label is scraped with.

A payload's `routes` maps labels to the options of the pages followed under them (`extract`,
`items`, `follow`, `next`, `steps`, `waitFor`: scrapeq_queue.payload.ROUTE_KEYS), as Crawlee's
router does: list page -> detail page -> reviews. A link followed by a rule with `label`, or
handed back by a parser with a label that names a route, becomes a row whose payload is the
parent's with the route's options in place of the page's own and `route` naming the label. The
row carries everything its route says, so any worker can run it, and keeps `routes`, so its
own labelled links are routed in turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapeq_queue.payload import ROUTE_KEYS


def route_names(payload: object) -> frozenset[str]:
    """The labels the payload defines routes for."""
    routes = payload.get("routes") if isinstance(payload, Mapping) else None
    return frozenset(routes) if isinstance(routes, Mapping) else frozenset()


def route_payload(payload: object, label: str, *, max_pages: int | None = None) -> dict[str, Any]:
    """The payload of a page followed under `label`, a label of the payload's routes: the
    parent's options without its own page options, the route's in their place, and `route`.

    `max_pages` is the maxPages of the rule that led to the page: a route's `follow` that
    names none takes it, so the crawl's cap is one number unless a route sets its own."""
    options: dict[str, Any] = dict(payload) if isinstance(payload, Mapping) else {}
    route = options["routes"][label]
    for key in ROUTE_KEYS:
        options.pop(key, None)
    options.update(route)
    follow = options.get("follow")
    if max_pages is not None and isinstance(follow, Mapping) and "maxPages" not in follow:
        options["follow"] = {**follow, "maxPages": max_pages}
    options["route"] = label
    return options
