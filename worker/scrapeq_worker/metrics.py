"""The worker's Prometheus metrics and its small HTTP server: /metrics, /healthz, /readyz.

Names follow `scrapeq_worker_<name>_<unit>`; counters end in `_total`; labels are queue,
outcome, a fixed `reason` token (never a URL or a job id) and the engine. Each WorkerMetrics
owns its registry so several workers (tests, benchmarks) can live in one process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

logger = logging.getLogger(__name__)

# Pages take tens of milliseconds (static) to tens of seconds (slow rendered pages).
DURATION_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# Due -> claimed: milliseconds when workers keep up, minutes when the backlog grows.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# Unregistered parser_type names counted under their own label: a producer's handful of
# labels; the rest share `other`, so a producer writing ids there cannot swell the metric.
MAX_PARSER_TYPE_LABELS: Final = 50
# Unregistered parser_type names logged once each per process; past them, no more lines.
MAX_PARSER_TYPES_LOGGED: Final = 1000


class WorkerMetrics:
    """Every metric the worker exports, registered on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.jobs_claimed = Counter(
            "scrapeq_worker_jobs_claimed_total", "Jobs this worker claimed.", ["queue"], registry=r
        )
        self.jobs_completed = Counter(
            "scrapeq_worker_jobs_completed_total",
            "Jobs this worker completed.",
            ["queue"],
            registry=r,
        )
        self.recrawl_pages = Counter(
            "scrapeq_worker_recrawl_pages_total",
            "Completed pages of rows with a crawl key, by what the crawl's memory made of them: "
            "new (never fetched), changed, unchanged (same result hash), not_modified (a 304) "
            "or skipped (fetched within recrawlAfterSeconds).",
            ["queue", "outcome"],
            registry=r,
        )
        self.jobs_retried = Counter(
            "scrapeq_worker_jobs_retried_total",
            "Attempts that failed and were scheduled to run again.",
            ["queue", "reason"],
            registry=r,
        )
        self.pages_blocked = Counter(
            "scrapeq_worker_pages_blocked_total",
            "Pages the site refused to this client (reason `blocked`), by what recognised "
            "the block: `status` (403, 429) or `marker` (a block marker matched the page).",
            ["queue", "rule"],
            registry=r,
        )
        self.session_pages = Counter(
            "scrapeq_worker_session_pages_total",
            "Pages that used a session of the cluster's pool, by upstream proxy id (never its "
            "address; `other` past the first 50 ids) and outcome: `ok`, `blocked` (the row is "
            "retried on another session, or fails after its sessions) or `proxy_failed`.",
            ["proxy", "outcome"],
            registry=r,
        )
        self.sessions_retired = Counter(
            "scrapeq_worker_sessions_retired_total",
            "Sessions this worker retired on a site after their blocks there, by proxy id.",
            ["proxy"],
            registry=r,
        )
        self.proxies_retired = Counter(
            "scrapeq_worker_proxies_retired_total",
            "Upstream proxies this worker's pages retired for every worker (failing in a row "
            "or on several sites), by proxy id.",
            ["proxy"],
            registry=r,
        )
        self.jobs_failed = Counter(
            "scrapeq_worker_jobs_failed_total",
            "Jobs failed for good (permanent error or no retries left).",
            ["queue", "reason"],
            registry=r,
        )
        self.unregistered_parser_types = Counter(
            "scrapeq_worker_unregistered_parser_types_total",
            "Rows whose parser_type names no parser of this worker (the first "
            f"{MAX_PARSER_TYPE_LABELS} names as themselves, the rest as `other`).",
            ["queue", "parser_type"],
            registry=r,
        )
        self._parser_type_labels: set[str] = set()
        self._parser_types_logged: set[str] = set()
        self.jobs_released = Counter(
            "scrapeq_worker_jobs_released_total",
            "Jobs handed back unfinished during a drain.",
            ["queue"],
            registry=r,
        )
        self.jobs_fenced = Counter(
            "scrapeq_worker_jobs_fenced_total",
            "Results discarded because the attempt was no longer current.",
            ["queue"],
            registry=r,
        )
        self.job_duration = Histogram(
            "scrapeq_worker_job_duration_seconds",
            "Time from start to outcome of one attempt.",
            ["queue", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.claim_latency = Histogram(
            "scrapeq_worker_claim_latency_seconds",
            "Time from a job becoming due (run_at) to a worker claiming it.",
            ["queue"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.pages_in_flight = Gauge(
            "scrapeq_worker_pages_in_flight",
            "Pages being fetched or rendered right now.",
            ["engine"],
            registry=r,
        )
        self.browser_restarts = Counter(
            "scrapeq_worker_browser_restarts_total",
            "Browsers retired and replaced, by cause (page_limit, memory, unresponsive, crashed).",
            ["reason"],
            registry=r,
        )
        self.browser_dialogs = Counter(
            "scrapeq_worker_browser_dialogs_total",
            "JavaScript dialogs pages opened, dismissed at once, by type (alert, confirm, "
            "prompt, beforeunload).",
            ["type"],
            registry=r,
        )
        self.renderers_killed = Counter(
            "scrapeq_worker_browser_renderers_killed_total",
            "Renderer processes the memory watch killed, by cause (renderer_limit: one page "
            "over its ceiling; browser_limit: the largest page while the browser was over its "
            "limit).",
            ["reason"],
            registry=r,
        )
        self.leases_rescued = Counter(
            "scrapeq_worker_leases_rescued_total",
            "Expired leases (of any worker) this worker returned to the queue: workers that "
            "stopped heartbeating, usually because they died.",
            registry=r,
        )
        self.database_errors = Counter(
            "scrapeq_worker_database_errors_total",
            "Queue operations that failed because the database was unavailable.",
            registry=r,
        )
        self.claim_errors = Counter(
            "scrapeq_worker_claim_errors_total",
            "Claims that failed for a reason other than the database being unavailable (a "
            "row that could not be loaded, say); the worker backs off and claims again.",
            registry=r,
        )
        self.ready = Gauge(
            "scrapeq_worker_ready",
            "1 while the worker is ready for work (what /readyz answers), else 0.",
            registry=r,
        )
        self.not_ready = Gauge(
            "scrapeq_worker_not_ready",
            "1 for each reason the worker is not ready now: temp_dir, browser or schema (it "
            "claims nothing), database (unreachable) or stopping (draining).",
            ["reason"],
            registry=r,
        )

    def count_unregistered_parser_type(self, queue: str, parser_type: str) -> bool:
        """Count a row's unregistered parser_type; True when the caller should log the name
        (the first time this process sees it, for the first MAX_PARSER_TYPES_LOGGED names).
        Past MAX_PARSER_TYPE_LABELS names every new one is counted as `other`: producers
        choose the names, so the labels must stay few."""
        name = parser_type[:100]
        if name not in self._parser_type_labels and (
            len(self._parser_type_labels) < MAX_PARSER_TYPE_LABELS
        ):
            self._parser_type_labels.add(name)
        label = name if name in self._parser_type_labels else "other"
        self.unregistered_parser_types.labels(queue, label).inc()
        if name in self._parser_types_logged or (
            len(self._parser_types_logged) >= MAX_PARSER_TYPES_LOGGED
        ):
            return False
        self._parser_types_logged.add(name)
        return True

    def render(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)


class MetricsServer:
    """Serves /metrics, /healthz (the process loop is alive) and /readyz (ready for work)."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        *,
        host: str,
        port: int,
        is_live: Callable[[], bool],
        not_ready_because: Callable[[], str | None],
    ) -> None:
        """`not_ready_because` answers None when ready, else the reasons, for /readyz."""
        self._metrics = metrics
        self._host = host
        self._port = port
        self._is_live = is_live
        self._not_ready_because = not_ready_because
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/healthz", self._serve_health)
        app.router.add_get("/readyz", self._serve_ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._port
        logger.info("metrics on http://%s:%s/metrics", self._host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        response = web.Response(body=self._metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def _serve_health(self, request: web.Request) -> web.Response:
        if self._is_live():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="stalled\n")

    async def _serve_ready(self, request: web.Request) -> web.Response:
        reasons = self._not_ready_because()
        if reasons is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reasons}\n")
