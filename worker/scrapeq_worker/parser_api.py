"""What a custom parser sees and what it returns: the public contract of scrapeq's parsers.

A parser is a Python callable that a team installs in its own worker image (built FROM
scrapeq's) and registers under the entry-point group `scrapeq.parsers` (docs/parsers.md). A
ScrapeJob or a row never carries code; it only names a parser (`spec.parser`, the payload's
`parser`, or a classic row's `parser_type`).

The parser receives a `Page`: scrapeq's own description of the loaded page, never the
browser's objects, so the engine beneath can change without breaking parsers. It returns a
`ParserResult` (or, for short, the result's `data` as a plain dict):

    from scrapeq_worker.parser_api import FollowRequest, Page, ParserResult

    def product(page: Page) -> ParserResult:
        return ParserResult(
            data={"title": page.title, "price": page.fields.get("price")},
            follow=[FollowRequest(url, label="review") for url in page.links[:3]],
        )

A parser may be a plain function (run in a thread, off the worker's event loop) or an
`async def` function (run on the event loop: it must not block). Either is bounded by the job's
`timeoutSeconds`. Everything in this module is stable: a field is added, never renamed.

On a rendered page an async parser may also act on the page itself through `page.actions`
(`PageActions`): the vocabulary of a payload's `steps` as calls, then the page's HTML or a
declarative extraction as they are now:

    async def reviews(page: Page) -> ParserResult:
        assert page.actions is not None  # rendered pages only
        await page.actions.load_more("button.more-reviews", max_clicks=20)
        found = await page.actions.extract(items={"selector": ".review", "fields": {"text": ""}})
        return ParserResult(data={"reviews": found["items"]})
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

# The entry-point group parser packages register their callables under (name = callable).
ENTRY_POINT_GROUP = "scrapeq.parsers"


class PageActions(abc.ABC):
    """The rendered page itself, while an async parser runs (`Page.actions`).

    Each call is a step of the payload's `steps` vocabulary (docs/scrapejob.md, "Steps"),
    checked as a payload's steps are, with its own `timeout_seconds` and within the job's
    `timeoutSeconds` counted from the page's start; each returns that step's report (what a
    scroll or "load more" found, why it stopped). A step that fails raises the worker's own
    error: the row then fails as a payload step would (`step_failed`, retried; a request the
    guard refuses fails it `blocked_address`). Every request a step causes goes through the
    worker's egress checks. Values typed are literal: a parser that needs a secret reads it
    from its own image's environment, never from the row.
    """

    @abc.abstractmethod
    async def run_steps(self, steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Run steps given as a payload gives them (`{"action": "click", "selector": ...}`),
        in order; their reports. Raises ValueError for steps the vocabulary refuses."""

    @abc.abstractmethod
    async def html(self) -> str | None:
        """The document as it is now, at most the page's `html_limit` characters."""

    @abc.abstractmethod
    async def extract(
        self,
        extract: Mapping[str, Any] | None = None,
        *,
        items: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A declarative extraction of the page as it is now: `{"fields": ..., "items": ...}`
        for an `extract` and `items` spec as a payload gives them (transforms not applied).
        Raises ValueError for a spec the payload rules refuse."""

    async def click(
        self,
        selector: str,
        *,
        wait_for: str | None = None,
        wait_for_navigation: bool = False,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        return await self._one(
            "click",
            selector=selector,
            waitFor=wait_for,
            waitForNavigation=wait_for_navigation or None,
            timeoutSeconds=timeout_seconds,
        )

    async def scroll(
        self,
        selector: str | None = None,
        *,
        count: int | None = None,
        max_rounds: int | None = None,
        settle_seconds: float | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        return await self._one(
            "scroll",
            selector=selector,
            count=count,
            maxRounds=max_rounds,
            settleSeconds=settle_seconds,
            timeoutSeconds=timeout_seconds,
        )

    async def load_more(
        self,
        selector: str,
        *,
        max_clicks: int | None = None,
        settle_seconds: float | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        return await self._one(
            "loadMore",
            selector=selector,
            maxClicks=max_clicks,
            settleSeconds=settle_seconds,
            timeoutSeconds=timeout_seconds,
        )

    async def type(
        self, selector: str, value: str, *, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "type", selector=selector, value=value, timeoutSeconds=timeout_seconds
        )

    async def fill(
        self, selector: str, value: str, *, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "fill", selector=selector, value=value, timeoutSeconds=timeout_seconds
        )

    async def select(
        self, selector: str, value: str, *, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "select", selector=selector, value=value, timeoutSeconds=timeout_seconds
        )

    async def hover(self, selector: str, *, timeout_seconds: float | None = None) -> dict[str, Any]:
        return await self._one("hover", selector=selector, timeoutSeconds=timeout_seconds)

    async def press(
        self, key: str, *, selector: str | None = None, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one("press", key=key, selector=selector, timeoutSeconds=timeout_seconds)

    async def wait_for(
        self, selector: str, *, hidden: bool = False, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "waitFor",
            selector=selector,
            state="hidden" if hidden else None,
            timeoutSeconds=timeout_seconds,
        )

    async def wait_for_response(
        self, url_pattern: str, *, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "waitForResponse", urlPattern=url_pattern, timeoutSeconds=timeout_seconds
        )

    async def wait_for_network_idle(
        self, *, idle_seconds: float | None = None, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self._one(
            "waitForNetworkIdle", idleSeconds=idle_seconds, timeoutSeconds=timeout_seconds
        )

    async def _one(self, action: str, **options: Any) -> dict[str, Any]:
        step = {"action": action, **{k: v for k, v in options.items() if v is not None}}
        (report,) = await self.run_steps([step])
        return report


@dataclass(frozen=True)
class Page:
    """One loaded page, as scrapeq saw it.

    `html` is the document as the parser should read it: for a rendered page the DOM after
    the page's scripts ran (serialised once extraction is done), for `render: false` the
    decoded body. It is at most `html_limit` characters; `html_truncated` says it was cut.
    It is None when the page is not HTML (a PDF, an image): then only the status, headers and
    content type are known. `title`, `fields` and `links` are what the row's declarative
    `extract` (and `follow.selector`) found, exactly as stored in the default result.
    """

    # The URL the row asked for.
    url: str
    # The URL the page ended on, after redirects (and, rendered, after script navigations).
    final_url: str
    # The document's HTTP status (None when the engine could not tell).
    status: int | None
    # The document's response headers, names lower-cased.
    headers: Mapping[str, str]
    content_type: str | None
    # "browser" (rendered in Chromium) or "http" (fetched over plain HTTP).
    engine: str
    html: str | None
    html_truncated: bool
    html_limit: int
    title: str | None
    fields: Mapping[str, Any]
    links: Sequence[str]
    # The row's parser_type column and its payload, read-only: a parser may branch on them.
    parser_type: str
    payload: Mapping[str, Any]
    # The rendered page itself while an async parser runs (None for render: false pages, and
    # outside the parser's call).
    actions: PageActions | None = None


@dataclass(frozen=True)
class FollowRequest:
    """A URL the parser wants scraped as a followed row of this one.

    It is checked like a link the row's `follow.selector` found (http(s) only, same site
    unless `follow.sameHost` is false, `include`/`exclude`, the crawl's `maxPages` and
    `maxDepth`), and fetched through the same egress guard as every page. `label`, when
    given, becomes the followed row's `parser_type`: the parser registered under that name
    parses it (a list page's parser sends its detail pages to a detail parser).
    """

    url: str
    label: str | None = None


@dataclass(frozen=True)
class ParserResult:
    """What a parser returns: `data`, the row's result (a JSON object, at most the worker's
    `--max-result-bytes`), and the pages to follow."""

    data: Mapping[str, Any]
    follow: Sequence[FollowRequest] = field(default_factory=tuple)


class RetryPage(Exception):
    """Raised by a parser when the page should be scraped again later (the site served a
    placeholder, a rate-limit page): the row is retried per its retry policy (reason
    `parser_retry`), after at least `delay_seconds` when given. Any other exception fails the
    row for good (`parser_error`): the same code on the same page fails the same way."""

    def __init__(self, message: str, *, delay_seconds: float | None = None) -> None:
        super().__init__(message)
        self.delay_seconds = delay_seconds


# What a parser may return: a ParserResult, or only the result's data.
ParserOutput: TypeAlias = ParserResult | Mapping[str, Any]
# A registered parser: sync or async, taking one Page.
Parser: TypeAlias = Callable[[Page], ParserOutput | Awaitable[ParserOutput]]

__all__ = [
    "ENTRY_POINT_GROUP",
    "FollowRequest",
    "Page",
    "PageActions",
    "Parser",
    "ParserOutput",
    "ParserResult",
    "RetryPage",
]
