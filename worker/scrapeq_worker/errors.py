"""What can go wrong with one job, sorted by what the loop must do about it.

Every failure the scraping code raises is one of three kinds, because the loop only ever has
three answers: try again later (`RetryLater`, optionally after a delay the site asked for),
give up for good (`PermanentFailure`), or give up because the job itself is malformed
(`BadInput`). Each carries a short, fixed `reason` that is safe to use as a metric label and a
human `message` that ends up in the row's `last_error`.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error the worker raises on purpose.

    `reason` is a low-cardinality token (`timeout`, `blocked_address`, `http_404` is NOT one:
    status codes are folded into `http_4xx`/`http_5xx`) for metrics; `message` says what
    happened in words a user can act on.
    """

    default_reason = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason

    def __str__(self) -> str:
        return self.message


class RetryLater(WorkerError):
    """The job may succeed if tried again; `delay_seconds` is the site's wish, if it said one."""

    default_reason = "temporary"

    def __init__(
        self, message: str, *, reason: str | None = None, delay_seconds: float | None = None
    ) -> None:
        super().__init__(message, reason=reason)
        self.delay_seconds = delay_seconds


class PageBlocked(RetryLater):
    """The site refused the page to this client (a 403 or 429, or a challenge page that matches
    a block marker): another try, later or from another session, may get it. `rule` says what
    recognised it (`status` or `marker`), a metric label."""

    default_reason = "blocked"

    def __init__(self, message: str, *, rule: str, delay_seconds: float | None = None) -> None:
        super().__init__(message, delay_seconds=delay_seconds)
        self.rule = rule


class PermanentFailure(WorkerError):
    """Trying again cannot help (a 404, a blocked address, a page that is too large)."""

    default_reason = "permanent"


class BlockedRequest(PermanentFailure):
    """The network guard refused a URL: a forbidden scheme or a forbidden address."""

    default_reason = "blocked_address"


class BadInput(PermanentFailure):
    """The job's own options are invalid (unknown option, bad selector, bad URL)."""

    default_reason = "bad_input"


class BrowserUnavailable(RetryLater):
    """The browser could not be started or stopped answering; the job is not at fault."""

    default_reason = "browser_unavailable"
