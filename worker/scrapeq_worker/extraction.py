"""Turning a page into the job's result: named fields from CSS selectors, title, links.

The same field specification runs in two places: inside Chromium for rendered pages
(`BROWSER_EXTRACT_SCRIPT`, the real CSS engine, after the page's scripts ran) and in Python for
`render: false` pages (`extract_static`, the standard library's `html.parser` and a documented
subset of CSS). Both produce the same shape, so a job can switch engines without its consumer
noticing.

Static-engine selector subset: type (`div`, `*`), `#id`, `.class`, `[attr]`,
`[attr=value]` (also `~=`, `^=`, `$=`, `*=`, `|=`), compounds of those (`a.product[href]`),
descendant (`ul li`) and child (`ul > li`) combinators, and comma groups (`h1, h2`). Anything
else (pseudo-classes, `+`, `~`) is rejected as bad input with a hint to use `render: true`.

Results are capped (`cap_result`): a stored result must stay small enough for a database row
and a status preview; oversized values are cut and listed under `"truncated"`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

from .errors import BadInput, PermanentFailure

# Links kept per page (for following and for the result): enough for a listing page.
DEFAULT_MAX_LINKS = 500
TRUNCATION_MARKER = "…[truncated]"


@dataclass(frozen=True)
class FieldSpec:
    """One named field: the first match's text (or `attribute`), or every match with `all`."""

    name: str
    selector: str
    attribute: str | None = None
    all: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "selector": self.selector,
            "attribute": self.attribute,
            "all": self.all,
        }


def parse_fields(extract: object) -> tuple[FieldSpec, ...]:
    """Read the payload's `extract` mapping: `{name: "css"}` or `{name: {selector, attribute,
    all}}`. Raises BadInput describing the first malformed entry."""
    if extract is None:
        return ()
    if not isinstance(extract, Mapping):
        raise BadInput("extract must be a mapping of field name to selector")
    fields: list[FieldSpec] = []
    for name, spec in extract.items():
        if not isinstance(name, str) or not name:
            raise BadInput("extract field names must be non-empty strings")
        if isinstance(spec, str):
            spec = {"selector": spec}
        if not isinstance(spec, Mapping):
            raise BadInput(f"extract.{name} must be a selector string or a mapping")
        unknown = set(spec) - {"selector", "attribute", "all"}
        if unknown:
            raise BadInput(f"extract.{name} has unknown keys: {', '.join(sorted(unknown))}")
        selector = spec.get("selector")
        attribute = spec.get("attribute")
        take_all = spec.get("all", False)
        if not isinstance(selector, str) or not selector.strip():
            raise BadInput(f"extract.{name}.selector must be a non-empty string")
        if attribute is not None and (not isinstance(attribute, str) or not attribute):
            raise BadInput(f"extract.{name}.attribute must be a non-empty string")
        if not isinstance(take_all, bool):
            raise BadInput(f"extract.{name}.all must be true or false")
        fields.append(FieldSpec(name, selector.strip(), attribute, take_all))
    return tuple(fields)


@dataclass
class ExtractedPage:
    """What extraction found on one page (both engines fill the same fields)."""

    fields: dict[str, Any] = field(default_factory=dict)
    title: str | None = None
    links: list[str] = field(default_factory=list)
    follow: list[str] = field(default_factory=list)


@dataclass
class PageOutcome:
    """What fetching one URL produced, by either engine, before it becomes the job's result."""

    url: str
    final_url: str
    status: int | None
    content_type: str | None
    extracted: ExtractedPage | None
    timing_ms: dict[str, float]
    blocked_requests: list[dict[str, str]] = field(default_factory=list)
    content_length: int | None = None


