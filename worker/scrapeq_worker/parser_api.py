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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

# The entry-point group parser packages register their callables under (name = callable).
ENTRY_POINT_GROUP = "scrapeq.parsers"


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
    "Parser",
    "ParserOutput",
    "ParserResult",
    "RetryPage",
]
