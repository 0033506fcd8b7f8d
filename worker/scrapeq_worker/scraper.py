"""One job's page, start to finish: pick the engine, build the capped JSON result and the links
to follow. How many pages of one site are fetched at once is the claim's business (a row of a
site at its limit is not handed out, whichever worker asks), so nothing here counts per site.

The loop knows nothing about browsers and the engines know nothing about the queue; this
module is where a `ClaimedJob`'s URL and options meet an engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scrapeq_queue import FollowUrl, PageMemory, PageVisit
from scrapeq_queue.payload import BlockMarker

from .artifacts import Artifacts
from .browser import BrowserPool
from .errors import PageBlocked
from .extraction import ExtractedPage, FieldSpec, PageOutcome, normalise_text
from .following import PARSER_FOLLOW, FollowPlan, follow_dropped, plan_follow, select_links
from .http_engine import HttpEngine
from .job_options import BLOCK_MARKER_FIELD, FollowOptions, JobOptions
from .metrics import WorkerMetrics
from .object_store import ObjectStore
from .pagination import next_page
from .parser_api import PageActions
from .parsers import ParsedPage, ParserRunner, page_for_parser
from .recrawl import RecrawlOutcome, conditional_headers, mark_fetched, not_modified_document


@dataclass(frozen=True)
class ScrapeResult:
    """The stored result of a page and the URLs to enqueue as its children."""

    result: dict[str, Any]
    follow_urls: tuple[str, ...]
    # The follow options the links were chosen by (None: nothing to follow from this page).
    follow: FollowOptions | None = None
    # A parser's follow labels: URL -> the followed row's parser_type.
    follow_labels: Mapping[str, str] = field(default_factory=dict)
    # The next page of the row's pagination chain (payload `next`), to queue beside them.
    next_page: FollowUrl | None = None
    # A row with a crawl key (payload crawlKey): what its crawl remembers of this fetch, and
    # how the page counts (recrawl.py); None for other rows.
    visit: PageVisit | None = None
    recrawl: RecrawlOutcome | None = None
    # With a session: the page's cookie jar afterwards (session_pool.py saves it).
    cookies: list[dict[str, Any]] | None = None


class Scraper:
    """Scrapes one URL with the right engine and returns its capped result."""

    def __init__(
        self,
        browser: BrowserPool,
        http: HttpEngine,
        *,
        max_result_bytes: int,
        metrics: WorkerMetrics | None = None,
        parsers: ParserRunner | None = None,
        html_limit: int = 0,
        object_store: ObjectStore | None = None,
    ) -> None:
        """`parsers` runs the parsers a row may name; `html_limit` is how many characters of
        a page's HTML a parser gets (the page size limit is the natural bound), and the most
        a kept html artifact has. `object_store` takes page artifacts and results over
        `max_result_bytes` (None: html and text stay in the result, capped)."""
        self.browser = browser
        self.http = http
        self.max_result_bytes = max_result_bytes
        self._metrics = metrics
        self.parsers = parsers
        self.html_limit = html_limit
        self.artifacts = Artifacts(
            store=object_store,
            html_limit=html_limit or max_result_bytes,
            max_result_bytes=max_result_bytes,
        )

    async def scrape(
        self,
        url: str,
        options: JobOptions,
        *,
        depth: int = 0,
        owner: str | None = None,
        parser: str | None = None,
        parser_type: str = "default",
        payload: Mapping[str, Any] | None = None,
        row: tuple[str, int] | None = None,
        crawl: bool = False,
        memory: PageMemory | None = None,
    ) -> ScrapeResult:
        """Fetch `url` as `options` say; raise a WorkerError subclass on failure. `owner` (the
        ScrapeJob's uid) picks the browser contexts the page may share state with. `parser`
        (a name chosen by ParserRegistry.choose) runs on the page; the row's `parser_type` and
        `payload` are shown to it. `row` (queue, job id) names the row's objects in the object
        store; without it, artifacts stay in the result. `crawl`: the row names a crawl (its
        result says whether it changed), whose `memory` of the URL (None: never fetched) gives
        the validators of a conditional request; a 304 ends the row without extraction."""
        if parser is not None:
            options = replace(options, html_limit=self.html_limit)
        options = self.artifacts.prepare(options)
        follow = options.follow if options.follow and depth < options.follow.max_depth else None
        follow_selector = follow.selector if follow else None
        deadline = time.monotonic() + options.timeout_seconds
        engine = "browser" if options.render else "http"
        # A page whose links or parser the row needs is fetched in full: a 304 would read none.
        conditional = (
            conditional_headers(memory)
            if crawl and follow is None and options.next is None and parser is None
            else {}
        )
        if conditional and options.render:
            # Rendered rows ask first with a plain conditional GET through the same guard and
            # proxies; only a page that changed (or lost its validators) is rendered.
            checked = await self.http.not_modified(url, options, conditional)
            if checked is not None:
                assert memory is not None
                return self._not_modified(checked, engine="browser", memory=memory)
        gauge = self._metrics.pages_in_flight.labels(engine) if self._metrics else None
        if gauge is not None:
            gauge.inc()
        parsed_pages: list[ParsedPage] = []

        async def finish(outcome: PageOutcome, actions: PageActions | None) -> None:
            """Transforms, structured data, then the row's parser: on a rendered row with a
            parser, while its tab is still held (the parser may act on the live page)."""
            if outcome.extracted is not None:
                matched = _matched_block_marker(outcome.extracted, options)
                if matched is not None:
                    raise PageBlocked(
                        f"the page from {outcome.final_url or url} is blocked: it matches block "
                        f"marker {json.dumps(matched.as_json())}",
                        rule="marker",
                    )
                if any(spec.transforms for spec in _all_fields(options)):
                    outcome.extracted = await self.http.transform(
                        outcome.extracted,
                        options.fields,
                        options.items,
                        url=outcome.final_url or url,
                        deadline=deadline,
                    )
                await self._read_structured_data(outcome, options, deadline)
            if parser is not None:
                assert self.parsers is not None, "a parser was chosen without a ParserRunner"
                parsed_pages.append(
                    await self.parsers.run(
                        parser,
                        page_for_parser(
                            outcome,
                            engine=engine,
                            parser_type=parser_type,
                            payload=payload or {},
                            html_limit=self.html_limit,
                            actions=actions,
                        ),
                        timeout_seconds=options.timeout_seconds,
                    )
                )

        try:
            if options.render:
                outcome = await self.browser.render(
                    url,
                    options,
                    follow_selector=follow_selector,
                    owner=owner,
                    finish=finish if parser is not None else None,
                )
            else:
                outcome = await self.http.fetch(
                    url,
                    options,
                    follow_selector=follow_selector,
                    conditional=None if options.render else conditional,
                )
        finally:
            if gauge is not None:
                gauge.dec()
        if outcome.not_modified:
            assert memory is not None
            return self._not_modified(outcome, engine=engine, memory=memory)
        if not (options.render and parser is not None):
            await finish(outcome, None)
        plan = FollowPlan(())
        text = self.artifacts.take_text(outcome, options)
        document = result_document(outcome, engine)
        page_urls = (url, outcome.final_url or url)
        chosen: list[str] = []
        read = 0
        if follow is not None and outcome.extracted is not None:
            chosen = select_links(outcome.extracted.follow, follow, page_urls=page_urls)
            read = len(outcome.extracted.follow)
        if options.route is not None:
            document["route"] = options.route
        chain_row: FollowUrl | None = None
        if outcome.pagination is not None:
            # next.click: the pages a button showed were read within this row.
            document["pagination"] = outcome.pagination
        elif options.next is not None and outcome.extracted is not None:
            chain = next_page(
                outcome.extracted.next_links, options.next, payload, page_urls=page_urls
            )
            document["pagination"] = chain.result
            chain_row = chain.row
        labels: dict[str, str] = {}
        if parser is not None:
            (parsed,) = parsed_pages
            document["parser"] = parser
            document["data"] = parsed.data
            # A row without `follow` may still follow what its parser asks for, one level deep
            # within the default page budget; with `follow`, its rules decide.
            if options.follow is None and depth < PARSER_FOLLOW.max_depth:
                follow = PARSER_FOLLOW
            if follow is not None and parsed.follow:
                requested = select_links(
                    (request.url for request in parsed.follow), follow, page_urls=page_urls
                )
                for request in parsed.follow:
                    if request.label is not None:
                        labels.setdefault(request.url, request.label)
                chosen = list(dict.fromkeys([*chosen, *requested]))
            if parsed.dropped:
                document["parser_follow_dropped"] = parsed.dropped
        if follow is not None and chosen:
            plan = plan_follow(chosen, follow, owned=owner is not None)
        if follow is not None and (read or plan.dropped):
            link_cap = self.browser.settings.max_links if options.render else self.http.max_links
            dropped = follow_dropped(read, link_cap, plan.dropped)
            if dropped:
                document["follow_dropped"] = dropped
        visit: PageVisit | None = None
        recrawl: RecrawlOutcome | None = None
        if crawl:
            visit, recrawl = mark_fetched(
                document, memory, headers=outcome.headers, content_hash=outcome.content_hash
            )
        return ScrapeResult(
            result=await self.artifacts.place(document, outcome, options, text=text, row=row),
            follow_urls=plan.urls,
            follow=follow,
            follow_labels={link: labels[link] for link in plan.urls if link in labels},
            next_page=chain_row,
            visit=visit,
            recrawl=recrawl,
            cookies=outcome.cookies,
        )

    def _not_modified(
        self, outcome: PageOutcome, *, engine: str, memory: PageMemory
    ) -> ScrapeResult:
        """The result of a page the site answered 304: unchanged, no links to follow; the
        validators it sent again are remembered."""
        etag = outcome.headers.get("etag") or None
        last_modified = outcome.headers.get("last-modified") or None
        return ScrapeResult(
            result=not_modified_document(
                outcome.url, outcome.final_url, engine, memory, outcome.timing_ms
            ),
            follow_urls=(),
            visit=PageVisit(etag, last_modified, None, None, not_modified=True),
            recrawl="not_modified",
            cookies=outcome.cookies,
        )

    async def _read_structured_data(
        self, outcome: PageOutcome, options: JobOptions, deadline: float
    ) -> None:
        """A rendered page's structured data, read from its HTML in an extraction process (the
        static engine reads it with the page)."""
        page = outcome.extracted
        if page is None or page.document_html is None:
            return
        html, page.document_html = page.document_html, None
        page.structured_data = await self.http.structured_data(
            html,
            options.structured_data,
            url=outcome.final_url or outcome.url,
            base_url=page.link_base or outcome.final_url or outcome.url,
            deadline=deadline,
        )


def _matched_block_marker(extracted: ExtractedPage, options: JobOptions) -> BlockMarker | None:
    """The first of the job's block markers the page matches, if any; the fields that read
    them leave `extracted` either way (they are never part of a result)."""
    matched: BlockMarker | None = None
    for position, marker in enumerate(options.block_markers):
        texts = extracted.fields.pop(f"{BLOCK_MARKER_FIELD}{position}", None) or []
        if matched is not None or not texts:
            continue
        if marker.text is None or any(
            normalise_text(marker.text).casefold() in normalise_text(str(text)).casefold()
            for text in texts
        ):
            matched = marker
    return matched


def _all_fields(options: JobOptions) -> tuple[FieldSpec, ...]:
    """The job's extract fields and item fields."""
    return (*options.fields, *(options.items.fields if options.items is not None else ()))