# Runs inside the page (Runtime.evaluate). One round trip does the optional wait for a
# selector, every field, the title and the links. Whitespace is collapsed the same way
# `extract_static` does it so both engines agree.
BROWSER_EXTRACT_SCRIPT = r"""
async (spec) => {
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  if (spec.waitFor) {
    let present;
    try { present = () => document.querySelector(spec.waitFor) !== null; present(); }
    catch (e) { return {badSelector: spec.waitFor, error: String(e)}; }
    if (!present()) {
      const found = await new Promise((resolve) => {
        const observer = new MutationObserver(() => {
          if (present()) { observer.disconnect(); clearTimeout(timer); resolve(true); }
        });
        observer.observe(document, {childList: true, subtree: true, attributes: true});
        const timer = setTimeout(() => { observer.disconnect(); resolve(present()); },
                                 spec.waitForMs);
      });
      if (!found) return {waitForTimedOut: true};
    }
  }
  const fields = {};
  for (const f of spec.fields) {
    let nodes;
    try {
      nodes = f.all ? Array.from(document.querySelectorAll(f.selector))
                    : [document.querySelector(f.selector)].filter((n) => n !== null);
    } catch (e) { return {badSelector: f.selector, error: String(e)}; }
    const value = (n) => f.attribute ? n.getAttribute(f.attribute) : norm(n.textContent);
    fields[f.name] = f.all ? nodes.map(value) : (nodes.length ? value(nodes[0]) : null);
  }
  const collect = (selector) => {
    const out = [];
    const seen = new Set();
    for (const a of document.querySelectorAll(selector)) {
      const href = a.href;
      if (typeof href !== 'string' || !/^https?:/i.test(href)) continue;
      const clean = href.split('#')[0];
      if (seen.has(clean)) continue;
      seen.add(clean);
      out.push(clean);
      if (out.length >= spec.maxLinks) break;
    }
    return out;
  };
  let follow = [];
  if (spec.followSelector) {
    try { follow = collect(spec.followSelector); }
    catch (e) { return {badSelector: spec.followSelector, error: String(e)}; }
  }
  return {fields, title: document.title || null, links: collect('a[href]'), follow,
          finalUrl: location.href, contentType: document.contentType};
}
"""


def browser_script_argument(
    fields: Sequence[FieldSpec],
    *,
    wait_for: str | None,
    wait_for_ms: int,
    follow_selector: str | None,
    max_links: int,
) -> dict[str, Any]:
    """The JSON argument `BROWSER_EXTRACT_SCRIPT` expects."""
    return {
        "fields": [spec.as_json() for spec in fields],
        "waitFor": wait_for,
        "waitForMs": wait_for_ms,
        "followSelector": follow_selector,
        "maxLinks": max_links,
    }


def page_from_browser(raw: Mapping[str, Any]) -> ExtractedPage:
    """Convert the script's answer; raise BadInput for a selector Chromium rejected."""
    if raw.get("badSelector") is not None:
        raise BadInput(
            f"invalid CSS selector {raw['badSelector']!r}: {raw.get('error')}",
            reason="bad_selector",
        )
    return ExtractedPage(
        fields=dict(raw.get("fields") or {}),
        title=raw.get("title"),
        links=list(raw.get("links") or []),
        follow=list(raw.get("follow") or []),
    )


# --- the static engine: a small DOM and a CSS subset --------------------------------------

