"""Which links of a page become followed rows, and what payload those rows carry.

The page's engine collects the links matching `follow.selector` (absolute, in page order); this
module keeps the ones a crawl wants: http(s) only, on the same site unless `sameDomain` is
false, matching an `include` pattern when there are any and no `exclude` pattern. The queue
then deduplicates them per ScrapeJob and applies the job-wide `maxPages` cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .job_options import FollowOptions


def site_host(url: str) -> str:
    """The host of `url`, lower-cased, without a leading "www." ("" when there is none)."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""
    return host.removeprefix("www.")


def select_links(
    links: Iterable[str], follow: FollowOptions, *, page_urls: Iterable[str]
) -> list[str]:
    """The links to follow, in page order, each once.

    `page_urls` are the URL the job asked for and the URL the page ended on (after redirects):
    with `same_domain` a link must be on the host of one of them ("www." ignored), so a site
    that redirects example.com to www.example.com is still crawled.
    """
    hosts = {host for host in (site_host(url) for url in page_urls) if host}
    chosen: list[str] = []
    seen: set[str] = set()
    for link in links:
        if link in seen:
            continue
        seen.add(link)
        try:
            scheme = urlsplit(link).scheme.lower()
        except ValueError:
            continue
        if scheme not in ("http", "https"):
            continue
        if follow.same_domain and site_host(link) not in hosts:
            continue
        if follow.include and not any(pattern.search(link) for pattern in follow.include):
            continue
        if any(pattern.search(link) for pattern in follow.exclude):
            continue
        chosen.append(link)
    return chosen


def followed_payload(payload: object, follow: FollowOptions) -> dict[str, Any] | None:
    """The payload of the followed rows: the parent's, with `follow.extract` as its `extract`.

    None means "the parent's payload unchanged" (the queue copies it). The `follow` option
    stays, so followed pages follow further until maxDepth.
    """
    if follow.extract is None:
        return None
    options: dict[str, Any] = dict(payload) if isinstance(payload, Mapping) else {}
    options["extract"] = dict(follow.extract)
    return options
