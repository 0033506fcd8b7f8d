"""Reading a ScrapeJob's spec into what the queue needs: its URLs and the rows' options.

Pure functions; the API server already enforced the schema, so these only deal with what the
schema cannot see (the contents of a urlsFrom ConfigMap) and with shaping the row payload.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq_queue import RowOptions, named_crawl_key, schedule_crawl_key
from scrapeq_queue.payload import DECLARATIVE_PARSER, OBJECT_SOURCE_URL
from scrapeq_queue.source_rows import SITEMAP_KEY_PREFIX
from scrapeq_queue.urls import normalise_url

from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.schedule_plan import SCHEDULE_LABEL

# Spec fields that become options in each row's payload (the worker's contract, see
# scrapeq_queue.payload). spec.payload supplies further options and loses on a clash.
PAYLOAD_FIELDS = (
    "render",
    "waitUntil",
    "waitFor",
    "blockResources",
    "blockMarkers",
    "timeoutSeconds",
    "extract",
    "follow",
    "next",
    "routes",
    "politeness",
    "items",
    "structuredData",
    "steps",
    "session",
    "keep",
)
# How many bad lines an error message quotes.
QUOTED_BAD_LINES = 3
# A ConfigMap holds at most 1 MiB, about 30,000 URLs as text; gzip in binaryData holds ten
# times more. Decompression stops here so that a small "zip bomb" cannot exhaust memory.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ConfigMapKey:
    """Where a urlsFrom job keeps its URL list."""

    name: str
    key: str


@dataclass(frozen=True)
class ScrapeJobField:
    """Where a urlsFrom job takes its URLs from another ScrapeJob: a field of its results."""

    name: str
    field: str


@dataclass(frozen=True)
class SitemapSource:
    """A urlsFrom job's sitemap (or site's robots.txt): one source row that workers expand
    into the job's rows (docs/scrapejob.md, "Sitemaps")."""

    url: str
    kind: str  # "sitemap", "robots" or "object" (scrapeq_queue.payload.SOURCE_KINDS)
    lastmod_after: str | None = None
    # A URL list in the worker pool's object store (kind object): its key and format.
    key: str | None = None
    list_format: str | None = None

    @property
    def dedup_key(self) -> str:
        """The source row's key per owner: the one a sitemap row of an index gets."""
        return SITEMAP_KEY_PREFIX + normalise_url(self.url)

    def payload(self) -> dict[str, Any]:
        """The row payload's `source` option."""
        source: dict[str, Any] = {"kind": self.kind}
        if self.key is not None:
            source["key"] = self.key
            source["format"] = self.list_format or "lines"
        if self.lastmod_after is not None:
            source["lastmodAfter"] = self.lastmod_after
        return source


def robots_txt_url(site: str) -> str:
    """The robots.txt of the site of `site` (a URL of the site, or of its robots.txt)."""
    parts = urlsplit(site)
    if parts.path.endswith("/robots.txt"):
        return site
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


def url_source(
    spec: Mapping[str, Any],
) -> list[str] | ConfigMapKey | ScrapeJobField | SitemapSource:
    """The job's URLs as given inline, or where they are kept (a ConfigMap key, a field of
    another ScrapeJob's results, a sitemap or a site's robots.txt)."""
    if spec.get("url"):
        return [str(spec["url"])]
    if spec.get("urls"):
        return _unique([str(url) for url in spec["urls"]])
    urls_from = spec.get("urlsFrom") or {}
    if urls_from.get("scrapeJob"):
        return ScrapeJobField(
            name=str(urls_from["scrapeJob"]), field=str(urls_from.get("field") or "links")
        )
    lastmod_after = urls_from.get("lastmodAfter")
    lastmod_after = str(lastmod_after) if lastmod_after else None
    if urls_from.get("sitemap"):
        return SitemapSource(str(urls_from["sitemap"]), "sitemap", lastmod_after)
    if urls_from.get("robots"):
        return SitemapSource(robots_txt_url(str(urls_from["robots"])), "robots", lastmod_after)
    listed = urls_from.get("object") or {}
    if listed.get("key"):
        key = str(listed["key"])
        return SitemapSource(
            OBJECT_SOURCE_URL + key,
            "object",
            key=key,
            list_format=str(listed.get("format") or "lines"),
        )
    source = urls_from.get("configMapKeyRef") or {}
    if source.get("name") and source.get("key"):
        return ConfigMapKey(name=str(source["name"]), key=str(source["key"]))
    raise JobNotRunnableError("NoURLs", "spec has none of url, urls or urlsFrom", permanent=True)


