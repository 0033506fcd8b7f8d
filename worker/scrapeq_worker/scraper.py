"""One job's page, start to finish: pick the engine, build the capped JSON result and the links
to follow. How many pages of one site are fetched at once is the claim's business (a row of a
site at its limit is not handed out, whichever worker asks), so nothing here counts per site.

The loop knows nothing about browsers and the engines know nothing about the queue; this
module is where a `ClaimedJob`'s URL and options meet an engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .browser import BrowserPool
from .extraction import PageOutcome, cap_result
from .following import FollowPlan, follow_dropped, plan_follow, select_links
from .http_engine import HttpEngine
from .job_options import FollowOptions, JobOptions
from .metrics import WorkerMetrics


@dataclass(frozen=True)
class ScrapeResult:
    """The stored result of a page and the URLs to enqueue as its children."""

    result: dict[str, Any]
    follow_urls: tuple[str, ...]
    # The follow options the links were chosen by (None: nothing to follow from this page).
    follow: FollowOptions | None = None


class Scraper:
    """Scrapes one URL with the right engine and returns its capped result."""

    def __init__(
        self,
        browser: BrowserPool,
        http: HttpEngine,
        *,
        max_result_bytes: int,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.browser = browser
        self.http = http
        self.max_result_bytes = max_result_bytes
        self._metrics = metrics

    async def scrape(
        self, url: str, options: JobOptions, *, depth: int = 0, owner: str | None = None
    ) -> ScrapeResult:
        """Fetch `url` as `options` say; raise a WorkerError subclass on failure. `owner` (the
        ScrapeJob's uid) picks the browser contexts the page may share state with."""
        follow = options.follow if options.follow and depth < options.follow.max_depth else None
        follow_selector = follow.selector if follow else None
        engine = "browser" if options.render else "http"
        gauge = self._metrics.pages_in_flight.labels(engine) if self._metrics else None
        if gauge is not None:
            gauge.inc()
        try:
            if options.render:
                outcome = await self.browser.render(
                    url, options, follow_selector=follow_selector, owner=owner
                )
            else:
                outcome = await self.http.fetch(url, options, follow_selector=follow_selector)
        finally:
            if gauge is not None:
                gauge.dec()
        plan = FollowPlan(())
        document = result_document(outcome, engine)
        if follow is not None and outcome.extracted is not None:
            chosen = select_links(
                outcome.extracted.follow, follow, page_urls=(url, outcome.final_url or url)
            )
            plan = plan_follow(chosen, follow, owned=owner is not None)
            link_cap = self.browser.settings.max_links if options.render else self.http.max_links
            dropped = follow_dropped(len(outcome.extracted.follow), link_cap, plan.dropped)
            if dropped:
                document["follow_dropped"] = dropped
        return ScrapeResult(
            result=cap_result(document, self.max_result_bytes),
            follow_urls=plan.urls,
            follow=follow,
        )


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
    if outcome.extracted is None and outcome.content_length is not None:
        document["content_length"] = outcome.content_length
    if outcome.blocked_requests:
        document["blocked_requests"] = outcome.blocked_requests
    if outcome.skipped_requests:
        document["skipped_requests"] = outcome.skipped_requests
    if outcome.steps:
        document["steps"] = outcome.steps
    return document
