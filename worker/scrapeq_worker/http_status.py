"""HTTP semantics shared by both engines: which statuses retry, which are final, Retry-After.

Follows what crawlers agree on (Scrapy retries 408/429/5xx): a 4xx other than 403, 408 and 429
says the request itself is wrong, so retrying cannot help; 5xx and network errors are the
server's trouble and usually pass; 403 and 429 are the site refusing this client (`blocked`:
another try, later or from another session, may pass); 429 and 503 may say when to come back
(`Retry-After`), and the retry honours it.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Final

from scrapeq_queue import RETRY_POLICY

from .errors import PageBlocked, PermanentFailure, RetryLater, WorkerError

# A site asking for more than the queue's longest retry delay (an hour) is treated as that: the
# job stays visible as retrying instead of disappearing for days.
MAX_RETRY_AFTER_SECONDS: Final = RETRY_POLICY.max_delay_seconds
HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
# Statuses that say the site refused this client rather than that the page is wrong: a page
# answering them is `blocked` (docs/worker.md, "Blocked pages").
BLOCK_STATUSES: Final = frozenset({403, 429})
# Retry reasons that speak for the whole site, not one URL: its Retry-After pauses the host for
# every worker, and a run of them pauses the host even without one (the queue's retry policy).
SERVER_ERROR_REASONS: Final = RETRY_POLICY.site_pausing_reasons
# Chromium's navigation errors that no retry can fix, with the reason the plain-HTTP engine
# gives the same cause (it follows at most http_engine.MAX_REDIRECTS redirects, Chromium 20).
PERMANENT_NET_ERRORS: Final = {
    "net::ERR_TOO_MANY_REDIRECTS": "too_many_redirects",
    "net::ERR_INVALID_URL": "bad_url",
    "net::ERR_INVALID_REDIRECT": "bad_url",
    "net::ERR_UNSAFE_PORT": "bad_url",
}


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), clamped to
    [0, MAX_RETRY_AFTER_SECONDS]; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def check_status(status: int | None, headers: Mapping[str, str], *, url: str) -> None:
    """Raise the error a final HTTP `status` for `url` means; return for success.

    `headers` must have lower-case names. None (no HTTP response, e.g. a data: URL) passes.
    """
    if status is None or status < 400:
        return
    if status in (429, 503):
        delay = parse_retry_after(headers.get("retry-after"))
        wait = f"; the site asked to retry after {delay:g}s" if delay is not None else ""
        if status in BLOCK_STATUSES:
            raise PageBlocked(
                f"HTTP {status} from {url}: blocked{wait}", rule="status", delay_seconds=delay
            )
        raise RetryLater(f"HTTP {status} from {url}{wait}", reason="http_5xx", delay_seconds=delay)
    if status in BLOCK_STATUSES:
        raise PageBlocked(f"HTTP {status} from {url}: blocked", rule="status")
    if status == 408:
        raise RetryLater(f"HTTP 408 (request timeout) from {url}", reason="http_408")
    if status < 500:
        raise PermanentFailure(f"HTTP {status} from {url}", reason="http_4xx")
    raise RetryLater(f"HTTP {status} from {url}", reason="http_5xx")


def navigation_failure(url: str, error_text: str) -> WorkerError:
    """The error a browser navigation that got no page means, from Chromium's `net::ERR_*`
    text: the same kind and reason the plain-HTTP engine gives the same cause (a redirect loop
    is `too_many_redirects` and permanent in both), else a retryable `network_error`."""
    for code, reason in PERMANENT_NET_ERRORS.items():
        if code in error_text:
            return PermanentFailure(f"could not load {url}: {error_text}", reason=reason)
    return RetryLater(f"could not load {url}: {error_text}", reason="network_error")


def is_html(content_type: str | None) -> bool:
    """True for HTML/XHTML media types (and when the server did not say: browsers sniff)."""
    if not content_type:
        return True
    return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


def charset_of(content_type: str | None) -> str | None:
    """The `charset` parameter of a Content-Type header, if any."""
    if not content_type:
        return None
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    return None
