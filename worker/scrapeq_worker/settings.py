"""The worker's configuration, declared once: every option with its flag, environment variable,
default and the reason for that default.

Each field of `WorkerSettings` is one option (`scrapeq_queue.options.option`); the argument
parser, the environment reader and the table in docs/worker.md (`make generate`) all follow it.
Precedence: command-line flag, then environment variable, then default.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq_queue import conninfo_without_password, options
from scrapeq_queue import sessions as sessions_rules
from scrapeq_queue.options import (
    option,
    options_of,
    parse_bool,
    parse_names,
    parse_non_negative_int,
    parse_positive_float,
    parse_positive_int,
)
from scrapeq_queue.payload import (
    RESOURCE_KINDS,
    BlockMarker,
    check_resource_kinds,
    parse_block_markers,
)
from scrapeq_queue.politeness import (
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_CONCURRENT_PER_SITE,
    DEFAULT_RESPECT_ROBOTS_TXT,
    SitePoliteness,
    parse_site_delay,
    parse_site_limit,
)

from .browser_settings import BrowserSettings
from .egress_proxy import UpstreamProxy
from .network_guard import IPNetwork, parse_networks
from .object_store import ObjectStoreConfig
from .user_agent import DEFAULT_USER_AGENT, user_agent


def _queues(text: str) -> tuple[str, ...]:
    queues = parse_names(text)
    if not queues:
        raise ValueError("at least one queue name is needed")
    return queues


def _resource_kinds(text: str) -> tuple[str, ...]:
    kinds = parse_names(text)
    problems = check_resource_kinds("the list", list(kinds))
    if problems:
        raise ValueError(f"{problems[0]}, comma-separated; got {text!r}")
    return kinds


def _contact_url(text: str) -> str:
    url = text.strip()
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise ValueError(f"not a URL: {text!r}") from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {text!r}")
    if any(character.isspace() or not character.isprintable() for character in url) or any(
        character in url for character in "();"
    ):
        raise ValueError(f"must not contain spaces, control characters, '(', ')' or ';': {text!r}")
    return url


def _bucket_name(text: str) -> str:
    bucket = text.strip()
    if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in ".-" for c in bucket):
        raise ValueError(
            f"must be an S3 bucket name (3-63 letters, digits, '.' and '-'), got {text!r}"
        )
    return bucket


def _endpoint_url(text: str) -> str:
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {text!r}")
    return url


def _default_worker_id() -> str:
    # The pod name (HOSTNAME) plus the PID: unique across pods and across restarts in a pod.
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the worker process is configured with (each field is one option)."""

    database_url: str | None = option(
        None,
        flag="--database-url",
        env="DATABASE_URL",
        parse=str,
        help="PostgreSQL connection string of the queue (required).",
    )
    # LISTEN keeps a session: behind a pooler in transaction mode it must reach PostgreSQL
    # directly (docs/worker.md, "Connections").
    database_listen_url: str | None = option(
        None,
        flag="--database-listen-url",
        env="DATABASE_LISTEN_URL",
        parse=str,
        help="PostgreSQL connection string of the LISTEN session, when --database-url goes "
        "through a pooler in transaction mode (default: --database-url).",
    )
    database_pooled: bool = option(
        False,
        flag="--database-pooled",
        env="DATABASE_POOLED",
        parse=parse_bool,
        help="--database-url goes through a pooler in transaction mode (PgBouncer): "
        "no prepared statements on its connections.",
    )
    queues: tuple[str, ...] = option(
        ("default",),
        flag="--queue",
        env="SCRAPEQ_QUEUES",
        parse=_queues,
        help="Queues to claim from, comma-separated; the flag may be repeated.",
        repeatable=True,
    )
    # Scrapy's default is 16 requests, Crawlee's 20 pages per browser; a 2-core pod saturates
    # its CPU with about 8 rendering tabs (docs/benchmarks.md), and 8 keeps static pages, which
    # mostly wait on the network and the database, flowing.
    concurrency: int = option(
        8,
        flag="--concurrency",
        env="SCRAPEQ_CONCURRENCY",
        parse=parse_positive_int,
        help="Jobs (pages) worked on at once.",
    )
    # A look-ahead of one concurrency's worth: rows that end in milliseconds (a 304, a static
    # page) are claimed 8 to 16 at a time, a claim statement each, instead of 4 to 12, and a
    # burst of slow pages still spreads over many workers (a pod holds at most 16 rows, 8 of
    # them waiting about one page's time). docs/benchmarks.md, "Larger claims and completions".
    batch_size: int = option(
        8,
        flag="--batch-size",
        env="SCRAPEQ_BATCH_SIZE",
        parse=parse_positive_int,
        help="Jobs held beyond concurrency (a batch waits for page slots, so no slot waits "
        "for a claim); the worker claims once a batch of places is free, all free places in "
        "one statement.",
    )
    # Per-site politeness, enforced by the claim for the whole cluster; a site's producers
    # (payload.politeness, ScrapeJob spec.politeness) override them. Why these values:
    # docs/worker.md#per-site-politeness.
    max_concurrent_per_site: int = option(
        DEFAULT_MAX_CONCURRENT_PER_SITE,
        flag="--max-concurrent-per-site",
        env="SCRAPEQ_MAX_CONCURRENT_PER_SITE",
        renamed_from=("--max-concurrent-per-host", "SCRAPEQ_MAX_CONCURRENT_PER_HOST"),
        parse=parse_site_limit,
        help="Most rows of one site (registrable domain) in flight across every worker of "
        "every pool, for sites whose rows set no politeness.maxConcurrentPerSite.",
    )
    site_delay_seconds: float = option(
        DEFAULT_DELAY_SECONDS,
        flag="--site-delay-seconds",
        env="SCRAPEQ_SITE_DELAY_SECONDS",
        renamed_from=("--host-delay-seconds", "SCRAPEQ_HOST_DELAY_SECONDS"),
        parse=parse_site_delay,
        help="Seconds between the end of one request to a site and the start of the next (a "
        "delay makes the site one request at a time), for sites whose rows set no "
        "politeness.delaySeconds.",
    )
    respect_robots_txt: bool = option(
        DEFAULT_RESPECT_ROBOTS_TXT,
        flag="--respect-robots-txt",
        negative_flag="--ignore-robots-txt",
        env="SCRAPEQ_RESPECT_ROBOTS_TXT",
        parse=parse_bool,
        help="Read each site's robots.txt and fail the URLs it disallows (robots_disallowed), "
        "for rows that set no politeness.respectRobotsTxt; false turns it off for the pool.",
        switch=True,
    )
    # Off by default: producers fill parser_type with labels of their own (`product_page`),
    # and a pool that has always ignored them keeps running those rows.
    require_registered_parsers: bool = option(
        False,
        flag="--require-registered-parsers",
        negative_flag="--allow-unregistered-parsers",
        env="SCRAPEQ_REQUIRE_REGISTERED_PARSERS",
        parse=parse_bool,
        help="Fail a row whose parser_type names no parser of this worker's image "
        "(unknown_parser) instead of running its declarative payload; `default` always means "
        "the declarative payload.",
        switch=True,
    )
    # Long enough that a slow page (30 s default timeout) is renewed twice before it could lapse.
    lease_seconds: float = option(
        60.0,
        flag="--lease-seconds",
        env="SCRAPEQ_LEASE_SECONDS",
        parse=parse_positive_float,
        help="Lease taken on each claimed job; renewed every third of it while the job runs.",
    )
    # NOTIFY wakes the worker at once; polling only catches delayed rows becoming due.
    poll_seconds: float = option(
        2.0,
        flag="--poll-seconds",
        env="SCRAPEQ_POLL_SECONDS",
        parse=parse_positive_float,
        help="Idle polling interval when no NOTIFY arrives.",
    )
    burst: bool = option(
        False,
        flag="--burst",
        env="SCRAPEQ_BURST",
        parse=parse_bool,
        help="Exit 0 once no job is due and none is in flight (batch runs, benchmarks).",
        switch=True,
    )
    allow_networks: tuple[IPNetwork, ...] = option(
        (),
        flag="--allow-networks",
        env="SCRAPEQ_ALLOW_NETWORKS",
        parse=parse_networks,
        help="CIDRs exempt from the SSRF guard, comma-separated (e.g. 127.0.0.0/8 for a demo).",
    )
    page_timeout_seconds: float = option(
        30.0,
        flag="--page-timeout",
        env="SCRAPEQ_PAGE_TIMEOUT_SECONDS",
        parse=parse_positive_float,
        help="Default per-page time budget when a job sets no timeoutSeconds.",
    )
    # Crawlee retires a browser after 100 pages. A new browser and its warm tabs cost ~1.5 s of
    # CPU, a third of what 100 rendered pages cost here; the memory limit below already bounds
    # leaks, so the page limit only needs to catch slow ones: 500 keeps the cost near 10%.
    browser_recycle_pages: int = option(
        500,
        flag="--browser-recycle-pages",
        env="SCRAPEQ_BROWSER_RECYCLE_PAGES",
        parse=parse_positive_int,
        help="Pages a browser serves before it is replaced.",
    )
    browser_max_memory_mb: int = option(
        1500,
        flag="--browser-max-memory-mb",
        env="SCRAPEQ_BROWSER_MAX_MEMORY_MB",
        parse=parse_positive_int,
        help="Browser memory (all its processes): over it the largest page's renderer is "
        "killed (browser_memory), and a browser whose PSS stays over it is replaced.",
    )
    # A page is one renderer process. 384 MB is several times what a heavy real page uses, and
    # a pod's chart defaults (2 GiB, 4 pages at once) hold four such pages, the browser and
    # the worker with room to spare (docs/worker.md, "Containment").
    renderer_max_memory_mb: int = option(
        384,
        flag="--renderer-max-memory-mb",
        env="SCRAPEQ_RENDERER_MAX_MEMORY_MB",
        parse=parse_positive_int,
        help="Memory one page's renderer may use (private memory, looked at every 0.25 s); a "
        "renderer over it is killed and its job fails page_memory.",
    )
    # Above the renderer's ceiling, so that the watch, not a renderer lost in garbage
    # collection near its heap limit, normally stops a page; it stops at once a heap that
    # grows faster than the watch looks.
    renderer_js_heap_mb: int = option(
        512,
        flag="--renderer-js-heap-mb",
        env="SCRAPEQ_RENDERER_JS_HEAP_MB",
        parse=parse_positive_int,
        help="JavaScript heap limit of one renderer (V8's --max-old-space-size).",
    )
    # A new tab costs a renderer process (~360 ms CPU); navigating a warm one a fraction of
    # that. By default a tab serves 100 pages (its browser is recycled after 500).
    tab_reuse_pages: int = option(
        100,
        flag="--tab-reuse-pages",
        env="SCRAPEQ_TAB_REUSE_PAGES",
        parse=parse_positive_int,
        help="Jobs one browser tab serves before it is closed (1 = a new tab per job); a tab is "
        "only reused after a clean success.",
    )
    chromium: str | None = option(
        None,
        flag="--chromium",
        env="SCRAPEQ_CHROMIUM",
        parse=str,
        help="Chromium executable (default: chromium-headless-shell, else chromium).",
    )
    # Chromium's sandbox needs user namespaces, which Kubernetes' default seccomp profile
    # blocks; as root it cannot run at all. The image turns it off and relies on the pod's
    # securityContext (non-root, no capabilities) instead.
    chromium_no_sandbox: bool = option(
        False,
        flag="--chromium-no-sandbox",
        env="SCRAPEQ_CHROMIUM_NO_SANDBOX",
        parse=parse_bool,
        help="Run Chromium without its own sandbox (always on as root; the container image "
        "sets it).",
        switch=True,
    )
    isolate_pages: bool = option(
        False,
        flag="--isolate-pages",
        env="SCRAPEQ_ISOLATE_PAGES",
        parse=parse_bool,
        help="A fresh browser context for every page, even between pages of one ScrapeJob "
        "(different ScrapeJobs never share one anyway; slower).",
        switch=True,
    )
    # Set per pool (the chart passes it): without it sites see scrapeq's name but nobody to ask.
    user_agent_contact: str | None = option(
        None,
        flag="--user-agent-contact",
        env="SCRAPEQ_USER_AGENT_CONTACT",
        parse=_contact_url,
        help="http(s) URL where site owners learn about this crawler and reach its operator; both "
        "engines send `Mozilla/5.0 (compatible; scrapeq/<version>; +URL)` unless a job's "
        "headers set User-Agent.",
    )
    # Off by default: a page's images and fonts can matter (a screenshot-like extraction, a
    # site that loads content when an image loads); a pool that only reads text turns it on.
    block_resources: tuple[str, ...] = option(
        (),
        flag="--block-resources",
        env="SCRAPEQ_BLOCK_RESOURCES",
        parse=_resource_kinds,
        help=f"Sub-resources the browser does not fetch, comma-separated from "
        f"{', '.join(RESOURCE_KINDS)}; a job's blockResources replaces this list.",
    )
    # None by default: which challenge pages a pool meets depends on the sites it crawls; the
    # statuses 403 and 429 are recognised without any marker.
    block_markers: tuple[BlockMarker, ...] = option(
        (),
        flag="--block-markers",
        env="SCRAPEQ_BLOCK_MARKERS",
        parse=parse_block_markers,
        help='Block markers, a JSON list of {"selector": CSS, "text": optional text}: a page '
        "with an element matching a selector (whose text contains the text, if given) is "
        "blocked and retried; a job's blockMarkers add to these.",
    )
    max_response_bytes: int = option(
        10 * 1024 * 1024,
        flag="--max-response-bytes",
        env="SCRAPEQ_MAX_RESPONSE_BYTES",
        parse=parse_positive_int,
        help="Most bytes one page may download (document plus sub-resources).",
    )
    max_result_bytes: int = option(
        256 * 1024,
        flag="--max-result-bytes",
        env="SCRAPEQ_MAX_RESULT_BYTES",
        parse=parse_positive_int,
        help="Largest stored result (JSON); bigger values are truncated.",
    )
    # Kubernetes' default grace period is 30 s: finish in 25, release the rest, exit in time.
    drain_seconds: float = option(
        25.0,
        flag="--drain-seconds",
        env="SCRAPEQ_DRAIN_SECONDS",
        parse=parse_positive_float,
        help="On SIGTERM, how long in-flight jobs may finish before they are released.",
    )
    metrics_port: int = option(
        9100,
        flag="--metrics-port",
        env="SCRAPEQ_METRICS_PORT",
        parse=parse_non_negative_int,
        help="Port of /metrics, /healthz and /readyz (0 = no server).",
    )
    metrics_host: str = option(
        "0.0.0.0",
        flag="--metrics-host",
        env="SCRAPEQ_METRICS_HOST",
        parse=str,
        help="Address the metrics server listens on.",
    )
    json_logs: bool = option(
        False,
        flag="--json-logs",
        env="SCRAPEQ_JSON_LOGS",
        parse=parse_bool,
        help="Log one JSON object per line (with job id, queue and owner).",
        switch=True,
    )
    log_level: str = option(
        "INFO",
        flag="--log-level",
        env="SCRAPEQ_LOG_LEVEL",
        parse=str.upper,
        help="Log level (DEBUG, INFO, WARNING, ERROR).",
    )
    # Credentials in a flag would show in the process list: the environment is the way.
    upstream_proxy: UpstreamProxy | None = option(  # noqa: RUF009 - a field declaration, not a shared default
        None,
        flag="--upstream-proxy",
        env="SCRAPEQ_UPSTREAM_PROXY",
        parse=UpstreamProxy.parse,
        help="http://[user:password@]host:port or socks5://[user:password@]host:port of a "
        "proxy the browser's traffic is chained to after the SSRF guard's check (set it "
        "through the environment). Never logged with its credentials.",
    )
    # The session pool (docs/worker.md, "Sessions"): on by default, because a page through an
    # upstream proxy without one is retried through whichever proxy comes next, with whatever
    # cookies its context holds; the defaults are scrapeq_queue.sessions' and say why.
    sessions: bool = option(
        True,
        flag="--sessions",
        negative_flag="--no-sessions",
        env="SCRAPEQ_SESSIONS",
        parse=parse_bool,
        help="Give every page through an upstream proxy a session of the cluster's pool "
        "(proxy, cookie jar, user agent), retire sessions blocked on a site and proxies that "
        "keep failing, and retry a blocked row on another session.",
        switch=True,
    )
    sessions_per_row: int = option(
        sessions_rules.DEFAULT_SESSIONS_PER_ROW,
        flag="--sessions-per-row",
        env="SCRAPEQ_SESSIONS_PER_ROW",
        parse=int,
        help=f"Sessions a blocked row tries before it fails for good as blocked "
        f"(1-{sessions_rules.MAX_TRIED_SESSIONS}; its retry limit may end it sooner).",
    )
    session_blocks_per_site: int = option(
        sessions_rules.DEFAULT_BLOCKS_PER_SITE,
        flag="--session-blocks-per-site",
        env="SCRAPEQ_SESSION_BLOCKS_PER_SITE",
        parse=int,
        help="Blocks in a row that retire a session on a site (1-1000); raise it for sites "
        "that serve challenges at random.",
    )
    proxy_failures_in_a_row: int = option(
        sessions_rules.DEFAULT_PROXY_FAILURES_IN_A_ROW,
        flag="--proxy-failures-in-a-row",
        env="SCRAPEQ_PROXY_FAILURES_IN_A_ROW",
        parse=int,
        help="Failures (blocked pages, connection failures) through a proxy with none going "
        "well in between that retire it for every worker (1-1000).",
    )
    proxy_failed_sites: int = option(
        sessions_rules.DEFAULT_PROXY_FAILED_SITES,
        flag="--proxy-failed-sites",
        env="SCRAPEQ_PROXY_FAILED_SITES",
        parse=int,
        help="Sites a proxy failed on that retire it for every worker (1-1000).",
    )
    proxy_retire_seconds: float = option(
        sessions_rules.DEFAULT_PROXY_RETIRE_SECONDS,
        flag="--proxy-retire-seconds",
        env="SCRAPEQ_PROXY_RETIRE_SECONDS",
        parse=float,
        help="How long a retired proxy stays out of use (above 0, at most 86400).",
    )
    # The object store (docs/worker.md, "Object storage"): page artifacts and results over
    # the row cap go to this bucket. Credentials are never options: the S3 client reads
    # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the chart fills them from a Secret) and
    # otherwise its default chain (a web identity token as IRSA mounts it, instance metadata).
    object_store_bucket: str | None = option(
        None,
        flag="--object-store-bucket",
        env="SCRAPEQ_OBJECT_STORE_BUCKET",
        parse=_bucket_name,
        help="S3 bucket for page artifacts (payload keep) and results larger than "
        "--max-result-bytes (unset: no object store; html and text stay in the row, capped).",
    )
    object_store_endpoint: str | None = option(
        None,
        flag="--object-store-endpoint",
        env="SCRAPEQ_OBJECT_STORE_ENDPOINT",
        parse=_endpoint_url,
        help="URL of an S3-compatible endpoint (MinIO, Ceph, GCS's S3 interface); unset: AWS "
        "S3 of --object-store-region.",
    )
    object_store_region: str | None = option(
        None,
        flag="--object-store-region",
        env="SCRAPEQ_OBJECT_STORE_REGION",
        parse=str,
        help="Region the object store signs requests for (unset: AWS_REGION, else us-east-1).",
    )
    # `scrapeq/` keeps the worker's objects apart from anything else in a shared bucket.
    object_store_prefix: str = option(
        "scrapeq",
        flag="--object-store-prefix",
        env="SCRAPEQ_OBJECT_STORE_PREFIX",
        parse=lambda text: text.strip("/"),
        help="Key prefix of every object: <prefix>/<queue>/<job id>/<name>.",
    )
    # Most S3-compatible servers (MinIO, Ceph, versitygw) address buckets by path; AWS S3
    # prefers virtual-hosted names.
    object_store_path_style: bool = option(
        False,
        flag="--object-store-path-style",
        negative_flag="--object-store-virtual-hosted-style",
        env="SCRAPEQ_OBJECT_STORE_PATH_STYLE",
        parse=parse_bool,
        help="Address the bucket as ENDPOINT/BUCKET/KEY instead of BUCKET.ENDPOINT/KEY.",
        switch=True,
    )
    worker_id: str | None = option(
        None,
        flag="--worker-id",
        env="SCRAPEQ_WORKER_ID",
        parse=str,
        help="Name recorded on claimed rows (default: host name and PID).",
    )

    @property
    def resolved_worker_id(self) -> str:
        return self.worker_id or _default_worker_id()

    @property
    def user_agent(self) -> str:
        return user_agent(self.user_agent_contact)

    def browser_settings(self) -> BrowserSettings:
        """How the browser engine runs Chromium, from these options."""
        return BrowserSettings(
            executable=self.chromium,
            no_sandbox=self.chromium_no_sandbox,
            recycle_after_pages=self.browser_recycle_pages,
            max_memory_mb=self.browser_max_memory_mb,
            isolate_pages=self.isolate_pages,
            tab_reuse_pages=self.tab_reuse_pages,
            max_response_bytes=self.max_response_bytes,
            max_result_bytes=self.max_result_bytes,
            user_agent=self.user_agent,
            upstream_proxy=self.upstream_proxy,
            renderer_max_memory_mb=self.renderer_max_memory_mb,
            js_heap_mb=self.renderer_js_heap_mb,
        )

    def object_store_config(self) -> ObjectStoreConfig | None:
        """Where page artifacts and oversized results go (None: no object store)."""
        if self.object_store_bucket is None:
            return None
        return ObjectStoreConfig(
            bucket=self.object_store_bucket,
            endpoint=self.object_store_endpoint,
            region=self.object_store_region,
            prefix=self.object_store_prefix,
            path_style=self.object_store_path_style,
        )

    @property
    def politeness(self) -> SitePoliteness:
        """The pool's politeness defaults, as the claim binds them."""
        return SitePoliteness(
            max_concurrent_per_site=self.max_concurrent_per_site,
            delay_seconds=self.site_delay_seconds,
            respect_robots_txt=self.respect_robots_txt,
        )

    @property
    def session_rules(self) -> sessions_rules.SessionRules:
        """When the session pool retires sessions and proxies (ValueError out of bounds)."""
        return sessions_rules.SessionRules(
            sessions_per_row=self.sessions_per_row,
            blocks_per_site=self.session_blocks_per_site,
            proxy_failures_in_a_row=self.proxy_failures_in_a_row,
            proxy_failed_sites=self.proxy_failed_sites,
            proxy_retire_seconds=self.proxy_retire_seconds,
        )


