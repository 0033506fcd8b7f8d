"""The per-job options a producer may put in `payload`, and their validation.

This is the one place that lists them (docs/queue.md repeats the table). A row whose payload is
not a JSON object, names an unknown option or gives an option the wrong type fails permanently
with reason `invalid_payload` and an error that names every problem: retrying cannot fix it.

Every value is bounded, whatever a producer wrote into the row: the payload's size and nesting
(MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH), the magnitude of every number (MAX_PAYLOAD_NUMBER, finite),
each option's own range, the number and size of extract fields and follow's depth and pages.
`load_payload` reads a row's JSON text under the same bounds without ever raising, so a row no
worker could load is failed like any other invalid row (docs/queue.md, "Bounds").
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import re2

from scrapeq_queue.crawl_memory import MAX_CRAWL_KEY_CHARS, MAX_RECRAWL_AFTER_SECONDS
from scrapeq_queue.page_steps import MAX_SETTLE_SECONDS, check_session, check_steps
from scrapeq_queue.politeness import site_delay_problem, site_limit_problem
from scrapeq_queue.sealed_credentials import SEALED_PREFIX, is_sealed_text
from scrapeq_queue.urls import target_problem

WAIT_UNTIL_VALUES: Final = ("load", "domcontentloaded", "networkidle0", "networkidle2")
# Kinds of sub-resource a job may tell the browser not to fetch (blockResources): none of them
# changes the DOM a selector reads, except that without stylesheets, layout (and so what CSS
# hides or shows) is not what a visitor sees.
RESOURCE_KINDS: Final = ("image", "font", "media", "stylesheet")
# A page that needs more than ten minutes is a stuck page, not a slow one.
MAX_TIMEOUT_SECONDS: Final = 600.0
EXTRACT_FIELD_KEYS: Final = frozenset({"selector", "xpath", "attribute", "all", "transforms"})
POLITENESS_KEYS: Final = frozenset({"maxConcurrentPerSite", "delaySeconds", "respectRobotsTxt"})
# Keys named before 0.1.0: a row that still uses one fails with the key's name now.
RENAMED_POLITENESS_KEYS: Final = {"maxConcurrentPerHost": "maxConcurrentPerSite"}
FOLLOW_KEYS: Final = frozenset(
    {"selector", "maxDepth", "maxPages", "sameHost", "include", "exclude", "extract", "label"}
)
RENAMED_FOLLOW_KEYS: Final = {"sameDomain": "sameHost"}
# routes: label -> what the pages followed under that label are scraped with. A route's keys
# replace the payload's own for those pages (the other options, such as render or headers,
# stay the job's). Labels are names (ROUTE_LABEL_PATTERN) and there are at most MAX_ROUTES.
ROUTE_KEYS: Final = ("extract", "items", "follow", "next", "steps", "waitFor")
MAX_ROUTES: Final = 20
ROUTE_LABEL_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
_ROUTE_LABEL: Final = re.compile(ROUTE_LABEL_PATTERN)
# Followed pages per job when follow.maxPages is not given: a crawl stays bounded by default.
DEFAULT_FOLLOW_MAX_PAGES: Final = 1000
# The most follow.maxPages may say (the CRD's maximum too): a crawl of its own, not a row's.
MAX_FOLLOW_PAGES: Final = 100_000
# Links deep a crawl may go (the CRD's maximum too); 0 follows nothing.
MAX_FOLLOW_DEPTH: Final = 5
# next: the "next page" link of a paginated listing, followed as a chain of its own. `page` is
# the chain position of the row's page (1, the page the chain starts on, when left out); the
# worker sets it in the rows it queues.
NEXT_KEYS: Final = frozenset({"selector", "maxPages", "page", "click", "settleSeconds"})
# Pages of a chain when next.maxPages is not given, and the most it may say (the CRD's too).
DEFAULT_NEXT_MAX_PAGES: Final = 100
MAX_NEXT_PAGES: Final = 10_000
# The payload as a whole: its JSON text (as PostgreSQL prints a jsonb) and how deep objects and
# arrays nest. The largest real payload (50 extract fields, 100 include/exclude patterns,
# sealed credentials) is well under both; migration 0004 makes the table refuse more.
MAX_PAYLOAD_BYTES: Final = 256 * 1024
MAX_PAYLOAD_DEPTH: Final = 32
# Every number in a payload, wherever it is, is finite and at most this large in magnitude:
# no option needs more, and a 5,000-digit integer cannot even be turned into a float.
MAX_PAYLOAD_NUMBER: Final = 10**15
# extract (and follow.extract): how many fields, and the characters of their names, selectors
# and attributes together. Each field is one query of the page and one value in the result.
MAX_EXTRACT_FIELDS: Final = 50
MAX_EXTRACT_CHARS: Final = 16 * 1024
MAX_FIELD_NAME_CHARS: Final = 63
MAX_SELECTOR_CHARS: Final = 1024
MAX_ATTRIBUTE_CHARS: Final = 256
# headers: how many, and how long a name and a value may be (servers refuse larger anyway).
MAX_HEADERS: Final = 50
MAX_HEADER_NAME_CHARS: Final = 256
MAX_HEADER_VALUE_CHARS: Final = 8192
# An error names at most this many problems and quotes at most this much of a bad name.
MAX_REPORTED_PROBLEMS: Final = 20
_QUOTED_CHARS: Final = 60
# items: one object per element matching `selector`, of `fields` read inside that element.
ITEMS_KEYS: Final = frozenset({"selector", "xpath", "fields", "limit"})
# Items kept per page when items.limit is not given: a listing page's worth.
DEFAULT_ITEMS_LIMIT: Final = 1000
# The most items.limit may say (the CRD's maximum too): each item is one query per field.
MAX_ITEMS_LIMIT: Final = 10_000
# An item field whose selector is this (or empty, or left out) reads the item's element itself.
ITEM_ELEMENT_SELECTOR: Final = ":scope"
# transforms of a field: what each is called and which keys it takes beside `type`
# (docs/queue.md, "Transforms"); applied in order to the extracted value.
TRANSFORM_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "trim": frozenset(),
    "lowercase": frozenset(),
    "uppercase": frozenset(),
    "number": frozenset({"decimal", "thousands"}),
    "price": frozenset({"decimal", "thousands", "currency"}),
    "regex": frozenset({"pattern", "group"}),
    "absoluteUrl": frozenset(),
    "join": frozenset({"separator"}),
    "default": frozenset({"value"}),
}
# A field's transforms, and the sizes of their strings: a chain of ten is more than any field
# needs, and each runs on every value of every page.
MAX_TRANSFORMS: Final = 10
MAX_TRANSFORM_PATTERN_CHARS: Final = 1024
MAX_JOIN_SEPARATOR_CHARS: Final = 64
MAX_DEFAULT_VALUE_CHARS: Final = 1024
# number/price: the decimal separator, and the thousands separators that may go with it.
DECIMAL_SEPARATORS: Final = (".", ",")
THOUSANDS_SEPARATORS: Final = (",", ".", " ", "'", "")
# structuredData: the syntaxes a page's structured data is read in (`true`: all of them).
STRUCTURED_DATA_SYNTAXES: Final = ("json-ld", "microdata", "opengraph")
# RFC 9110 token characters: what a header name may be made of.
_TOKEN_CHARACTERS: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
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

# parser: a parser registered in the worker's image (docs/parsers.md). Its name is a label of
# the queue's parser_type column too (VARCHAR(255)), a published name and part of a message:
# letters, digits, ".", "_" and "-", starting with a letter or digit, at most 100 characters
# (the CRD's spec.parser bound). `default` names the declarative extraction of the payload
# itself and is never a registered parser's name.
PARSER_NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
DECLARATIVE_PARSER: Final = "default"
_PARSER_NAME: Final = re.compile(PARSER_NAME_PATTERN)


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


class ValueMatch(Protocol):
    """A match of a regex transform's pattern."""

    def group(self, index: int, /) -> str | None: ...


