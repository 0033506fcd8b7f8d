"""The worker's side of the cluster's session pool: before a page through an upstream proxy,
take a session (its proxy, its cookie jar); after it, record how it went. The state and its
rules are the queue's (scrapeq_queue.sessions, docs/queue.md "Sessions"): every worker sees
the same sessions, and a proxy one worker retires is retired for all.

* A page that goes well saves its jar to the session.
* A blocked page (PageBlocked) counts against its session on the site and against its proxy;
  the row is retried on another session, and fails for good as `blocked` once it was blocked
  on `SessionRules.sessions_per_row` sessions.
* A page whose upstream proxy failed counts against the proxy.
* Any other failure says nothing about the session and is not recorded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq_queue import ClaimedJob
from scrapeq_queue.sessions import Outcome, Session, SessionRules

from .egress_proxy import UpstreamProxy
from .errors import PageBlocked, PermanentFailure, RetryLater, WorkerError
from .job_options import JobOptions
from .metrics import WorkerMetrics
from .queue_gateway import QueueGateway

logger = logging.getLogger(__name__)

# The reasons of a failure that is the upstream proxy's, not the site's.
PROXY_FAILURE_REASONS: Final = frozenset({"upstream_proxy_error"})
# How long a row waits when every proxy it may use is retired: a retirement lasts minutes.
ALL_RETIRED_DELAY_SECONDS: Final = 60.0
# Metric labels are bounded: the first proxy ids seen get their own, the rest share `other`.
MAX_PROXY_LABELS: Final = 50


@dataclass(frozen=True)
class TakenSession:
    """The session a page uses, and the site it was taken for."""

    session: Session
    host_key: str


class SessionPool:
    """Takes and records sessions for one worker's pages."""

    def __init__(
        self,
        gateway: QueueGateway,
        metrics: WorkerMetrics,
        *,
        rules: SessionRules,
        enabled: bool,
        pool_upstream: UpstreamProxy | None,
    ) -> None:
        self._gateway = gateway
        self._metrics = metrics
        self.rules = rules
        self.enabled = enabled
        self._pool_upstream = pool_upstream
        self._labels: set[str] = set()

    async def take(
        self, job: ClaimedJob, options: JobOptions
    ) -> tuple[JobOptions, TakenSession | None]:
        """`options` for the page of `job` on its session (through the session's proxy, with its
        cookie jar), and the session; `options` as given and None without one (sessions off,
        no upstream proxy, or the database did not answer). Raises RetryLater when every proxy
        the row may use is retired."""
        proxies = options.upstream_proxies or (
            (self._pool_upstream,) if self._pool_upstream is not None else ()
        )
        if not self.enabled or not proxies:
            return options, None
        host_key = job.host_key or (urlsplit(job.url).hostname or "")
        choice = await self._gateway.choose_session(job, host_key, [p.id for p in proxies])
        if choice is None:
            return options, None
        if choice.session is None:
            raise RetryLater(
                'every upstream proxy of this row is retired for now (docs/worker.md, "Sessions")',
                reason="proxies_retired",
                delay_seconds=ALL_RETIRED_DELAY_SECONDS,
            )
        session = choice.session
        # The choice is among `proxies` only; the first is a fallback that cannot be taken.
        proxy = next((p for p in proxies if p.id == session.proxy_id), proxies[0])
        return (
            replace(options, upstream_proxies=(proxy,), session_cookies=session.cookies),
            TakenSession(session, host_key),
        )

    async def record(
        self,
        job: ClaimedJob,
        taken: TakenSession,
        failure: WorkerError | None,
        cookies: list[dict[str, Any]] | None,
    ) -> WorkerError | None:
        """Record how the page went on `taken` and return the failure to report: a block on
        the row's last session becomes a permanent `blocked` failure."""
        outcome: Outcome
        if failure is None:
            outcome = "ok"
        elif isinstance(failure, PageBlocked):
            outcome = "blocked"
        elif failure.reason in PROXY_FAILURE_REASONS:
            outcome = "proxy_failed"
        else:
            return failure
        session = taken.session
        record = await self._gateway.record_session(
            job,
            session,
            taken.host_key,
            outcome,
            cookies if outcome == "ok" else None,
            self.rules,
        )
        label = self._label(session.proxy_id)
        self._metrics.session_pages.labels(label, outcome).inc()
        if record is not None and record.session_retired:
            self._metrics.sessions_retired.labels(label).inc()
        if record is not None and record.proxy_retired:
            self._metrics.proxies_retired.labels(label).inc()
            logger.warning(
                "upstream proxy %s retired for every worker for %.0f s",
                session.proxy_id,
                self.rules.proxy_retire_seconds,
            )
        if isinstance(failure, PageBlocked) and session.tried + 1 >= self.rules.sessions_per_row:
            # Counted here: the outcome reporter counts blocked pages only on their retry.
            self._metrics.pages_blocked.labels(job.queue, failure.rule).inc()
            return PermanentFailure(
                f"{failure.message} (blocked on {session.tried + 1} sessions)",
                reason="blocked",
            )
        return failure

    def _label(self, proxy_id: str) -> str:
        if proxy_id in self._labels or len(self._labels) < MAX_PROXY_LABELS:
            self._labels.add(proxy_id)
            return proxy_id
        return "other"


__all__ = ["ALL_RETIRED_DELAY_SECONDS", "PROXY_FAILURE_REASONS", "SessionPool", "TakenSession"]
