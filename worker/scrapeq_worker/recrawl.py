"""What a crawl's memory decides for one page (docs/worker.md, "Recurring crawls"): the
conditional request a remembered page is asked with, the hash that tells a changed result from
an unchanged one, and the result of a page that was not fetched again.

Both engines and the scraper use it; it knows nothing about either engine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from scrapeq_queue import PageMemory, PageVisit

# The parts of a result that say what the page held: a change in any of them is a change.
# Timings, links and the worker's own notes (truncation, steps, blocked requests) are not.
_COMPARED_KEYS: Final = (
    "final_url",
    "status",
    "content_type",
    "title",
    "fields",
    "items",
    "structured_data",
    "text_sample",
    "data",
    "content_length",
)

# What a crawl-keyed row's page was: the label of scrapeq_worker_recrawl_pages_total.
RecrawlOutcome = Literal["new", "changed", "unchanged", "not_modified", "skipped"]
RECRAWL_OUTCOMES: Final[tuple[RecrawlOutcome, ...]] = (
    "new",
    "changed",
    "unchanged",
    "not_modified",
    "skipped",
)


def conditional_headers(memory: PageMemory | None) -> dict[str, str]:
    """The headers that ask the site for the page only if it changed since `memory` (none
    without remembered validators)."""
    if memory is None:
        return {}
    headers: dict[str, str] = {}
    if memory.etag is not None:
        headers["If-None-Match"] = memory.etag
    if memory.last_modified is not None:
        headers["If-Modified-Since"] = memory.last_modified
    return headers


def result_hash(document: Mapping[str, Any]) -> bytes:
    """SHA-256 of the compared parts of a result document, independent of key order."""
    compared = {key: document[key] for key in _COMPARED_KEYS if key in document}
    text = json.dumps(compared, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest()


def validators_of(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(ETag, Last-Modified) of a response whose header names are lower-cased."""
    return headers.get("etag") or None, headers.get("last-modified") or None


def mark_fetched(
    document: dict[str, Any],
    memory: PageMemory | None,
    *,
    headers: Mapping[str, str],
    content_hash: bytes | None,
) -> tuple[PageVisit, RecrawlOutcome]:
    """Add `changed` (and `unchanged_since`, `validators`) to a fetched page's result; return
    what to remember of the fetch and how to count it."""
    digest = result_hash(document)
    etag, last_modified = validators_of(headers)
    changed = memory is None or memory.result_hash != digest
    document["changed"] = changed
    document["validators"] = etag is not None or last_modified is not None
    if not changed:
        assert memory is not None
        document["unchanged_since"] = memory.changed_at.isoformat()
    visit = PageVisit(
        etag=etag, last_modified=last_modified, content_hash=content_hash, result_hash=digest
    )
    if memory is None:
        return visit, "new"
    return visit, "changed" if changed else "unchanged"


def not_modified_document(
    url: str, final_url: str, engine: str, memory: PageMemory, timing_ms: Mapping[str, float]
) -> dict[str, Any]:
    """The result of a page the site answered 304 Not Modified: nothing was extracted and the
    previous result is not copied."""
    return {
        "url": url,
        "final_url": final_url,
        "status": 304,
        "engine": engine,
        "rendered": False,
        "changed": False,
        "not_modified": True,
        "validators": True,
        "unchanged_since": memory.changed_at.isoformat(),
        "timing_ms": dict(timing_ms),
    }


def skipped_document(url: str, memory: PageMemory, recrawl_after_seconds: float) -> dict[str, Any]:
    """The result of a page the crawl fetched within `recrawl_after_seconds`: no request."""
    return {
        "url": url,
        "changed": False,
        "skipped": "recrawl_after",
        "fetched_at": memory.fetched_at.isoformat(),
        "unchanged_since": memory.changed_at.isoformat(),
        "recrawl_after_seconds": recrawl_after_seconds,
    }


__all__ = [
    "RECRAWL_OUTCOMES",
    "RecrawlOutcome",
    "conditional_headers",
    "mark_fetched",
    "not_modified_document",
    "result_hash",
    "skipped_document",
    "validators_of",
]
