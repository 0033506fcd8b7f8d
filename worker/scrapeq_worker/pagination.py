"""The next page of a paginated listing: which link it is, what its row carries, and what the
page's result says about the chain.

A payload's `next` names the "next page" link of a listing. The first link matching it (http(s)
only, on the page's own site, not the page itself) becomes a row of the same job with the same
payload, one position further along the chain (`next.page`), until the chain has
`next.maxPages` pages. Chain rows keep their parent's depth: pagination does not count against
`follow.maxDepth`, and the queue counts them apart from the job's followed pages
(`FollowUrl.next_page`). Every page says where it stands in its result's `pagination`.

With `next.click` the next page is what clicking a button shows in the same tab (a listing whose
"next" is run by a script, with no link to queue): the renderer clicks and reads page after page
within the row, and `clicked_pages.merge_clicked_pages` makes one result of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapeq_queue import FollowUrl

from .following import site_host
from .job_options import NextOptions


@dataclass(frozen=True)
class NextPage:
    """A page's place in its chain: the result's `pagination` object and the row to queue."""

    result: dict[str, Any]
    row: FollowUrl | None


def next_page(
    links: Iterable[str],
    options: NextOptions,
    payload: object,
    *,
    page_urls: Sequence[str],
) -> NextPage:
    """The next page of the chain among `links` (the page's links matching next.selector, in
    page order). `page_urls` are the URL the row asked for and the URL the page ended on.

    The result's `pagination` holds `page` (this page's chain position) and `next` (the URL
    queued as the next page, or null); a chain that ends here says why in `end`: `last_page`
    (no next link on the page) or `max_pages` (the chain has next.maxPages pages; `next` is
    then null and `dropped` the link not followed).
    """
    link = _next_link(links, page_urls)
    result: dict[str, Any] = {"page": options.page, "next": None}
    if link is None:
        result["end"] = "last_page"
        return NextPage(result, None)
    if options.page >= options.max_pages:
        result.update(end="max_pages", max_pages=options.max_pages, dropped=link)
        return NextPage(result, None)
    result["next"] = link
    return NextPage(
        result, FollowUrl(link, payload=_chain_payload(payload, options), next_page=True)
    )


def _next_link(links: Iterable[str], page_urls: Sequence[str]) -> str | None:
    hosts = {host for host in (site_host(url) for url in page_urls) if host}
    for link in links:
        try:
            scheme = urlsplit(link).scheme.lower()
        except ValueError:
            continue
        # A "next" link of the last page often points at the page itself (or is disabled).
        if scheme in ("http", "https") and site_host(link) in hosts and link not in page_urls:
            return link
    return None


def _chain_payload(payload: object, options: NextOptions) -> dict[str, Any]:
    """The payload of the next page: the page's own, one position further along the chain."""
    copied: dict[str, Any] = dict(payload) if isinstance(payload, Mapping) else {}
    raw = copied.get("next")
    copied["next"] = {**(raw if isinstance(raw, Mapping) else {}), "page": options.page + 1}
    return copied
