"""The per-job options a producer may put in `payload`, and their validation.

This is the one place that lists them (docs/queue.md repeats the table). A row whose payload is
not a JSON object, names an unknown option or gives an option the wrong type fails permanently
with reason `invalid_payload` and an error that names every problem: retrying cannot fix it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import re2

from scrapeq_queue.politeness import site_delay_problem, site_limit_problem
from scrapeq_queue.sealed_credentials import SEALED_PREFIX, is_sealed_text

WAIT_UNTIL_VALUES: Final = ("load", "domcontentloaded", "networkidle0", "networkidle2")
# Kinds of sub-resource a job may tell the browser not to fetch (blockResources): none of them
# changes the DOM a selector reads, except that without stylesheets, layout (and so what CSS
# hides or shows) is not what a visitor sees.
RESOURCE_KINDS: Final = ("image", "font", "media", "stylesheet")
# A page that needs more than ten minutes is a stuck page, not a slow one.
MAX_TIMEOUT_SECONDS: Final = 600.0
EXTRACT_FIELD_KEYS: Final = frozenset({"selector", "attribute", "all"})
POLITENESS_KEYS: Final = frozenset({"maxConcurrentPerHost", "delaySeconds", "respectRobotsTxt"})
FOLLOW_KEYS: Final = frozenset(
    {"selector", "maxDepth", "maxPages", "sameDomain", "include", "exclude", "extract"}
)
# Followed pages per job when follow.maxPages is not given: a crawl stays bounded by default.
DEFAULT_FOLLOW_MAX_PAGES: Final = 1000
# Bounds on follow.include / follow.exclude: a handful of patterns is what a crawl needs, and
# each is matched against every link of every page.
MAX_FOLLOW_PATTERNS: Final = 50
MAX_FOLLOW_PATTERN_CHARS: Final = 1024
# What follow.include / follow.exclude patterns may not use: RE2 runs in time linear in the
# URL's length, so it has no backreferences or lookaround (Python's `re` would take exponential
# time on a pattern like `(a+)+$` and stall a worker's event loop).
_RE2_HINT: Final = (
    "patterns use RE2 syntax, which matches in linear time: no backreferences (\\1) or "
    "lookaround ((?=...), (?!...), (?<=...), (?<!...))"
)


class URLPattern(Protocol):
    """A compiled follow.include / follow.exclude pattern."""

    def search(self, text: str) -> object | None: ...


def compile_url_pattern(pattern: str) -> URLPattern:
    """Compile a follow.include / follow.exclude pattern with RE2 (linear-time matching).

    Raises ValueError naming what RE2 refused (Python's `re` syntax minus backreferences and
    lookaround is accepted; see docs/scrapejob.md).
    """
    options = re2.Options()
    # RE2 would also write every refused pattern to stderr; the caller reports it instead.
    options.log_errors = False
    try:
        compiled: URLPattern = re2.compile(pattern, options)
    except re2.error as error:
        detail = error.args[0] if error.args else error
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(str(detail)) from error
    return compiled


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_render(value: object) -> list[str]:
    return [] if isinstance(value, bool) else ["render must be true or false"]


def _check_selector(name: str) -> Callable[[object], list[str]]:
    def check(value: object) -> list[str]:
        if isinstance(value, str) and value.strip():
            return []
        return [f"{name} must be a non-empty CSS selector string"]

    return check


def _check_wait_until(value: object) -> list[str]:
    if value in WAIT_UNTIL_VALUES:
        return []
    return [f"waitUntil must be one of {', '.join(WAIT_UNTIL_VALUES)}"]


def _check_timeout(value: object) -> list[str]:
    if _is_number(value) and 0 < float(value) <= MAX_TIMEOUT_SECONDS:  # type: ignore[arg-type]
        return []
    return [f"timeoutSeconds must be a number above 0 and at most {MAX_TIMEOUT_SECONDS:g}"]


def _check_extract(value: object) -> list[str]:
    if not isinstance(value, Mapping) or not value:
        return ["extract must be a non-empty object of field name -> selector"]
    problems: list[str] = []
    for field_name, spec in value.items():
        if isinstance(spec, str):
            if not spec.strip():
                problems.append(f"extract.{field_name} must be a non-empty selector")
            continue
        if not isinstance(spec, Mapping):
            problems.append(
                f"extract.{field_name} must be a selector string or "
                '{"selector": ..., "attribute": ..., "all": ...}'
            )
            continue
        unknown = sorted(set(spec) - EXTRACT_FIELD_KEYS)
        if unknown:
            problems.append(f"extract.{field_name} has unknown keys: {', '.join(unknown)}")
        selector = spec.get("selector")
        if not isinstance(selector, str) or not selector.strip():
            problems.append(f"extract.{field_name}.selector must be a non-empty string")
        if "attribute" in spec and not isinstance(spec["attribute"], str):
            problems.append(f"extract.{field_name}.attribute must be a string")
        if "all" in spec and not isinstance(spec["all"], bool):
            problems.append(f"extract.{field_name}.all must be true or false")
    return problems


def _check_follow(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return ['follow must be an object {"selector": ..., "maxDepth": ..., "maxPages": ...}']
    problems: list[str] = []
    unknown = sorted(set(value) - FOLLOW_KEYS)
    if unknown:
        problems.append(f"follow has unknown keys: {', '.join(unknown)}")
    selector = value.get("selector")
    if not isinstance(selector, str) or not selector.strip():
        problems.append("follow.selector must be a non-empty string")
    for key, minimum in (("maxDepth", 0), ("maxPages", 1)):
        if key in value:
            number = value[key]
            if not isinstance(number, int) or isinstance(number, bool) or number < minimum:
                problems.append(f"follow.{key} must be an integer >= {minimum}")
    if "sameDomain" in value and not isinstance(value["sameDomain"], bool):
        problems.append("follow.sameDomain must be true or false")
    for key in ("include", "exclude"):
        if key in value:
            problems.extend(_check_patterns(f"follow.{key}", value[key]))
    if "extract" in value:
        problems.extend(
            problem.replace("extract", "follow.extract", 1)
            for problem in _check_extract(value["extract"])
        )
    return problems


def _check_patterns(name: str, value: object) -> list[str]:
    """A list of regular expressions (RE2 syntax, searched anywhere in the URL)."""
    if not isinstance(value, list) or len(value) > MAX_FOLLOW_PATTERNS:
        return [f"{name} must be a list of at most {MAX_FOLLOW_PATTERNS} regular expressions"]
    problems: list[str] = []
    for position, pattern in enumerate(value):
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_FOLLOW_PATTERN_CHARS:
            problems.append(
                f"{name}[{position}] must be a regular expression of 1-"
                f"{MAX_FOLLOW_PATTERN_CHARS} characters"
            )
            continue
        try:
            compile_url_pattern(pattern)
        except ValueError as error:
            problems.append(
                f"{name}[{position}] {pattern!r} is not a valid regular expression: {error} "
                f"({_RE2_HINT})"
            )
    return problems


def _check_politeness(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return [
            'politeness must be an object {"maxConcurrentPerHost": ..., "delaySeconds": ..., '
            '"respectRobotsTxt": ...}'
        ]
    problems: list[str] = []
    unknown = sorted(set(value) - POLITENESS_KEYS)
    if unknown:
        problems.append(f"politeness has unknown keys: {', '.join(unknown)}")
    for key, check in (
        ("maxConcurrentPerHost", site_limit_problem),
        ("delaySeconds", site_delay_problem),
    ):
        if key in value and (problem := check(value[key])):
            problems.append(f"politeness.{key} {problem}")
    if "respectRobotsTxt" in value and not isinstance(value["respectRobotsTxt"], bool):
        problems.append("politeness.respectRobotsTxt must be true or false")
    return problems


def _check_headers(value: object) -> list[str]:
    if isinstance(value, Mapping) and all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        return []
    return ["headers must be an object of header name -> string value"]


def check_resource_kinds(name: str, value: object) -> list[str]:
    """Problems with a blockResources list (the payload's, or a pool's default)."""
    if (
        isinstance(value, list | tuple)
        and all(kind in RESOURCE_KINDS for kind in value)
        and len(set(value)) == len(value)
    ):
        return []
    return [f"{name} must be a list of distinct kinds from {', '.join(RESOURCE_KINDS)}"]


def _check_sealed(value: object) -> list[str]:
    # Credentials the operator sealed (sealed_credentials.py); only a key holder can say more.
    if is_sealed_text(value):
        return []
    return [f"sealed must be a sealed credentials text ({SEALED_PREFIX}...) made by the operator"]


# option name -> validator returning the problems with its value.
PAYLOAD_OPTIONS: Final[Mapping[str, Callable[[object], list[str]]]] = {
    "render": _check_render,
    "waitFor": _check_selector("waitFor"),
    "waitUntil": _check_wait_until,
    "timeoutSeconds": _check_timeout,
    "extract": _check_extract,
    "follow": _check_follow,
    "headers": _check_headers,
    "sealed": _check_sealed,
    "blockResources": lambda value: check_resource_kinds("blockResources", value),
    "politeness": _check_politeness,
}


def validate_payload(payload: object) -> list[str]:
    """Return every problem with a job's payload; an empty list means the worker may run it.

    `None` (a classic row inserted with payload NULL) counts as an empty object.
    """
    if payload is None:
        return []
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        return [f"payload must be a JSON object of options, got a JSON {_json_kind(kind)}"]
    problems: list[str] = []
    for name, value in payload.items():
        check = PAYLOAD_OPTIONS.get(name)
        if check is None:
            known = ", ".join(PAYLOAD_OPTIONS)
            problems.append(f"unknown payload option {name!r} (known options: {known})")
            continue
        problems.extend(check(value))
    return problems


def payload_as_options(payload: object) -> dict[str, Any]:
    """The payload as a dict of options (NULL -> {}); call only after validate_payload passed."""
    if isinstance(payload, Mapping):
        return dict(payload)
    return {}


def _json_kind(python_type: str) -> str:
    return {
        "list": "array",
        "str": "string",
        "int": "number",
        "float": "number",
        "bool": "boolean",
    }.get(python_type, python_type)