OPTIONS: Final = options_of(WorkerSettings)


class SettingsError(ValueError):
    """A flag or environment variable has an unusable value."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per option; unset flags stay None so the environment can fill them."""
    options.add_arguments(parser, WorkerSettings)


def settings_from(
    arguments: argparse.Namespace | Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerSettings:
    """Build settings from parsed flags (strings or None) and the environment.

    Raises SettingsError naming the flag/variable of the first bad value.
    """
    environment = os.environ if environ is None else environ
    return options.read_settings(WorkerSettings, arguments, environment, error=SettingsError)


def describe(settings: WorkerSettings) -> dict[str, Any]:
    """Settings for the startup log line, without secrets (the database password)."""
    shown: dict[str, Any] = {}
    for item in fields(settings):
        value = getattr(settings, item.name)
        if item.name in ("database_url", "database_listen_url") and value:
            value = conninfo_without_password(value)
        elif isinstance(value, UpstreamProxy):
            value = str(value)  # without its credentials
        elif isinstance(value, tuple):
            value = [str(entry) for entry in value]
        shown[item.name] = value
    return shown


__all__: Sequence[str] = [
    "DEFAULT_USER_AGENT",
    "OPTIONS",
    "SettingsError",
    "WorkerSettings",
    "add_arguments",
    "describe",
    "settings_from",
    "user_agent",
]
