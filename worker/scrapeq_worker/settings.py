"""The worker's configuration, declared once: every option with its flag, environment variable,
default and the reason for that default.

`OPTIONS` is the single table; the argument parser, the environment reader and docs/worker.md
all follow it. Precedence: command-line flag, then environment variable, then default.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq_queue.politeness import (
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_CONCURRENT_PER_HOST,
    DEFAULT_RESPECT_ROBOTS_TXT,
    MAX_CONCURRENT_PER_HOST_LIMIT,
    MAX_DELAY_SECONDS,
    HostPoliteness,
)

from .network_guard import IPNetwork, parse_networks


@dataclass(frozen=True)
class Option:
    """One setting: `name` is the WorkerSettings field, `flag` the CLI flag, `env` the variable."""

    name: str
    flag: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    is_switch: bool = False


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _queues(text: str) -> tuple[str, ...]:
    queues = tuple(item.strip() for item in text.split(",") if item.strip())
    if not queues:
        raise ValueError("at least one queue name is needed")
    return queues


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must be at least 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_DELAY_SECONDS:
        raise ValueError(f"must be between 0 and {MAX_DELAY_SECONDS:g}, got {value:g}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"must be above 0, got {value}")
    return value


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


def _version() -> str:
    try:
        return importlib.metadata.version("scrapeq")
    except importlib.metadata.PackageNotFoundError:  # running from a checkout, not installed
        return "dev"


def user_agent(contact_url: str | None) -> str:
    """The User-Agent both engines send unless a job's `headers` override it: it names
    scrapeq and, when the pool sets one, the URL where a site owner reaches its operator (the
    `+URL` convention of Googlebot and bingbot). The `Mozilla/5.0 (compatible; …)` frame keeps
    sites that sniff for browsers from refusing outright; everything after it is honest."""
    contact = f"; +{contact_url}" if contact_url else ""
    return f"Mozilla/5.0 (compatible; scrapeq/{_version()}{contact})"


DEFAULT_USER_AGENT: Final = user_agent(None)


def _default_worker_id() -> str:
    # The pod name (HOSTNAME) plus the PID: unique across pods and across restarts in a pod.
    return f"{socket.gethostname()}-{os.getpid()}"


OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "database_url",
        "--database-url",
        "DATABASE_URL",
        None,
        str,
        "PostgreSQL connection string of the queue (required).",
    ),
    Option(
        "queues",
        "--queue",
        "SCRAPEQ_QUEUES",
        ("default",),
        _queues,
        "Queues to claim from, comma-separated; the flag may be repeated.",
    ),
    # Scrapy's default is 16 requests, Crawlee's 20 pages per browser; a 2-core pod saturates
    # its CPU with about 8 rendering tabs (docs/benchmarks.md), and 8 keeps static pages, which
    # mostly wait on the network and the database, flowing.
    Option(
        "concurrency",
        "--concurrency",
        "SCRAPEQ_CONCURRENCY",
        8,
        _positive_int,
        "Jobs (pages) worked on at once.",
    ),
    # Small claims spread a burst of jobs over many workers instead of one pod hoarding it.
    Option(
        "batch_size",
        "--batch-size",
        "SCRAPEQ_BATCH_SIZE",
        4,
        _positive_int,
        "Most jobs claimed in one statement; the worker holds at most concurrency + one "
        "batch (a batch waits for page slots, so no slot waits for a claim).",
    ),
    # Scrapy's default per domain. Politeness across pods is the operator's replica count.
    Option(
        "per_domain_concurrency",
        "--per-domain-concurrency",
        "SCRAPEQ_PER_DOMAIN_CONCURRENCY",
        8,
        _positive_int,
        "Most pages of one host name fetched at once by this process.",
    ),
    # Per-host politeness, enforced by the claim for the whole cluster; a row's
    # payload.politeness overrides them. Why these values: docs/worker.md#per-host-politeness.
    Option(
        "max_concurrent_per_host",
        "--max-concurrent-per-host",
        "SCRAPEQ_MAX_CONCURRENT_PER_HOST",
        DEFAULT_MAX_CONCURRENT_PER_HOST,
        _positive_int,
        "Most rows of one site (registrable domain) in flight across every worker of every "
        "pool, for rows whose payload sets no politeness.maxConcurrentPerHost.",
    ),
    Option(
        "host_delay_seconds",
        "--host-delay-seconds",
        "SCRAPEQ_HOST_DELAY_SECONDS",
        DEFAULT_DELAY_SECONDS,
        _non_negative_float,
        "Seconds between the end of one request to a site and the start of the next (a delay "
        "makes the site one request at a time), for rows that set no politeness.delaySeconds.",
    ),
    Option(
        "respect_robots_txt",
        "--respect-robots-txt",
        "SCRAPEQ_RESPECT_ROBOTS_TXT",
        DEFAULT_RESPECT_ROBOTS_TXT,
        _bool,
        "Read each site's robots.txt and fail disallowed URLs (robots_disallowed), for rows "
        "that set no politeness.respectRobotsTxt; false turns it off for the pool.",
    ),
    # Long enough that a slow page (30 s default timeout) is renewed twice before it could lapse.
    Option(
        "lease_seconds",
        "--lease-seconds",
        "SCRAPEQ_LEASE_SECONDS",
        60.0,
        _positive_float,
        "Lease taken on each claimed job; renewed every third of it while the job runs.",
    ),
    # NOTIFY wakes the worker at once; polling only catches delayed rows becoming due.
    Option(
        "poll_seconds",
        "--poll-seconds",
        "SCRAPEQ_POLL_SECONDS",
        2.0,
        _positive_float,
        "Idle polling interval when no NOTIFY arrives.",
    ),
    Option(
        "burst",
        "--burst",
        "SCRAPEQ_BURST",
        False,
        _bool,
        "Exit 0 once no job is due and none is in flight (batch runs, benchmarks).",
        is_switch=True,
    ),
    Option(
        "allow_networks",
        "--allow-networks",
        "SCRAPEQ_ALLOW_NETWORKS",
        (),
        parse_networks,
        "CIDRs exempt from the SSRF guard, comma-separated (e.g. 127.0.0.0/8 for a demo).",
    ),
    Option(
        "page_timeout_seconds",
        "--page-timeout",
        "SCRAPEQ_PAGE_TIMEOUT_SECONDS",
        30.0,
        _positive_float,
        "Default per-page time budget when a job sets no timeoutSeconds.",
    ),
    # Crawlee retires a browser after 100 pages. A new browser and its warm tabs cost ~1.5 s of
    # CPU, a third of what 100 rendered pages cost here; the memory limit below already bounds
    # leaks, so the page limit only needs to catch slow ones: 500 keeps the cost near 10%.
    Option(
        "browser_recycle_pages",
        "--browser-recycle-pages",
        "SCRAPEQ_BROWSER_RECYCLE_PAGES",
        500,
        _positive_int,
        "Pages a browser serves before it is replaced.",
    ),
    Option(
        "browser_max_memory_mb",
        "--browser-max-memory-mb",
        "SCRAPEQ_BROWSER_MAX_MEMORY_MB",
        1500,
        _positive_int,
        "Browser memory (PSS of all its processes) that triggers a replacement.",
    ),
    # A new tab costs a renderer process (~360 ms CPU); navigating a warm one a fraction of
    # that. By default a tab serves 100 pages (its browser is recycled after 500).
    Option(
        "tab_reuse_pages",
        "--tab-reuse-pages",
        "SCRAPEQ_TAB_REUSE_PAGES",
        100,
        _positive_int,
        "Jobs one browser tab serves before it is closed (1 = a new tab per job); a tab is "
        "only reused after a clean success.",
    ),
    Option(
        "chromium",
        "--chromium",
        "SCRAPEQ_CHROMIUM",
        None,
        str,
        "Chromium executable (default: chromium-headless-shell, else chromium).",
    ),
    # Chromium's sandbox needs user namespaces, which Kubernetes' default seccomp profile
    # blocks; as root it cannot run at all. The image turns it off and relies on the pod's
    # securityContext (non-root, no capabilities) instead.
    Option(
        "chromium_no_sandbox",
        "--chromium-no-sandbox",
        "SCRAPEQ_CHROMIUM_NO_SANDBOX",
        False,
        _bool,
        "Run Chromium without its own sandbox (always on as root; the container image sets it).",
        is_switch=True,
    ),
    Option(
        "isolate_pages",
        "--isolate-pages",
        "SCRAPEQ_ISOLATE_PAGES",
        False,
        _bool,
        "Open each page in its own incognito context (no shared cookies/cache; slower).",
        is_switch=True,
    ),
    # Set per pool (the chart passes it): without it sites see scrapeq's name but nobody to ask.
    Option(
        "user_agent_contact",
        "--user-agent-contact",
        "SCRAPEQ_USER_AGENT_CONTACT",
        None,
        _contact_url,
        "http(s) URL where site owners learn about this crawler and reach its operator; both "
        "engines send 'Mozilla/5.0 (compatible; scrapeq/<version>; +URL)' unless a job's "
        "headers set User-Agent.",
    ),
    Option(
        "max_response_bytes",
        "--max-response-bytes",
        "SCRAPEQ_MAX_RESPONSE_BYTES",
        10 * 1024 * 1024,
        _positive_int,
        "Most bytes one page may download (document plus sub-resources).",
    ),
    Option(
        "max_result_bytes",
        "--max-result-bytes",
        "SCRAPEQ_MAX_RESULT_BYTES",
        256 * 1024,
        _positive_int,
        "Largest stored result (JSON); bigger values are truncated.",
    ),
    # Kubernetes' default grace period is 30 s: finish in 25, release the rest, exit in time.
    Option(
        "drain_seconds",
        "--drain-seconds",
        "SCRAPEQ_DRAIN_SECONDS",
        25.0,
        _positive_float,
        "On SIGTERM, how long in-flight jobs may finish before they are released.",
    ),
    Option(
        "metrics_port",
        "--metrics-port",
        "SCRAPEQ_METRICS_PORT",
        9100,
        _non_negative_int,
        "Port of /metrics, /healthz and /readyz (0 = no server).",
    ),
    Option(
        "metrics_host",
        "--metrics-host",
        "SCRAPEQ_METRICS_HOST",
        "0.0.0.0",
        str,
        "Address the metrics server listens on.",
    ),
    Option(
        "json_logs",
        "--json-logs",
        "SCRAPEQ_JSON_LOGS",
        False,
        _bool,
        "Log one JSON object per line (with job id, queue and owner).",
        is_switch=True,
    ),
    Option(
        "log_level",
        "--log-level",
        "SCRAPEQ_LOG_LEVEL",
        "INFO",
        str.upper,
        "Log level (DEBUG, INFO, WARNING, ERROR).",
    ),
    Option(
        "worker_id",
        "--worker-id",
        "SCRAPEQ_WORKER_ID",
        None,
        str,
        "Name recorded on claimed rows (default: host name and PID).",
    ),
)


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the worker process is configured with (see OPTIONS for each meaning)."""

    database_url: str | None = None
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 8
    batch_size: int = 4
    per_domain_concurrency: int = 8
    max_concurrent_per_host: int = DEFAULT_MAX_CONCURRENT_PER_HOST
    host_delay_seconds: float = DEFAULT_DELAY_SECONDS
    respect_robots_txt: bool = DEFAULT_RESPECT_ROBOTS_TXT
    lease_seconds: float = 60.0
    poll_seconds: float = 2.0
    burst: bool = False
    allow_networks: tuple[IPNetwork, ...] = ()
    page_timeout_seconds: float = 30.0
    browser_recycle_pages: int = 500
    browser_max_memory_mb: int = 1500
    tab_reuse_pages: int = 100
    chromium: str | None = None
    chromium_no_sandbox: bool = False
    isolate_pages: bool = False
    user_agent_contact: str | None = None
    max_response_bytes: int = 10 * 1024 * 1024
    max_result_bytes: int = 256 * 1024
    drain_seconds: float = 25.0
    metrics_port: int = 9100
    metrics_host: str = "0.0.0.0"
    json_logs: bool = False
    log_level: str = "INFO"
    worker_id: str | None = None

    @property
    def resolved_worker_id(self) -> str:
        return self.worker_id or _default_worker_id()

    @property
    def user_agent(self) -> str:
        return user_agent(self.user_agent_contact)

    @property
    def politeness(self) -> HostPoliteness:
        """The pool's politeness defaults, as the claim binds them."""
        return HostPoliteness(
            max_concurrent_per_host=min(
                self.max_concurrent_per_host, MAX_CONCURRENT_PER_HOST_LIMIT
            ),
            delay_seconds=self.host_delay_seconds,
            respect_robots_txt=self.respect_robots_txt,
        )