class ValuePattern(Protocol):
    """A compiled regex transform pattern: how many groups it has, and its first match."""

    @property
    def groups(self) -> int: ...

    def search(self, text: str) -> ValueMatch | None: ...


def compile_value_pattern(pattern: str) -> ValuePattern:
    """Compile a regex transform's pattern with RE2, as compile_url_pattern does (linear-time
    matching on any extracted text); raises ValueError naming what RE2 refused."""
    compiled: Any = compile_url_pattern(pattern)
    value_pattern: ValuePattern = compiled
    return value_pattern


@dataclass(frozen=True)
class UnreadablePayload:
    """A row's payload that could not be loaded within the bounds; `problem` says why."""

    problem: str


class _OutOfBounds(ValueError):
    """Raised inside the JSON decoder to stop at a value JSON does not have."""


def _no_constant(text: str) -> object:
    raise _OutOfBounds(f"payload holds {text}, which is not a JSON number")


class _Verdicts:
    """What the checks said of the latest payloads, by a digest of their JSON text (most recent
    last, at most `size`). A ScrapeJob's rows carry one payload, so a claim of 50 of them reads
    the same text 50 times: checked once, it costs a digest the other 49 times instead of the
    checks (for a 2 KB payload of steps and items, 27 µs for its bounds and 88 µs for its
    options, against 3 µs for a digest)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> tuple[str, ...] | None:
        with self._lock:
            verdict = self._entries.get(key)
            if verdict is not None:
                self._entries.move_to_end(key)
            return verdict

    def put(self, key: bytes, verdict: tuple[str, ...]) -> None:
        with self._lock:
            self._entries[key] = verdict
            self._entries.move_to_end(key)
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)


def _digest(text: bytes | str) -> bytes:
    """A key for a payload's JSON text (128-bit BLAKE2b: no two payloads share one)."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.blake2b(data, digest_size=16).digest()


# Texts load_payload found within the bounds of nesting and numbers, and the options' problems
# claimed_payload_problems found, by the key of the text.
_IN_BOUNDS: Final = _Verdicts(512)
_OPTION_VERDICTS: Final = _Verdicts(512)


# Python refuses to read an integer of more than 4,300 digits and says how many it had.
_TOO_MANY_DIGITS: Final = re.compile(r"integer string conversion: value has (\d+) digits")


def load_payload(data: bytes | bytearray | memoryview | str) -> object:
    """A row's payload from its JSON text; never raises.

    The value when it loads within MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH and the number bounds,
    else an UnreadablePayload naming the first problem (validate_payload reports it).
    """
    return load_payload_and_key(data)[0]


def load_payload_and_key(data: bytes | bytearray | memoryview | str) -> tuple[object, bytes]:
    """load_payload's value, and the key of its JSON text (a digest) under which
    claimed_payload_problems keeps the verdict on the payload's options."""
    if isinstance(data, memoryview | bytearray):
        data = bytes(data)
    if len(data) > MAX_PAYLOAD_BYTES:
        return UnreadablePayload(_size_problem(len(data))), b""
    key = _digest(data)
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except _OutOfBounds as error:
        return UnreadablePayload(str(error)), key
    except RecursionError:
        return UnreadablePayload(_depth_problem()), key
    except (ValueError, TypeError) as error:
        digits = _TOO_MANY_DIGITS.search(str(error))
        if digits is not None:
            return UnreadablePayload(_number_problem(int(digits.group(1)))), key
        # PostgreSQL only hands out valid JSON; this is a payload no JSON reader agrees with.
        unreadable = f"payload is not readable JSON ({_quoted(str(error))})"
        return UnreadablePayload(unreadable), key
    if _IN_BOUNDS.get(key) is not None:
        return value, key
    problem = _shape_problem(value)
    if problem is not None:
        return UnreadablePayload(problem), key
    _IN_BOUNDS.put(key, ())
    return value, key


