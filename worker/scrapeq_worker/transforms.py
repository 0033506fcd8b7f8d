"""What a field's `transforms` make of its extracted value.

Both engines extract raw values (text or attribute values, null for a missing element, lists
with `all`); the transforms run here, in Python, after either engine, so one spec means the same
in both. `transform_page` runs in an extraction process (extraction_processes.py), never on the
event loop: at the result limit a page's values can be tens of thousands of strings to parse or
resolve (docs/worker.md, "Jobs: options and results").

They are declarative (the queue package's TRANSFORM_KEYS lists them and `validate_payload`
checks their options) and total: a transform that cannot apply to a value
(no number in the text, a pattern that does not match, a value that is not text) gives null,
never an exception, so a page whose text is not what the spec expected still completes and
shows where it differs. docs/scrapejob.md, "Transforms", is the reference.

Every transform but `join` and `default` applies to each item of a list (`all`); `join` turns a
list into one string and `default` replaces a null, empty or `[]` value. Text is bounded before
it gets here (the extraction's budget), the patterns run in time linear in it (our own number
pattern, RE2 for a job's `regex`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

from scrapeq_queue.payload import ValuePattern, compile_value_pattern

from .extraction import (
    TRUNCATION_MARKER,
    ExtractedPage,
    FieldSpec,
    ItemsSpec,
    Transform,
    normalise_text,
)

# Digits of an integer kept exact as a JSON integer; more become a float (JavaScript's numbers
# are exact to 2**53, about 15.9 digits, and Python refuses to read 4,300 digits at once).
MAX_INTEGER_DIGITS: Final = 15
# ISO 4217 codes a price's text may name (active codes).
_CURRENCY_CODES_TEXT: Final = (
    "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN "
    "BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD "
    "FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY "
    "KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP "
    "MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR "
    "RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT "
    "TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR ZMW "
    "ZWL "
)
CURRENCY_CODES: Final = frozenset(_CURRENCY_CODES_TEXT.split())
# Currency symbols that name one currency, longest first (so "US$" wins over "$"). A bare "$"
# is read as USD and "¥" as JPY; a job whose "$" means another dollar says so with `currency`.
# Symbols shared by several currencies ("kr", "R") name none.
CURRENCY_SYMBOLS: Final = (
    ("US$", "USD"),
    ("CA$", "CAD"),
    ("AU$", "AUD"),
    ("NZ$", "NZD"),
    ("HK$", "HKD"),
    ("MX$", "MXN"),
    ("R$", "BRL"),
    ("C$", "CAD"),
    ("A$", "AUD"),
    ("S$", "SGD"),
    ("zł", "PLN"),
    ("€", "EUR"),
    ("£", "GBP"),
    ("¥", "JPY"),
    ("₹", "INR"),
    ("₩", "KRW"),
    ("₽", "RUB"),
    ("₺", "TRY"),
    ("₪", "ILS"),
    ("₫", "VND"),
    ("฿", "THB"),
    ("₴", "UAH"),
    ("₦", "NGN"),
    ("₱", "PHP"),
    ("$", "USD"),
)
_CURRENCY_CODE: Final = re.compile(r"(?<![A-Za-z])[A-Z]{3}(?![A-Za-z])")
# Transforms that apply to each item of a list rather than to the list.
_LIST_TRANSFORMS: Final = frozenset({"join", "default"})


def transform_page(
    page: ExtractedPage, fields: Sequence[FieldSpec], items: ItemsSpec | None
) -> None:
    """Apply every field's transforms to `page` in place: its `extract` fields and each item's
    fields. A value the extraction cut (ending in TRUNCATION_MARKER) is named in
    `page.truncated` first, since a transform may drop the marker."""
    base = page.link_base or ""
    for spec in fields:
        if spec.name not in page.fields:
            continue
        value = page.fields[spec.name]
        if spec.transforms and _cut(value) and f"fields.{spec.name}" not in page.truncated:
            page.truncated.append(f"fields.{spec.name}")
        page.fields[spec.name] = apply_transforms(value, spec.transforms, link_base=base)
    if items is None or not page.items:
        return
    if "items" not in page.truncated and any(
        _cut(item.get(spec.name)) for item in page.items for spec in items.fields
    ):
        page.truncated.append("items")
    transformed = [spec for spec in items.fields if spec.transforms]
    for item in page.items:
        for spec in transformed:
            item[spec.name] = apply_transforms(item.get(spec.name), spec.transforms, link_base=base)


def apply_transforms(value: Any, transforms: Sequence[Transform], *, link_base: str) -> Any:
    """`value` after `transforms`, in order; `link_base` is the URL relative URLs resolve
    against (absoluteUrl). Never raises for any value: what cannot apply gives None."""
    for transform in transforms:
        if transform.type in _LIST_TRANSFORMS:
            value = _apply_to_whole(transform, value)
        elif isinstance(value, list):
            value = [_apply(transform, item, link_base) for item in value]
        else:
            value = _apply(transform, value, link_base)
    return value


def _cut(value: Any) -> bool:
    if isinstance(value, str):
        return value.endswith(TRUNCATION_MARKER)
    return isinstance(value, list) and any(_cut(item) for item in value)


def _apply_to_whole(transform: Transform, value: Any) -> Any:
    if transform.type == "default":
        return transform.option("value") if value is None or value in ("", []) else value
    # join: the list's text and numbers, nulls left out; a string stays as it is.
    if not isinstance(value, list):
        return value if isinstance(value, str) else None
    parts: list[str] = []
    for item in value:
        if item is None:
            continue
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            parts.append(str(item))
        else:
            return None  # an object (a price) has no one text
    return str(transform.option("separator", " ")).join(parts)


def _apply(transform: Transform, value: Any, link_base: str) -> Any:
    if not isinstance(value, str):
        return None  # null stays null; a number or a price is not text
    kind = transform.type
    if kind == "trim":
        return normalise_text(value)
    if kind == "lowercase":
        return value.lower()
    if kind == "uppercase":
        return value.upper()
    if kind == "number":
        return parse_number(value, *_separators(transform))
    if kind == "price":
        return parse_price(value, *_separators(transform), currency=transform.option("currency"))
    if kind == "regex":
        return _regex(value, str(transform.option("pattern")), transform.option("group"))
    if kind == "absoluteUrl":
        return absolute_url(value, link_base)
    return None


def _separators(transform: Transform) -> tuple[str, str]:
    decimal = str(transform.option("decimal", "."))
    default_thousands = "," if decimal == "." else "."
    return decimal, str(transform.option("thousands", default_thousands))


@functools.lru_cache(maxsize=16)
def _number_pattern(decimal: str, thousands: str) -> re.Pattern[str]:
    """The first number of a text: an optional minus sign not glued to a word (SKU-12 is 12),
    digits in groups of three with `thousands` between them or digits alone, and an optional
    fraction after `decimal`. No nested quantifier can backtrack: linear in the text."""
    grouped = rf"[0-9]{{1,3}}(?:{re.escape(thousands)}[0-9]{{3}})+|" if thousands else ""
    return re.compile(
        rf"(?:(?<![\w])(?P<sign>[-\u2212]))?(?P<whole>{grouped}[0-9]+)"
        rf"(?:{re.escape(decimal)}(?P<fraction>[0-9]+))?"
    )


def parse_number(text: str, decimal: str = ".", thousands: str = ",") -> int | float | None:
    """The first number in `text`: an int when it has no fraction and at most
    MAX_INTEGER_DIGITS digits, else a float; None when there is none (or it is too large for a
    finite float)."""
    found = _number_pattern(decimal, thousands).search(text)
    if found is None:
        return None
    digits = found["whole"].replace(thousands, "") if thousands else found["whole"]
    negative = found["sign"] is not None
    if found["fraction"] is None and len(digits) <= MAX_INTEGER_DIGITS:
        return -int(digits) if negative else int(digits)
    number = float(f"{digits}.{found['fraction'] or 0}")
    if not math.isfinite(number):
        return None
    return -number if negative else number


def parse_price(
    text: str, decimal: str = ".", thousands: str = ",", *, currency: str | None = None
) -> dict[str, Any] | None:
    """`{"amount": float, "currency": code or None}` from a price's text; None without a
    number. The currency is an ISO 4217 code in the text, else `currency`, else the one a
    symbol in the text names (CURRENCY_SYMBOLS)."""
    amount = parse_number(text, decimal, thousands)
    if amount is None:
        return None
    return {"amount": float(amount), "currency": _currency(text, currency)}


def _currency(text: str, default: str | None) -> str | None:
    for found in _CURRENCY_CODE.finditer(text):
        if found[0] in CURRENCY_CODES:
            return found[0]
    if default is not None:
        return default
    for symbol, code in CURRENCY_SYMBOLS:
        if symbol in text:
            return code
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> ValuePattern | None:
    try:
        return compile_value_pattern(pattern)
    except ValueError:
        return None  # validate_payload refuses it first; a stale row's pattern gives null


def _regex(text: str, pattern: str, group: object) -> str | None:
    compiled = _compiled(pattern)
    if compiled is None:
        return None
    index = group if isinstance(group, int) else (1 if compiled.groups else 0)
    if not 0 <= index <= compiled.groups:
        return None
    found = compiled.search(text)
    return found.group(index) if found is not None else None


def absolute_url(text: str, link_base: str) -> str | None:
    """`text` resolved as links are (against the page's <base href>, else its final URL; ends
    trimmed), fragment kept; None unless the result is an http(s) URL."""
    href = text.strip()
    if not href:
        return None
    try:
        absolute = urljoin(link_base, href)
        scheme = urlsplit(absolute).scheme.lower()
    except ValueError:
        return None
    return absolute if scheme in ("http", "https") else None
