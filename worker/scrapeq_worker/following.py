"""Which links of a page become followed rows, and what payload those rows carry.

The page's engine collects the links matching `follow.selector` (absolute, in page order); this
module keeps the ones a crawl wants: http(s) only, on the same host unless `sameHost` is
false, matching an `include` pattern when there are any and no `exclude` pattern.

`maxPages` bounds the followed pages of a whole crawl, with or without an owner. For a
ScrapeJob's rows the queue deduplicates the links per ScrapeJob and counts the job's followed
rows (`complete_job`'s `follow_limit`). A row without an owner (a classic row) has no job to
count in, so its budget travels with it: the row's `follow.maxPages` is how many followed
pages it may still lead to, at every depth. It queues at most that many links and hands what
is left to them, split as evenly as it goes (`page_budgets`) in each one's own
`follow.maxPages`; a followed page left with nothing carries no `follow`. The crawl of a
classic row therefore queues at most its `maxPages` rows in all, as a ScrapeJob's does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq_queue import FollowUrl
from scrapeq_queue.payload import DEFAULT_FOLLOW_MAX_PAGES

from .job_options import FollowOptions
from .routes import route_names, route_payload

# The rules for a parser's follow requests on a row whose payload has no `follow`: one level
# deep, the same site, the default page budget. Its followed rows carry the parent's payload
# unchanged (they follow nothing further: they are at depth 1).
PARSER_FOLLOW: Final = FollowOptions(selector="", max_depth=1, max_pages=DEFAULT_FOLLOW_MAX_PAGES)


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
    with `same_host` a link must be on the host of one of them ("www." ignored), so a site
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
        if follow.same_host and site_host(link) not in hosts:
            continue
        if follow.include and not any(pattern.search(link) for pattern in follow.include):
            continue
        if any(pattern.search(link) for pattern in follow.exclude):
            continue
        chosen.append(link)
    return chosen


def followed_payload(payload: object, follow: FollowOptions) -> dict[str, Any] | None:
    """The payload of the followed rows: the parent's, with `follow.extract` as its `extract`
    and without its `steps`.

    None means "the parent's payload unchanged" (the queue copies it). The `follow` option
    stays, so followed pages follow further until maxDepth; so does `session`, whose login
    serves every page of the job. `steps` are what a visitor does on the given pages (scroll a
    list, reveal its links): run on the pages those lead to they would act on elements that
    are not there.
    """
    has_steps = isinstance(payload, Mapping) and "steps" in payload
    if follow.extract is None and not has_steps:
        return None
    options: dict[str, Any] = dict(payload) if isinstance(payload, Mapping) else {}
    options.pop("steps", None)
    if follow.extract is not None:
        options["extract"] = dict(follow.extract)
    return options


@dataclass(frozen=True)
class FollowPlan:
    """The links a page queues and how many it dropped because the crawl's maxPages was
    reached (for a ScrapeJob's rows the queue may drop more: it counts the whole job)."""

    urls: tuple[str, ...]
    dropped: int = 0


def plan_follow(links: Sequence[str], follow: FollowOptions, *, owned: bool) -> FollowPlan:
    """Cap the chosen `links` by the crawl's budget: a row without an owner queues at most its
    `follow.maxPages` links; a ScrapeJob's row offers them all (the queue counts its job)."""
    if owned:
        return FollowPlan(tuple(links))
    kept = tuple(links[: follow.max_pages])
    return FollowPlan(kept, len(links) - len(kept))


def follow_dropped(read: int, link_cap: int, over_budget: int) -> dict[str, int]:
    """What a page's result says about links it did not queue because of a cap (empty: none):
    `link_cap` when the page had as many links matching follow.selector as the worker reads
    per page (any past them were not looked at), `max_pages` the links past the crawl's
    budget."""
    dropped: dict[str, int] = {}
    if read >= link_cap:
        dropped["link_cap"] = link_cap
    if over_budget:
        dropped["max_pages"] = over_budget
    return dropped


def page_budgets(children: int, pages: int) -> list[int]:
    """`pages` followed pages split among `children` followed rows: as evenly as it goes, the
    first ones taking the remainder; the shares add up to `pages`."""
    if children <= 0:
        return []
    share, remainder = divmod(max(0, pages), children)
    return [share + (1 if position < remainder else 0) for position in range(children)]


def followed_rows(
    payload: object,
    urls: Sequence[str],
    follow: FollowOptions | None,
    *,
    owned: bool,
    labels: Mapping[str, str] | None = None,
) -> list[FollowUrl]:
    """The followed rows of a completed page: each link with the payload it carries.

    A ScrapeJob's rows share `followed_payload` (None: the parent's). A row without an owner
    hands each followed row its share of what is left of the crawl's maxPages once these links
    are counted (see the module's docstring). A rule with a `label` gives its rows the payload
    of that route (routes.py). A link a parser gave a label (`labels`) that names a route
    becomes a row of that route; any other label becomes a row whose parser_type is that label
    and whose payload names no `parser`, so the parser registered under the label parses it.
    A followed row's payload has no `next` unless its route gives one: pagination is the
    listing's (pagination.py), and a followed page starts no chain of its own.
    """
    if follow is None or not urls:
        return []
    if follow.label is not None:
        routed = route_payload(payload, follow.label, max_pages=follow.max_pages)
        rows = _routed_rows(routed, urls, follow, owned=owned)
    else:
        rows = _followed_rows(payload, urls, follow, owned=owned)
        if isinstance(payload, Mapping) and "next" in payload:
            rows = [_without_next(row, payload) for row in rows]
    if not labels:
        return rows
    routes = route_names(payload)
    return [_labelled(row, labels.get(row.url), payload, routes) for row in rows]


def _routed_rows(
    routed: dict[str, Any], urls: Sequence[str], follow: FollowOptions, *, owned: bool
) -> list[FollowUrl]:
    """The rows of a labelled rule, each with its route's payload (its steps included: they
    are the route's own). A row without an owner hands its remaining budget on in the route's
    `follow`, as `_with_budget` does; a route without follow rules follows nothing."""
    if owned or "follow" not in routed:
        return [FollowUrl(url, payload=dict(routed)) for url in urls]
    budgets = page_budgets(len(urls), follow.max_pages - len(urls))
    rows: list[FollowUrl] = []
    for url, budget in zip(urls, budgets, strict=True):
        options = dict(routed)
        if budget <= 0:
            options.pop("follow")
        else:
            options["follow"] = {**routed["follow"], "maxPages": budget}
        rows.append(FollowUrl(url, payload=options))
    return rows


def _without_next(row: FollowUrl, parent_payload: Mapping[str, Any]) -> FollowUrl:
    source = row.payload if row.payload is not None else parent_payload
    options = {key: value for key, value in source.items() if key != "next"}
    return FollowUrl(row.url, payload=options, parser_type=row.parser_type)


def _labelled(
    row: FollowUrl, label: str | None, parent_payload: object, routes: frozenset[str]
) -> FollowUrl:
    if label is None:
        return row
    if label in routes:
        return FollowUrl(row.url, payload=route_payload(parent_payload, label))
    source = row.payload if row.payload is not None else parent_payload
    options: dict[str, Any] = dict(source) if isinstance(source, Mapping) else {}
    options.pop("parser", None)
    return FollowUrl(row.url, payload=options, parser_type=label)


def _followed_rows(
    payload: object, urls: Sequence[str], follow: FollowOptions, *, owned: bool
) -> list[FollowUrl]:
    if follow is PARSER_FOLLOW:
        return [FollowUrl(url) for url in urls]
    if owned:
        shared = followed_payload(payload, follow)
        return [FollowUrl(url, payload=shared) for url in urls]
    budgets = page_budgets(len(urls), follow.max_pages - len(urls))
    return [
        FollowUrl(url, payload=_with_budget(payload, follow, budget))
        for url, budget in zip(urls, budgets, strict=True)
    ]


def _with_budget(payload: object, follow: FollowOptions, pages: int) -> dict[str, Any]:
    options: dict[str, Any] = dict(payload) if isinstance(payload, Mapping) else {}
    options.pop("steps", None)  # see followed_payload
    if follow.extract is not None:
        options["extract"] = dict(follow.extract)
    if pages <= 0:
        options.pop("follow", None)
    else:
        raw = options.get("follow")
        options["follow"] = {**(raw if isinstance(raw, Mapping) else {}), "maxPages": pages}
    return options