def claimed_payload_problems(value: object, key: bytes) -> list[str]:
    """validate_payload(value, loaded=True) for a value load_payload_and_key read as `key`,
    from the verdict kept under that key when there is one."""
    if not isinstance(value, Mapping) or not value or not key:
        return validate_payload(value, loaded=True)
    verdict = _OPTION_VERDICTS.get(key)
    if verdict is None:
        verdict = tuple(_option_problems(value))
        _OPTION_VERDICTS.put(key, verdict)
    return list(verdict)


def _number_problem(digits: int | None) -> str:
    bound = f"{MAX_PAYLOAD_NUMBER:.0e} in magnitude"
    if digits is None:
        return f"payload holds a number above {bound}"
    return f"payload holds a number of {digits} digits; numbers are at most {bound}"


def _size_problem(size: int) -> str:
    return f"payload is {size} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are allowed"


def _depth_problem() -> str:
    return f"payload nests objects and arrays deeper than {MAX_PAYLOAD_DEPTH} levels"


def _shape_problem(value: object) -> str | None:
    """The first bound a loaded payload breaks: nesting, or a number out of range."""
    # Containers by level: one pass over every value, no recursion (the nesting is hostile).
    level: list[object] = [value]
    for depth in range(MAX_PAYLOAD_DEPTH + 1):
        below: list[object] = []
        for item in level:
            kind = type(item)  # exact types first: an ABC check per value is slow
            if kind is str or kind is bool or item is None:
                continue
            if kind is int or kind is float:
                if kind is float and math.isnan(item):  # type: ignore[arg-type]
                    return "payload holds NaN, which is not a JSON number"
                if kind is float and math.isinf(item):  # type: ignore[arg-type]
                    return "payload holds a number too large to represent (infinity)"
                if abs(item) > MAX_PAYLOAD_NUMBER:  # type: ignore[arg-type]
                    return _number_problem(_digits(item))  # type: ignore[arg-type]
                continue
            if kind is dict or isinstance(item, Mapping):
                if not all(type(key) is str for key in item):  # type: ignore[attr-defined]
                    return "payload must hold only JSON values (object keys are strings)"
                below.extend(item.values())  # type: ignore[attr-defined]
            elif kind is list or isinstance(item, list | tuple):
                below.extend(item)  # type: ignore[arg-type]
            else:
                continue  # not JSON at all: _json_size says so
            if depth >= MAX_PAYLOAD_DEPTH:
                return _depth_problem()
        if not below:
            return None
        level = below
    return _depth_problem()


def _digits(number: float) -> int | None:
    """The digits of an integer too large for a payload (None: a float, or too long to count
    cheaply)."""
    if isinstance(number, int) and number.bit_length() < 14_000:
        return len(str(abs(number)))
    return None


def _json_size(value: object) -> int | None:
    """The payload's size as JSON text (PostgreSQL's spacing); None when it is not JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return len(text.encode("utf-8", "surrogatepass"))


def _shown(text: str) -> str:
    """A field or option name for an error message: as it is when short and printable."""
    if text.isprintable() and len(text) <= _QUOTED_CHARS:
        return text
    return _quoted(text)


def _quoted(text: object) -> str:
    """A name or value for an error message, cut short: a row's error stays readable."""
    shown = repr(text)
    return shown if len(shown) <= _QUOTED_CHARS else shown[: _QUOTED_CHARS - 3] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(value: object, low: float, high: float, *, low_open: bool = False) -> bool:
    """A JSON number within [low, high] (or (low, high]), compared without converting it (a
    huge integer has no float)."""
    if not _is_number(value):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    above = value > low if low_open else value >= low  # type: ignore[operator]
    return bool(above and value <= high)  # type: ignore[operator]