def _check_table() -> None:
    declared = {option.name: option.default for option in OPTIONS}
    for item in fields(WorkerSettings):
        if item.name not in declared or declared[item.name] != item.default:
            raise AssertionError(f"OPTIONS and WorkerSettings disagree on {item.name}")


_check_table()


class SettingsError(ValueError):
    """A flag or environment variable has an unusable value."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per option; unset flags stay None so the environment can fill them."""
    for option in OPTIONS:
        if option.is_switch:
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="store_const",
                const="1",
                default=None,
                help=f"{option.help} [env {option.env}]",
            )
        elif option.name == "queues":
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="append",
                default=None,
                metavar="NAME",
                help=f"{option.help} [env {option.env}, default: default]",
            )
        else:
            parser.add_argument(
                option.flag,
                dest=option.name,
                default=None,
                metavar=option.name.upper(),
                help=f"{option.help} [env {option.env}, default: {_show(option.default)}]",
            )


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value) or "none"
    return str(value)


def settings_from(
    arguments: argparse.Namespace | Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerSettings:
    """Build settings from parsed flags (strings or None) and the environment.

    Raises SettingsError naming the flag/variable of the first bad value.
    """
    given: Mapping[str, Any]
    if arguments is None:
        given = {}
    elif isinstance(arguments, argparse.Namespace):
        given = vars(arguments)
    else:
        given = arguments
    environment = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw = given.get(option.name)
        source = option.flag
        if isinstance(raw, list):
            raw = ",".join(raw)
        if raw is None and option.env in environment:
            raw = environment[option.env]
            source = option.env
        if raw is None:
            values[option.name] = option.default
            continue
        try:
            values[option.name] = option.parse(str(raw))
        except ValueError as error:
            raise SettingsError(f"{source}: {error}") from error
    return WorkerSettings(**values)


def describe(settings: WorkerSettings) -> dict[str, Any]:
    """Settings for the startup log line, without secrets (the database password)."""
    shown: dict[str, Any] = {}
    for item in fields(settings):
        value = getattr(settings, item.name)
        if item.name == "database_url" and value:
            value = _without_password(value)
        elif isinstance(value, tuple):
            value = [str(entry) for entry in value]
        shown[item.name] = value
    return shown


def _without_password(conninfo: str) -> str:
    try:
        import psycopg

        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except Exception:
        return "(unparsable)"
    params.pop("password", None)
    return " ".join(f"{key}={value}" for key, value in params.items())


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