def dependency_names(spec: Mapping[str, Any]) -> list[str]:
    """The ScrapeJobs this one waits for: spec.dependsOn, then a urlsFrom.scrapeJob source."""
    names = [str(name) for name in spec.get("dependsOn") or []]
    upstream = (spec.get("urlsFrom") or {}).get("scrapeJob")
    if upstream:
        names.append(str(upstream))
    return _unique(names)


def first_url(spec: Mapping[str, Any]) -> str | None:
    """The first inline URL, for the wide printer column (None for urlsFrom)."""
    if spec.get("url"):
        return str(spec["url"])
    if spec.get("urls"):
        return str(spec["urls"][0])
    return None


def is_http_url(text: str) -> bool:
    """True for an absolute http:// or https:// URL with a host (the CRD's own rule)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def parse_url_list(text: str, *, max_urls: int, where: str) -> list[str]:
    """The URLs of a urlsFrom value: one per line, blank lines and '#' comments ignored.

    Duplicates collapse (each URL is queued once). Raises JobNotRunnableError naming the first
    bad lines (reason InvalidURLList), an empty list (NoURLs) or too many URLs (TooManyURLs).
    `where` names the source in messages, e.g. "ConfigMap urls key list.txt".
    """
    urls: list[str] = []
    bad: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if is_http_url(line):
            urls.append(line)
        else:
            bad.append(f"line {number}: {line[:100]!r}")
    if bad:
        quoted = "; ".join(bad[:QUOTED_BAD_LINES])
        more = f" and {len(bad) - QUOTED_BAD_LINES} more" if len(bad) > QUOTED_BAD_LINES else ""
        raise JobNotRunnableError(
            "InvalidURLList",
            f"{where}: {len(bad)} line(s) are not http(s) URLs: {quoted}{more}",
        )
    unique = _unique(urls)
    if not unique:
        raise JobNotRunnableError("NoURLs", f"{where} holds no URLs")
    if len(unique) > max_urls:
        raise JobNotRunnableError(
            "TooManyURLs", f"{where} holds {len(unique)} URLs; the operator accepts {max_urls}"
        )
    return unique


def decode_url_list(raw: bytes, *, where: str) -> str:
    """A binaryData value as text: gzip-compressed (detected by its magic bytes) or plain UTF-8.

    Raises JobNotRunnableError (InvalidURLList) for a broken archive, an archive larger than
    MAX_DECOMPRESSED_BYTES, or bytes that are not UTF-8.
    """
    data = raw
    if raw[:2] == GZIP_MAGIC:
        decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            data = decompressor.decompress(raw, MAX_DECOMPRESSED_BYTES)
        except zlib.error as error:
            raise JobNotRunnableError(
                "InvalidURLList", f"{where}: not a valid gzip archive ({error})"
            ) from error
        if decompressor.unconsumed_tail:
            raise JobNotRunnableError(
                "InvalidURLList",
                f"{where}: decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes",
            )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JobNotRunnableError("InvalidURLList", f"{where}: not UTF-8 text") from error


def sealed_value_name(secret_key_ref: Mapping[str, Any]) -> str:
    """The name a step's Secret value is sealed under: `<secret>/<key>`."""
    return f"{secret_key_ref['name']}/{secret_key_ref['key']}"