def _is_integer(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_render(value: object) -> list[str]:
    return [] if isinstance(value, bool) else ["render must be true or false"]


def _check_selector(name: str) -> Callable[[object], list[str]]:
    def check(value: object) -> list[str]:
        if isinstance(value, str) and value.strip() and len(value) <= MAX_SELECTOR_CHARS:
            return []
        return [f"{name} must be a CSS selector string of 1-{MAX_SELECTOR_CHARS} characters"]

    return check


def _check_wait_until(value: object) -> list[str]:
    if value in WAIT_UNTIL_VALUES:
        return []
    return [f"waitUntil must be one of {', '.join(WAIT_UNTIL_VALUES)}"]


def _check_timeout(value: object) -> list[str]:
    if _in_range(value, 0, MAX_TIMEOUT_SECONDS, low_open=True):
        return []
    return [f"timeoutSeconds must be a number above 0 and at most {MAX_TIMEOUT_SECONDS:g}"]


def _check_extract(value: object) -> list[str]:
    if not isinstance(value, Mapping) or not value:
        return ["extract must be a non-empty object of field name -> selector"]
    if len(value) > MAX_EXTRACT_FIELDS:
        return [f"extract has {len(value)} fields; at most {MAX_EXTRACT_FIELDS} are allowed"]
    problems: list[str] = []
    chars = 0
    for field_name, spec in value.items():
        name = _shown(field_name)
        chars += len(field_name)
        if not field_name or len(field_name) > MAX_FIELD_NAME_CHARS:
            problems.append(
                f"extract field name {_quoted(field_name)} must have 1-"
                f"{MAX_FIELD_NAME_CHARS} characters"
            )
        if isinstance(spec, str):
            chars += len(spec)
            if not spec.strip() or len(spec) > MAX_SELECTOR_CHARS:
                problems.append(
                    f"extract.{name} must be a selector of 1-{MAX_SELECTOR_CHARS} characters"
                )
            continue
        if not isinstance(spec, Mapping):
            problems.append(
                f"extract.{name} must be a selector string or "
                '{"selector": ..., "attribute": ..., "all": ...}'
            )
            continue
        unknown = sorted(set(spec) - EXTRACT_FIELD_KEYS)
        if unknown:
            problems.append(
                f"extract.{name} has unknown keys: {', '.join(_shown(key) for key in unknown[:5])}"
            )
        if "selector" in spec and "xpath" in spec:
            problems.append(f"extract.{name} must name a selector or an xpath, not both")
        what = "xpath" if "xpath" in spec else "selector"
        selector = spec.get(what)
        if not isinstance(selector, str) or not selector.strip():
            problems.append(f"extract.{name}.{what} must be a non-empty string")
        elif len(selector) > MAX_SELECTOR_CHARS:
            problems.append(
                f"extract.{name}.{what} must have at most {MAX_SELECTOR_CHARS} characters"
            )
        else:
            chars += len(selector)
        if "attribute" in spec:
            attribute = spec["attribute"]
            if not isinstance(attribute, str) or len(attribute) > MAX_ATTRIBUTE_CHARS:
                problems.append(
                    f"extract.{name}.attribute must be a string of at most "
                    f"{MAX_ATTRIBUTE_CHARS} characters"
                )
            else:
                chars += len(attribute)
        if "all" in spec and not isinstance(spec["all"], bool):
            problems.append(f"extract.{name}.all must be true or false")
        if "transforms" in spec:
            problems.extend(_check_transforms(f"extract.{name}.transforms", spec["transforms"]))
    if chars > MAX_EXTRACT_CHARS:
        problems.append(
            f"extract's names, selectors and attributes have {chars} characters; at most "
            f"{MAX_EXTRACT_CHARS} are allowed"
        )
    return problems


def _check_follow(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return ['follow must be an object {"selector": ..., "maxDepth": ..., "maxPages": ...}']
    problems: list[str] = []
    unknown = sorted(set(value) - FOLLOW_KEYS - RENAMED_FOLLOW_KEYS.keys())
    if unknown:
        problems.append(f"follow has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}")
    for old, new in RENAMED_FOLLOW_KEYS.items():
        if old in value:
            problems.append(f"follow.{old} is now follow.{new}")
    selector = value.get("selector")
    if not isinstance(selector, str) or not selector.strip() or len(selector) > MAX_SELECTOR_CHARS:
        problems.append(f"follow.selector must be a string of 1-{MAX_SELECTOR_CHARS} characters")
    for key, minimum, maximum in (
        ("maxDepth", 0, MAX_FOLLOW_DEPTH),
        ("maxPages", 1, MAX_FOLLOW_PAGES),
    ):
        if key in value and not _is_integer(value[key], minimum, maximum):
            problems.append(f"follow.{key} must be an integer from {minimum} to {maximum}")
    if "sameHost" in value and not isinstance(value["sameHost"], bool):
        problems.append("follow.sameHost must be true or false")
    for key in ("include", "exclude"):
        if key in value:
            problems.extend(_check_patterns(f"follow.{key}", value[key]))
    if "extract" in value:
        problems.extend(
            problem.replace("extract", "follow.extract", 1)
            for problem in _check_extract(value["extract"])
        )
    if "label" in value:
        label = value["label"]
        if not isinstance(label, str) or not _ROUTE_LABEL.fullmatch(label):
            problems.append(f"follow.label must be a route's label: {_LABEL_RULE}")
        elif "extract" in value:
            problems.append(
                "follow.extract and follow.label exclude each other: the route's own extract "
                "applies to the pages of a label"
            )
    return problems


_LABEL_RULE: Final = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def _check_routes(value: object) -> list[str]:
    if not isinstance(value, Mapping) or not value:
        return ['routes must be a non-empty object {"<label>": {"extract": ..., ...}, ...}']
    problems: list[str] = []
    if len(value) > MAX_ROUTES:
        problems.append(f"routes has {len(value)} labels; at most {MAX_ROUTES} are allowed")
    for label, route in list(value.items())[: MAX_ROUTES + 1]:
        if not isinstance(label, str) or not _ROUTE_LABEL.fullmatch(label):
            problems.append(f"routes label {_quoted(label)} must be {_LABEL_RULE}")
            continue
        name = f"routes.{label}"
        if not isinstance(route, Mapping):
            problems.append(f"{name} must be an object of {', '.join(ROUTE_KEYS)}")
            continue
        unknown = sorted(set(route) - set(ROUTE_KEYS))
        if unknown:
            problems.append(
                f"{name} has unknown keys: {', '.join(_shown(k) for k in unknown[:5])} "
                f"(a route has {', '.join(ROUTE_KEYS)})"
            )
        for key in ROUTE_KEYS:
            if key in route and key != "steps":
                # Each option's own check, its messages naming the route.
                problems.extend(f"{name}.{problem}" for problem in PAYLOAD_OPTIONS[key](route[key]))
    return problems


def _check_route(value: object) -> list[str]:
    if isinstance(value, str) and _ROUTE_LABEL.fullmatch(value):
        return []
    return [f"route must be a label of routes: {_LABEL_RULE}"]


def _route_problems(payload: Mapping[str, Any]) -> list[str]:
    """The problems of labels that name no route, and of the routes' steps (bounded like the
    payload's own, by its render and timeoutSeconds)."""
    routes = payload.get("routes")
    defined = set(routes) if isinstance(routes, Mapping) else set()
    known = ", ".join(sorted(str(label) for label in defined)[:MAX_ROUTES]) or "none"
    problems: list[str] = []

    def unknown(name: str, label: object) -> None:
        if isinstance(label, str) and _ROUTE_LABEL.fullmatch(label) and label not in defined:
            problems.append(f"{name} {_quoted(label)} names no route (routes: {known})")

    follow = payload.get("follow")
    if isinstance(follow, Mapping):
        unknown("follow.label", follow.get("label"))
    unknown("route", payload.get("route"))
    if isinstance(routes, Mapping) and len(routes) <= MAX_ROUTES:
        for label, route in routes.items():
            if not isinstance(route, Mapping):
                continue
            follow = route.get("follow")
            if isinstance(follow, Mapping):
                unknown(f"routes.{label}.follow.label", follow.get("label"))
            if "steps" in route:
                problems.extend(
                    _steps_problems(
                        {**payload, "steps": route["steps"]}, name=f"routes.{label}.steps"
                    )
                )
            route_next = route.get("next")
            if (
                isinstance(route_next, Mapping)
                and route_next.get("click") is True
                and payload.get("render") is False
            ):
                problems.append(
                    f"routes.{label}.next.click clicks a button on rendered pages only: remove it "
                    "or set render to true"
                )
    return problems


def _check_next(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return ['next must be an object {"selector": ..., "maxPages": ...}']
    problems: list[str] = []
    unknown = sorted(set(value) - NEXT_KEYS)
    if unknown:
        problems.append(f"next has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}")
    selector = value.get("selector")
    if not isinstance(selector, str) or not selector.strip() or len(selector) > MAX_SELECTOR_CHARS:
        problems.append(f"next.selector must be a string of 1-{MAX_SELECTOR_CHARS} characters")
    for key in ("maxPages", "page"):
        if key in value and not _is_integer(value[key], 1, MAX_NEXT_PAGES):
            problems.append(f"next.{key} must be an integer from 1 to {MAX_NEXT_PAGES}")
    if "click" in value and not isinstance(value["click"], bool):
        problems.append("next.click must be true or false")
    if "settleSeconds" in value and not _in_range(
        value["settleSeconds"], 0, MAX_SETTLE_SECONDS, low_open=True
    ):
        problems.append(
            f"next.settleSeconds must be a number above 0 and at most {MAX_SETTLE_SECONDS:g}"
        )
    return problems


def _check_items(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return ['items must be an object {"selector": ..., "fields": {...}, "limit": ...}']
    problems: list[str] = []
    unknown = sorted(set(value) - ITEMS_KEYS)
    if unknown:
        problems.append(f"items has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}")
    if "selector" in value and "xpath" in value:
        problems.append("items must name a selector or an xpath, not both")
    if "xpath" in value:
        xpath = value["xpath"]
        if not isinstance(xpath, str) or not xpath.strip() or len(xpath) > MAX_SELECTOR_CHARS:
            problems.append(f"items.xpath must be an XPath of 1-{MAX_SELECTOR_CHARS} characters")
    else:
        selector = value.get("selector")
        if (
            not isinstance(selector, str)
            or not selector.strip()
            or len(selector) > MAX_SELECTOR_CHARS
        ):
            problems.append(
                f"items.selector must be a CSS selector of 1-{MAX_SELECTOR_CHARS} characters"
            )
    if "limit" in value and not _is_integer(value["limit"], 1, MAX_ITEMS_LIMIT):
        problems.append(f"items.limit must be an integer from 1 to {MAX_ITEMS_LIMIT}")
    fields = value.get("fields")
    if not isinstance(fields, Mapping) or not fields:
        problems.append("items.fields must be a non-empty object of field name -> selector")
        return problems
    problems.extend(
        problem.replace("extract", "items.fields", 1)
        for problem in _check_extract(item_fields_as_extract(fields))
    )
    for field_name, spec in fields.items():
        selector = (
            spec
            if isinstance(spec, str)
            else (spec.get("selector") if isinstance(spec, Mapping) else None)
        )
        if (
            isinstance(selector, str)
            and not _is_item_element(selector)
            and ITEM_ELEMENT_SELECTOR in selector.lower()
        ):
            problems.append(
                f"items.fields.{_shown(field_name)}.selector may be {ITEM_ELEMENT_SELECTOR} (the "
                f"item's element) but not use it inside a longer selector"
            )
    return problems


def item_fields_as_extract(fields: Mapping[str, Any]) -> dict[str, Any]:
    """items.fields as an `extract` mapping: a field without a selector, with an empty one or
    with `:scope` in any case reads the item's element itself (ITEM_ELEMENT_SELECTOR)."""
    extract: dict[str, Any] = {}
    for name, spec in fields.items():
        if isinstance(spec, str) and _is_item_element(spec):
            spec = ITEM_ELEMENT_SELECTOR
        elif isinstance(spec, Mapping) and (
            ("selector" not in spec and "xpath" not in spec)
            or (isinstance(spec.get("selector"), str) and _is_item_element(spec["selector"]))
        ):
            spec = {**spec, "selector": ITEM_ELEMENT_SELECTOR}
        extract[name] = spec
    return extract


def _is_item_element(selector: str) -> bool:
    # CSS pseudo-classes ignore case: ":SCOPE" is ":scope" to Chromium.
    return selector.strip().lower() in ("", ITEM_ELEMENT_SELECTOR)


def _check_transforms(name: str, value: object) -> list[str]:
    """A field's transforms: a list of `{"type": ..., options}` objects (TRANSFORM_KEYS)."""
    if not isinstance(value, list) or len(value) > MAX_TRANSFORMS:
        return [f"{name} must be a list of at most {MAX_TRANSFORMS} transforms"]
    problems: list[str] = []
    for position, transform in enumerate(value):
        label = f"{name}[{position}]"
        kind = transform.get("type") if isinstance(transform, Mapping) else None
        if not isinstance(kind, str) or kind not in TRANSFORM_KEYS:
            problems.append(
                f'{label} must be an object {{"type": ...}} with type one of '
                f"{', '.join(TRANSFORM_KEYS)}"
            )
            continue
        assert isinstance(transform, Mapping)
        unknown = sorted(set(transform) - TRANSFORM_KEYS[kind] - {"type"})
        if unknown:
            problems.append(
                f"{label} ({kind}) has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}"
            )
        problems.extend(f"{label} ({kind}) {problem}" for problem in _transform_problems(transform))
    return problems


def _transform_problems(transform: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    decimal = transform.get("decimal", ".")
    if "decimal" in transform and decimal not in DECIMAL_SEPARATORS:
        problems.append('decimal must be "." or ","')
    if "thousands" in transform and (
        transform["thousands"] not in THOUSANDS_SEPARATORS or transform["thousands"] == decimal
    ):
        problems.append(
            'thousands must be one of ",", ".", " ", "\'" or "" and differ from decimal'
        )
    if "currency" in transform and not (
        isinstance(transform["currency"], str) and re.fullmatch("[A-Z]{3}", transform["currency"])
    ):
        problems.append("currency must be an ISO 4217 code of three capital letters")
    if "separator" in transform and not (
        isinstance(transform["separator"], str)
        and len(transform["separator"]) <= MAX_JOIN_SEPARATOR_CHARS
    ):
        problems.append(
            f"separator must be a string of at most {MAX_JOIN_SEPARATOR_CHARS} characters"
        )
    if transform.get("type") == "default":
        default = transform.get("value")
        if not (
            (isinstance(default, str) and len(default) <= MAX_DEFAULT_VALUE_CHARS)
            or _is_number(default)
            or isinstance(default, bool)
        ):
            problems.append(
                f"value must be a string of at most {MAX_DEFAULT_VALUE_CHARS} characters, a "
                "number or true/false"
            )
    if transform.get("type") == "regex":
        problems.extend(_regex_problems(transform))
    return problems


def _regex_problems(transform: Mapping[str, Any]) -> list[str]:
    pattern = transform.get("pattern")
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_TRANSFORM_PATTERN_CHARS:
        return [
            f"pattern must be a regular expression of 1-{MAX_TRANSFORM_PATTERN_CHARS} characters"
        ]
    try:
        compiled = compile_value_pattern(pattern)
    except ValueError as error:
        return [f"pattern {pattern!r} is not a valid regular expression: {error} ({_RE2_HINT})"]
    if "group" in transform and not _is_integer(transform["group"], 0, compiled.groups):
        return [f"group must be an integer from 0 to {compiled.groups} (the pattern's groups)"]
    return []


def _check_structured_data(value: object) -> list[str]:
    if isinstance(value, bool) or (
        isinstance(value, list)
        and value
        and all(syntax in STRUCTURED_DATA_SYNTAXES for syntax in value)
        and len(set(value)) == len(value)
    ):
        return []
    return [
        "structuredData must be true, false or a list of distinct syntaxes from "
        + ", ".join(STRUCTURED_DATA_SYNTAXES)
    ]


def structured_data_syntaxes(value: object) -> tuple[str, ...]:
    """The syntaxes a valid structuredData option asks for (`true`: all; `false`: none)."""
    if value is True:
        return STRUCTURED_DATA_SYNTAXES
    if isinstance(value, list):
        return tuple(str(syntax) for syntax in value)
    return ()


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
            'politeness must be an object {"maxConcurrentPerSite": ..., "delaySeconds": ..., '
            '"respectRobotsTxt": ...}'
        ]
    problems: list[str] = []
    unknown = sorted(set(value) - POLITENESS_KEYS - RENAMED_POLITENESS_KEYS.keys())
    if unknown:
        problems.append(f"politeness has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}")
    for old, new in RENAMED_POLITENESS_KEYS.items():
        if old in value:
            problems.append(f"politeness.{old} is now politeness.{new}")
    for key, check in (
        ("maxConcurrentPerSite", site_limit_problem),
        ("delaySeconds", site_delay_problem),
    ):
        if key in value and (problem := check(value[key])):
            problems.append(f"politeness.{key} {problem}")
    if "respectRobotsTxt" in value and not isinstance(value["respectRobotsTxt"], bool):
        problems.append("politeness.respectRobotsTxt must be true or false")
    return problems


def _check_headers(value: object) -> list[str]:
    shape = f"headers must be an object of at most {MAX_HEADERS} header name -> string value pairs"
    if not isinstance(value, Mapping) or len(value) > MAX_HEADERS:
        return [shape]
    problems: list[str] = []
    for name, item in value.items():
        if not isinstance(item, str):
            problems.append(shape)
        elif not name or len(name) > MAX_HEADER_NAME_CHARS or not set(name) <= _TOKEN_CHARACTERS:
            problems.append(
                f"header name {_quoted(name)} must be 1-{MAX_HEADER_NAME_CHARS} letters, digits "
                "or !#$%&'*+-.^_`|~ (an HTTP token)"
            )
        elif len(item) > MAX_HEADER_VALUE_CHARS or any(
            character in item for character in "\r\n\x00"
        ):
            problems.append(
                f"header {_quoted(name)} must have a value of at most {MAX_HEADER_VALUE_CHARS} "
                "characters without line breaks or NUL"
            )
    return list(dict.fromkeys(problems))


def check_resource_kinds(name: str, value: object) -> list[str]:
    """Problems with a blockResources list (the payload's, or a pool's default)."""
    if (
        isinstance(value, list | tuple)
        and all(kind in RESOURCE_KINDS for kind in value)
        and len(set(value)) == len(value)
    ):
        return []
    return [f"{name} must be a list of distinct kinds from {', '.join(RESOURCE_KINDS)}"]


# Block markers (blockMarkers, a pool's --block-markers): what a challenge or block page has
# that a real page does not. A handful tell the challenge pages of the usual anti-bot services
# apart; each is one more selector read on every page, so their number is bounded.
MAX_BLOCK_MARKERS: Final = 20
MAX_BLOCK_MARKER_TEXT_CHARS: Final = 200


@dataclass(frozen=True)
class BlockMarker:
    """A page is blocked when an element matches `selector` and, with `text`, the text of one
    of the matches contains `text` (case-insensitive, whitespace normalised)."""

    selector: str
    text: str | None = None

    def as_json(self) -> dict[str, str]:
        return {"selector": self.selector} | ({"text": self.text} if self.text else {})


def check_block_markers(name: str, value: object) -> list[str]:
    """Problems with a list of block markers (the payload's blockMarkers, or a pool's)."""
    shape = (
        f"{name} must be a list of at most {MAX_BLOCK_MARKERS} objects "
        f'{{"selector": CSS selector of 1-{MAX_SELECTOR_CHARS} characters, "text": optional '
        f"text of 1-{MAX_BLOCK_MARKER_TEXT_CHARS} characters}}"
    )
    if not isinstance(value, list | tuple) or len(value) > MAX_BLOCK_MARKERS:
        return [shape]
    problems: list[str] = []
    for position, marker in enumerate(value):
        if not isinstance(marker, Mapping) or set(marker) - {"selector", "text"}:
            problems.append(f"{name}[{position}]: {shape.removeprefix(name + ' ')}")
            continue
        selector = marker.get("selector")
        if (
            not isinstance(selector, str)
            or not selector.strip()
            or len(selector) > MAX_SELECTOR_CHARS
        ):
            problems.append(
                f"{name}[{position}].selector must be a CSS selector of 1-{MAX_SELECTOR_CHARS} "
                "characters"
            )
        text = marker.get("text")
        if "text" in marker and (
            not isinstance(text, str) or not text.strip() or len(text) > MAX_BLOCK_MARKER_TEXT_CHARS
        ):
            problems.append(
                f"{name}[{position}].text must be text of 1-{MAX_BLOCK_MARKER_TEXT_CHARS} "
                "characters"
            )
    return problems


def block_markers_of(value: object) -> tuple[BlockMarker, ...]:
    """The markers of a list check_block_markers passed."""
    assert isinstance(value, list | tuple)
    return tuple(BlockMarker(marker["selector"], marker.get("text")) for marker in value)


def parse_block_markers(text: str) -> tuple[BlockMarker, ...]:
    """A pool's block markers from a flag or variable (a JSON list, as in a payload);
    ValueError saying what is wrong."""
    try:
        value = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as error:
        raise ValueError(f"block markers must be a JSON list: {error}") from error
    if problems := check_block_markers("block markers", value):
        raise ValueError("; ".join(problems))
    return block_markers_of(value)


def _check_sealed(value: object) -> list[str]:
    # Credentials the operator sealed (sealed_credentials.py); only a key holder can say more.
    if is_sealed_text(value):
        return []
    return [f"sealed must be a sealed credentials text ({SEALED_PREFIX}...) made by the operator"]


def _check_crawl_key(value: object) -> list[str]:
    if isinstance(value, str) and 1 <= len(value) <= MAX_CRAWL_KEY_CHARS:
        return []
    return [f"crawlKey must be a string of 1 to {MAX_CRAWL_KEY_CHARS} characters"]


def _check_recrawl_after(value: object) -> list[str]:
    if _in_range(value, 0, MAX_RECRAWL_AFTER_SECONDS, low_open=True):
        return []
    return [
        f"recrawlAfterSeconds must be a number of seconds above 0 and at most "
        f"{MAX_RECRAWL_AFTER_SECONDS:,.0f}"
    ]


def _check_parser(value: object) -> list[str]:
    if isinstance(value, str) and _PARSER_NAME.fullmatch(value):
        return []
    return [
        "parser must be the name of a registered parser: 1-100 letters, digits, '.', '_' or "
        "'-', starting with a letter or digit"
    ]


def _step_pattern_problem(pattern: str) -> str | None:
    try:
        compile_url_pattern(pattern)
    except ValueError as error:
        return f"is not a valid regular expression: {error} ({_RE2_HINT})"
    return None


def _steps_problems(payload: Mapping[str, Any], *, name: str = "steps") -> list[str]:
    """The problems of `steps`, which also depend on `render` and `timeoutSeconds`."""
    problems = check_steps(
        payload["steps"],
        name=name,
        job_timeout_seconds=payload.get("timeoutSeconds"),
        check_pattern=_step_pattern_problem,
    )
    if payload.get("render") is False:
        problems.append(f"{name} run on rendered pages only: remove them or set render to true")
    return problems


def _session_problems(payload: Mapping[str, Any]) -> list[str]:
    """The problems of `session`, whose login steps are bounded like `steps`."""
    problems = check_session(
        payload["session"],
        job_timeout_seconds=payload.get("timeoutSeconds"),
        check_pattern=_step_pattern_problem,
        check_url=target_problem,
    )
    if payload.get("render") is False:
        problems.append("session logs in on rendered pages only: remove it or set render to true")
    return problems


# --- keep: the page artifacts a job keeps (docs/worker.md, "Artifacts") ----------------------
# html: the document's HTML (the rendered DOM, or the fetched body); text: the body's text;
# screenshot: a PNG of the rendered page; pdf: the rendered page printed. The last two exist
# only for rendered pages.
ARTIFACT_KINDS: Final = ("html", "text", "screenshot", "pdf")
RENDERED_ARTIFACT_KINDS: Final = ("screenshot", "pdf")


def check_artifact_kinds(name: str, value: object) -> list[str]:
    """Problems with a keep list: distinct names from ARTIFACT_KINDS."""
    if (
        isinstance(value, list | tuple)
        and all(isinstance(kind, str) and kind in ARTIFACT_KINDS for kind in value)
        and len(set(value)) == len(value)
    ):
        return []
    return [f"{name} must be a list of distinct artifacts from {', '.join(ARTIFACT_KINDS)}"]


def _keep_problems(payload: Mapping[str, Any]) -> list[str]:
    """keep's screenshot and pdf need a rendered page."""
    keep = payload["keep"]
    if payload.get("render") is not False or not isinstance(keep, list | tuple):
        return []
    rendered = [kind for kind in RENDERED_ARTIFACT_KINDS if kind in keep]
    if not rendered:
        return []
    verb, them = ("needs", "it") if len(rendered) == 1 else ("need", "them")
    return [
        f"keep: {' and '.join(rendered)} {verb} a rendered page: remove {them} or set render "
        "to true"
    ]


# option name -> validator returning the problems with its value.
# What a source row's URL is (payload `source`, docs/queue.md "Source rows"): a sitemap (or a
# sitemap index), a site's robots.txt whose `Sitemap:` lines name its sitemaps, or a URL list
# in the worker pool's object store (`key`, `format`; the row's URL is OBJECT_SOURCE_URL + key).
SOURCE_KINDS: Final = ("sitemap", "robots", "object")
SOURCE_KEYS: Final = frozenset({"kind", "lastmodAfter", "key", "format"})
OBJECT_LIST_FORMATS: Final = ("lines", "jsonl")
OBJECT_SOURCE_URL: Final = "object://source/"
MAX_OBJECT_KEY_CHARS: Final = 1024
# An RFC 3339 date-time with a zone (the CRD's `date-time` format), or a W3C date.
_SOURCE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d{2}:\d{2}))?"
)


def _check_source(value: object) -> list[str]:
    if not isinstance(value, Mapping):
        return ["source must be an object with kind (" + ", ".join(SOURCE_KINDS) + ")"]
    problems: list[str] = []
    unknown = sorted(str(key) for key in set(value) - SOURCE_KEYS)
    if unknown:
        problems.append(f"source has unknown keys: {', '.join(_shown(k) for k in unknown[:5])}")
    if value.get("kind") not in SOURCE_KINDS:
        problems.append("source.kind must be one of " + ", ".join(SOURCE_KINDS))
    if value.get("kind") == "object":
        key = value.get("key")
        if not (isinstance(key, str) and 0 < len(key) <= MAX_OBJECT_KEY_CHARS):
            problems.append(
                f"source.key must be an object key of 1-{MAX_OBJECT_KEY_CHARS} characters"
            )
        if value.get("format", "lines") not in OBJECT_LIST_FORMATS:
            problems.append("source.format must be one of " + ", ".join(OBJECT_LIST_FORMATS))
    elif "key" in value or "format" in value:
        problems.append("source.key and source.format go with kind object")
    after = value.get("lastmodAfter")
    if after is not None and not (isinstance(after, str) and _SOURCE_TIME.fullmatch(after)):
        problems.append(
            "source.lastmodAfter must be an RFC 3339 date-time, e.g. 2026-01-31T00:00:00Z"
        )
    return problems


PAYLOAD_OPTIONS: Final[Mapping[str, Callable[[object], list[str]]]] = {
    "render": _check_render,
    "waitFor": _check_selector("waitFor"),
    "waitUntil": _check_wait_until,
    "timeoutSeconds": _check_timeout,
    "extract": _check_extract,
    "follow": _check_follow,
    "next": _check_next,
    "routes": _check_routes,
    "route": _check_route,
    "headers": _check_headers,
    "sealed": _check_sealed,
    "blockResources": lambda value: check_resource_kinds("blockResources", value),
    "blockMarkers": lambda value: check_block_markers("blockMarkers", value),
    "politeness": _check_politeness,
    "parser": _check_parser,
    "items": _check_items,
    "structuredData": _check_structured_data,
    # Checked with the payload around it (_steps_problems): its bounds depend on other options.
    "steps": lambda value: [],
    # Checked with the payload around it (_session_problems), like steps.
    "session": lambda value: [],
    # Its render condition is checked with the payload around it (_keep_problems).
    "keep": lambda value: check_artifact_kinds("keep", value),
    "source": _check_source,
    # The crawl memory (crawl_memory.py): the crawl whose memory the row reads and writes, and
    # how recently a fetch of the URL by that crawl lets the row skip the request.
    "crawlKey": _check_crawl_key,
    "recrawlAfterSeconds": _check_recrawl_after,
}


def validate_payload(payload: object, *, loaded: bool = False) -> list[str]:
    """Return every problem with a job's payload; an empty list means the worker may run it.

    `None` (a classic row inserted with payload NULL) counts as an empty object.
    Never raises: a payload of any size, depth or content gets a list of at most
    MAX_REPORTED_PROBLEMS problems (an UnreadablePayload from load_payload gets its own).
    `loaded=True` says that `payload` is what load_payload returned, whose size, nesting and
    numbers it already checked: only the options are checked then (a claim's rows).
    """
    if payload is None:
        return []
    if isinstance(payload, UnreadablePayload):
        return [payload.problem]
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        return [f"payload must be a JSON object of options, got a JSON {_json_kind(kind)}"]
    if not loaded:
        problem = _shape_problem(payload)
        if problem is not None:
            return [problem]
        size = _json_size(payload)
        if size is None:
            return ["payload must hold only JSON values"]
        if size > MAX_PAYLOAD_BYTES:
            return [_size_problem(size)]
    return _option_problems(payload)


def _option_problems(payload: Mapping[str, Any]) -> list[str]:
    """Every problem with the options of a payload within its bounds (validate_payload)."""
    problems: list[str] = []
    # The known options are listed once: a payload of many unknown names gets a message that
    # stays short as the vocabulary grows.
    listed = False
    for name, value in payload.items():
        check = PAYLOAD_OPTIONS.get(name)
        if check is None:
            known = "" if listed else f" (known options: {', '.join(PAYLOAD_OPTIONS)})"
            listed = True
            problems.append(f"unknown payload option {_quoted(name)}{known}")
            continue
        problems.extend(check(value))
    if "steps" in payload:
        problems.extend(_steps_problems(payload))
    next_spec = payload.get("next")
    if (
        isinstance(next_spec, Mapping)
        and next_spec.get("click") is True
        and payload.get("render") is False
    ):
        problems.append(
            "next.click clicks a button on rendered pages only: remove it or set render to true"
        )
    if "session" in payload:
        problems.extend(_session_problems(payload))
    problems.extend(_route_problems(payload))
    if "keep" in payload:
        problems.extend(_keep_problems(payload))
    if "recrawlAfterSeconds" in payload and "crawlKey" not in payload:
        problems.append("recrawlAfterSeconds needs a crawlKey: the crawl whose fetches it counts")
    if len(problems) > MAX_REPORTED_PROBLEMS:
        more = len(problems) - MAX_REPORTED_PROBLEMS
        problems = [*problems[:MAX_REPORTED_PROBLEMS], f"and {more} more problems"]
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