def result_document(outcome: PageOutcome, engine: str) -> dict[str, Any]:
    """The JSON object stored for one page (documented in docs/worker.md)."""
    document: dict[str, Any] = {
        "url": outcome.url,
        "final_url": outcome.final_url,
        "status": outcome.status,
        "content_type": outcome.content_type,
        "engine": engine,
        "rendered": outcome.extracted is not None,
        "title": outcome.extracted.title if outcome.extracted else None,
        "fields": outcome.extracted.fields if outcome.extracted else {},
        "links": outcome.extracted.links if outcome.extracted else [],
        "timing_ms": outcome.timing_ms,
    }
    if outcome.extracted is not None and outcome.extracted.text_sample is not None:
        document["text_sample"] = outcome.extracted.text_sample
    if outcome.extracted is not None and outcome.extracted.items is not None:
        document["items"] = outcome.extracted.items
    if outcome.extracted is not None and outcome.extracted.structured_data is not None:
        document["structured_data"] = outcome.extracted.structured_data.items
        if outcome.extracted.structured_data.errors:
            document["structured_data_errors"] = outcome.extracted.structured_data.errors
    if outcome.extracted is not None and outcome.extracted.truncated:
        document["truncated"] = list(outcome.extracted.truncated)
    if outcome.extracted is None and outcome.content_length is not None:
        document["content_length"] = outcome.content_length
    if outcome.blocked_requests:
        document["blocked_requests"] = outcome.blocked_requests
    if outcome.skipped_requests:
        document["skipped_requests"] = outcome.skipped_requests
    if outcome.steps:
        document["steps"] = outcome.steps
    return document