_VOID_ELEMENTS = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
_WHITESPACE = re.compile(r"\s+")
# Start tags that implicitly close an open element of the listed kinds (`<li>a<li>b`), the
# common cases of the HTML parsing algorithm's "implied end tags".
_IMPLIED_END: dict[str, frozenset[str]] = {
    "li": frozenset({"li"}),
    "p": frozenset({"p"}),
    "dt": frozenset({"dt", "dd"}),
    "dd": frozenset({"dt", "dd"}),
    "tr": frozenset({"tr", "td", "th"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
    "option": frozenset({"option"}),
}


class _Element:
    __slots__ = ("attrs", "children", "classes", "parent", "tag")

    def __init__(self, tag: str, attrs: dict[str, str], parent: _Element | None) -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[_Element | str] = []
        self.classes = frozenset(attrs.get("class", "").split())

    def text(self) -> str:
        parts: list[str] = []
        stack: list[_Element | str] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                parts.append(node)
            else:
                stack.extend(reversed(node.children))
        return "".join(parts)

    def descendants(self) -> Iterator[_Element]:
        stack = [child for child in reversed(self.children) if isinstance(child, _Element)]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(child for child in reversed(node.children) if isinstance(child, _Element))


class _TreeBuilder(HTMLParser):
    """Builds a forgiving element tree: unknown end tags are ignored, open ones auto-close."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Element("#document", {}, None)
        self._open: list[_Element] = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        closes = _IMPLIED_END.get(tag)
        while closes and len(self._open) > 1 and self._open[-1].tag in closes:
            self._open.pop()
        parent = self._open[-1]
        element = _Element(tag, {name: value or "" for name, value in attrs}, parent)
        parent.children.append(element)
        if tag not in _VOID_ELEMENTS:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        parent = self._open[-1]
        parent.children.append(_Element(tag, {name: value or "" for name, value in attrs}, parent))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self._open) - 1, 0, -1):
            if self._open[index].tag == tag:
                del self._open[index:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


@dataclass(frozen=True)
class _Compound:
    tag: str | None
    ids: tuple[str, ...]
    classes: tuple[str, ...]
    attributes: tuple[tuple[str, str | None, str | None], ...]  # (name, operator, value)

    def matches(self, element: _Element) -> bool:
        if self.tag is not None and element.tag != self.tag:
            return False
        if any(element.attrs.get("id") != wanted for wanted in self.ids):
            return False
        if not element.classes.issuperset(self.classes):
            return False
        return all(_attribute_matches(element, *condition) for condition in self.attributes)


def _attribute_matches(
    element: _Element, name: str, operator: str | None, value: str | None
) -> bool:
    actual = element.attrs.get(name)
    if actual is None:
        return False
    if operator is None or value is None:
        return True
    if operator == "=":
        return actual == value
    if operator == "~=":
        return value in actual.split()
    if operator == "^=":
        return bool(value) and actual.startswith(value)
    if operator == "$=":
        return bool(value) and actual.endswith(value)
    if operator == "*=":
        return bool(value) and value in actual
    return actual == value or actual.startswith(value + "-")  # "|="


# A complex selector, right to left: [(compound, combinator-to-the-left)], combinator is
# " " (descendant), ">" (child) or "" for the leftmost compound.
_Complex = tuple[tuple[_Compound, str], ...]

_COMPOUND = re.compile(
    r"""(?P<tag>\*|[A-Za-z][A-Za-z0-9-]*)?
        (?P<rest>(?:\#[\w-]+|\.[\w-]+|\[\s*[\w:-]+\s*(?:[~^$*|]?=\s*(?:"[^"]*"|'[^']*'|[^\]\s]+)\s*)?\])*)""",
    re.VERBOSE,
)
_PART = re.compile(
    r"""\#(?P<id>[\w-]+)|\.(?P<cls>[\w-]+)|
        \[\s*(?P<attr>[\w:-]+)\s*(?:(?P<op>[~^$*|]?=)\s*(?P<val>"[^"]*"|'[^']*'|[^\]\s]+)\s*)?\]""",
    re.VERBOSE,
)


def _unsupported(selector: str) -> BadInput:
    return BadInput(
        f"selector {selector!r} is not supported by the static engine (render: false supports "
        "tag, #id, .class, [attr], [attr=value], descendant and child combinators and comma "
        "groups); use render: true for full CSS",
        reason="bad_selector",
    )


@functools.lru_cache(maxsize=1024)
def compile_selector(selector: str) -> tuple[_Complex, ...]:
    """Parse a selector of the supported subset; raise BadInput for anything else.

    Cached: a crawl repeats the same few selectors on every page.
    """
    complexes: list[_Complex] = []
    for group in selector.split(","):
        text = group.strip()
        if not text:
            raise _unsupported(selector)
        parts: list[tuple[_Compound, str]] = []
        position = 0
        combinator = ""
        while position < len(text):
            match = _COMPOUND.match(text, position)
            if match is None or match.end() == position:
                raise _unsupported(selector)
            tag = match.group("tag")
            ids: list[str] = []
            classes: list[str] = []
            attributes: list[tuple[str, str | None, str | None]] = []
            for part in _PART.finditer(match.group("rest")):
                if part.group("id"):
                    ids.append(part.group("id"))
                elif part.group("cls"):
                    classes.append(part.group("cls"))
                else:
                    raw = part.group("val")
                    if raw is not None and raw[:1] in "\"'":
                        raw = raw[1:-1]
                    attributes.append((part.group("attr").lower(), part.group("op"), raw))
            compound = _Compound(
                None if tag in (None, "*") else tag.lower(),
                tuple(ids),
                tuple(classes),
                tuple(attributes),
            )
            parts.append((compound, combinator))
            position = match.end()
            gap = re.compile(r"\s*(>)?\s*").match(text, position)
            assert gap is not None  # the pattern matches the empty string
            if gap.end() == len(text):
                break
            if gap.end() == position:
                raise _unsupported(selector)
            combinator = ">" if gap.group(1) else " "
            position = gap.end()
        complexes.append(tuple(reversed(parts)))
    return tuple(complexes)


def _matches_complex(element: _Element, chain: _Complex) -> bool:
    compound, combinator = chain[0]
    if not compound.matches(element):
        return False
    if len(chain) == 1:
        return True
    rest = chain[1:]
    ancestor = element.parent
    if combinator == ">":
        return (
            ancestor is not None
            and ancestor.tag != "#document"
            and _matches_complex(ancestor, rest)
        )
    while ancestor is not None and ancestor.tag != "#document":
        if _matches_complex(ancestor, rest):
            return True
        ancestor = ancestor.parent
    return False


def _select(
    elements: Sequence[_Element], compiled: tuple[_Complex, ...], *, first: bool
) -> list[_Element]:
    found: list[_Element] = []
    for element in elements:
        for chain in compiled:
            if _matches_complex(element, chain):
                found.append(element)
                break
        if first and found:
            break
    return found


def _normalise(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _links(
    elements: Sequence[_Element], compiled: tuple[_Complex, ...], base_url: str, limit: int
) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for element in _select(elements, compiled, first=False):
        href = element.attrs.get("href")
        if href is None or element.tag != "a":
            continue
        absolute = urljoin(base_url, href.strip()).split("#", 1)[0]
        if urlsplit(absolute).scheme not in ("http", "https") or absolute in seen:
            continue
        seen.add(absolute)
        out.append(absolute)
        if len(out) >= limit:
            break
    return out


_ALL_LINKS = compile_selector("a[href]")


def extract_static(
    html: str,
    fields: Sequence[FieldSpec],
    *,
    base_url: str,
    follow_selector: str | None = None,
    max_links: int = DEFAULT_MAX_LINKS,
) -> ExtractedPage:
    """Extract fields, title and links from an HTML document without a browser.

    Raises BadInput for selectors outside the supported subset.
    """
    compiled = [(spec, compile_selector(spec.selector)) for spec in fields]
    follow = compile_selector(follow_selector) if follow_selector else None
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    # Document order, walked once; every selector then scans this list.
    elements = list(builder.root.descendants())
    page = ExtractedPage()
    for spec, selector in compiled:
        matches = _select(elements, selector, first=not spec.all)

        def value(element: _Element, spec: FieldSpec = spec) -> str | None:
            if spec.attribute is not None:
                return element.attrs.get(spec.attribute.lower())
            return _normalise(element.text())

        if spec.all:
            page.fields[spec.name] = [value(element) for element in matches]
        else:
            page.fields[spec.name] = value(matches[0]) if matches else None
    titles = _select(elements, compile_selector("title"), first=True)
    page.title = _normalise(titles[0].text()) if titles else None
    page.title = page.title or None
    base = _select(elements, compile_selector("base[href]"), first=True)
    link_base = urljoin(base_url, base[0].attrs["href"]) if base else base_url
    page.links = _links(elements, _ALL_LINKS, link_base, max_links)
    if follow is not None:
        page.follow = _links(elements, follow, link_base, max_links)
    return page


# --- the size cap ----------------------------------------------------------------------------


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def cap_result(result: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Return `result` made to fit `max_bytes` of JSON.

    The largest field values and the link list are cut first (strings keep a prefix ending in
    TRUNCATION_MARKER, lists keep their first items); the cut names are listed in
    `result["truncated"]`. Raises PermanentFailure(reason="result_too_large") when even the
    cut result does not fit (only possible with an enormous URL or title).
    """
    if _size(result) <= max_bytes:
        return result
    truncated: list[str] = []
    for _ in range(200):
        candidates: list[tuple[int, str, dict[str, Any], str]] = []
        fields = result.get("fields")
        if isinstance(fields, dict):
            candidates.extend(
                (_size(value), f"fields.{name}", fields, name) for name, value in fields.items()
            )
        for key in ("links", "follow", "title"):
            if result.get(key):
                candidates.append((_size(result[key]), key, result, key))
        candidates = [c for c in candidates if c[0] > 64]
        if not candidates:
            break
        _, label, container, key = max(candidates, key=lambda item: item[0])
        excess = _size(result) - max_bytes + 64
        value = container[key]
        if isinstance(value, str):
            keep = max(0, min(len(value) // 2, len(value) - excess))
            container[key] = value[:keep] + TRUNCATION_MARKER
        elif isinstance(value, list):
            container[key] = value[: len(value) // 2]
        else:
            container[key] = None
        if label not in truncated:
            truncated.append(label)
        result["truncated"] = truncated
        if _size(result) <= max_bytes:
            return result
    raise PermanentFailure(
        f"result is larger than the {max_bytes}-byte limit even after truncation",
        reason="result_too_large",
    )