def payload_steps(steps: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """spec.steps as payload.steps: a step's `valueFrom.secretKeyRef` becomes `sealedValue`,
    the name of its value in the rows' sealed credentials (credentials.py seals it)."""
    converted: list[dict[str, Any]] = []
    for step in steps:
        row_step = {name: value for name, value in step.items() if name != "valueFrom"}
        reference = (step.get("valueFrom") or {}).get("secretKeyRef")
        if reference:
            row_step["sealedValue"] = sealed_value_name(reference)
        converted.append(row_step)
    return converted


def row_options(spec: Mapping[str, Any]) -> RowOptions:
    """Queue, priority, parser, retries and the payload every row of the job carries (every
    key set, so the spec alone decides them)."""
    retries = spec.get("retries") or {}
    payload: dict[str, Any] = dict(spec.get("payload") or {})
    for name in PAYLOAD_FIELDS:
        if spec.get(name) is not None:
            payload[name] = spec[name]
    parser = str(spec.get("parser") or DECLARATIVE_PARSER)
    # spec.parser (defaulted to `default`, the declarative payload) becomes the payload's
    # `parser` only when it names a registered parser: rows of a ScrapeJob without one keep
    # the payload a worker without parser support accepts.
    if parser != DECLARATIVE_PARSER:
        payload["parser"] = parser
    if spec.get("steps"):
        payload["steps"] = payload_steps(spec["steps"])
    if spec.get("routes"):
        payload["routes"] = {
            label: {**route, "steps": payload_steps(route["steps"])}
            if route.get("steps")
            else route
            for label, route in spec["routes"].items()
        }
    login = (spec.get("session") or {}).get("login")
    if login:
        payload["session"] = {"login": {**login, "steps": payload_steps(login["steps"])}}
    retention = spec.get("retention") or {}
    return RowOptions(
        queue=str(spec.get("queue") or "default"),
        priority=int(spec.get("priority") or 0),
        parser_type=parser,
        max_retries=int(retries.get("limit", 3)),
        backoff_seconds=float(retries.get("backoffSeconds", 10)),
        payload=payload,
        # Without spec.retention the rows carry none and follow the operator's retention
        # settings at each prune (docs/queue.md, "Retention").
        retain_for=(
            timedelta(days=float(retention["days"])) if retention.get("days") is not None else None
        ),
    )


# spec.recrawl.after: days, hours, minutes and seconds, each a whole number, in that order.
_RECRAWL_AFTER: Final = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def recrawl_after_seconds(text: str) -> float:
    """spec.recrawl.after (such as 30m, 6h or 1d12h) in seconds; raise JobNotRunnableError
    for anything else."""
    match = _RECRAWL_AFTER.match(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise JobNotRunnableError(
            "InvalidSpec",
            f"spec.recrawl.after must be a duration such as 30m, 6h or 1d12h (whole days d, "
            f"hours h, minutes m, seconds s), got {text[:60]!r}",
            permanent=True,
        )
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return float(days * 86_400 + hours * 3_600 + minutes * 60 + seconds)


def schedule_parent(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the scheduled ScrapeJob this one is a run of, or None."""
    labels = meta.get("labels") or {}
    if SCHEDULE_LABEL not in labels:
        return None
    for reference in meta.get("ownerReferences") or ():
        if reference.get("kind") == "ScrapeJob" and reference.get("controller"):
            return str(reference["name"]), str(reference["uid"])
    return None


def crawl_payload(
    spec: Mapping[str, Any], meta: Mapping[str, Any], namespace: str
) -> dict[str, Any]:
    """The payload options of the job's crawl memory (docs/scrapejob.md, "Recurring crawls"):
    `crawlKey` from spec.recrawl.key (namespaced), else the schedule the job is a run of;
    `recrawlAfterSeconds` from spec.recrawl.after. Empty for a job that is neither."""
    recrawl = spec.get("recrawl") or {}
    key: str | None = None
    if recrawl.get("key"):
        key = named_crawl_key(namespace, str(recrawl["key"]))
    else:
        parent = schedule_parent(meta)
        if parent is not None:
            key = schedule_crawl_key(namespace, *parent)
    payload: dict[str, Any] = {}
    if key is not None:
        payload["crawlKey"] = key
    if recrawl.get("after") is not None:
        if key is None:
            raise JobNotRunnableError(
                "InvalidSpec",
                "spec.recrawl.after needs a crawl to remember: set spec.recrawl.key, or "
                "spec.schedule (its runs share one)",
                permanent=True,
            )
        payload["recrawlAfterSeconds"] = recrawl_after_seconds(str(recrawl["after"]))
    return payload


def _unique(urls: list[str]) -> list[str]:
    return list(dict.fromkeys(urls))
