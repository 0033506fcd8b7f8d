"""Turning a page into the job's result: named fields and items from CSS selectors, title,
links, and the text sample of a job that asks for no fields.

One extract spec means the same thing in both engines. Rendered pages are extracted inside
Chromium (`BROWSER_EXTRACT_SCRIPT`, after the page's scripts ran); `render: false` pages by
lexbor through selectolax (`extract_static`), an HTML5 parser that builds the same tree a
browser builds (implied `<tbody>`, `<p>`/`<li>` end tags, quirks mode, `<template>` contents
kept apart) and a CSS Selectors Level 4 engine (`:nth-child`, `+`, `~`, `:not`, `:is`, `:has`,
attribute selectors with `i`). Everything around the selector engines is one definition used by
both: whitespace normalisation (`WHITESPACE_CLASS`, the same characters in JavaScript and
Python), missing elements and attributes (`null`), `all` (a list, in document order, each
element once), items (each field read inside its element as `element.querySelector` reads,
`:scope` for the element itself), the title (the text of the first `title` element), the text
sample (the body's text without script, style, noscript and template text, read node by node
until it has enough), and links (raw `href` values resolved, filtered and deduplicated here, in
Python, for both engines). Transforms run after either engine (transforms.py). A conformance
test runs the same specs against the same pages in both and requires identical results.

A field or items may name an XPath 1.0 expression (`xpath`) instead of a CSS selector. Chromium
evaluates it over its DOM (`document.evaluate`); the static engine over an lxml copy of lexbor's
tree (`xpath_tree.XPathTree`: the same elements, attributes, text and comments, SVG and MathML
elements in their namespaces as in the DOM), never over a tree libxml2's own HTML parser builds,
which is not the HTML5 tree. An expression selects nodes: an element gives its text (or
`attribute`), an attribute node its value, a text or comment node its normalised text. An
expression whose result is not a node-set (`count(...)`, `string(...)`) is a bad selector in
both engines.

Results are capped (`cap_result`, linear in the result's size): a stored result must stay small
enough for a database row and a status preview; oversized values are cut and listed under
`"truncated"`. Static extraction stops copying text once the field values have taken as many
characters as the result may have bytes (`extract_static`'s `max_characters`), so a page whose
nested elements repeat their text (each one's text holds all of its descendants') cannot
multiply its size in memory; what it cuts is over the limit anyway, and `cap_result` names it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

from scrapeq_queue.payload import (
    DEFAULT_ITEMS_LIMIT,
    ITEM_ELEMENT_SELECTOR,
    item_fields_as_extract,
)
from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError

from .errors import BadInput, PermanentFailure
from .structured_data import StructuredData, read_structured_data
from .xpath_tree import XPathMatch, XPathTree, check_xpath

# Links kept per page (for following and for the result): enough for a listing page.
DEFAULT_MAX_LINKS = 500
# Candidate `<a href>` elements read per page before resolving and deduplicating: bounds the
# work on a page of a million links while leaving room for duplicates and mailto: links.
LINK_CANDIDATES_PER_LINK: Final = 10
# Characters of raw `href`s read per kept link, in total: a listing page's links average well
# under 200 characters, and 500 links of 8 KiB each (4 MB) is the most a page hands over.
LINK_CHARS_PER_LINK: Final = 8 * 1024
TRUNCATION_MARKER = "…[truncated]"
# Characters of field values a static extraction copies out of one page unless told otherwise:
# the default result limit (--max-result-bytes), as in the browser engine's script.
MAX_EXTRACTED_CHARACTERS: Final = 256 * 1024
# What "whitespace" means when text is normalised: JavaScript's `\s` spelled out, so that the
# same character class (pasted into BROWSER_EXTRACT_SCRIPT) means the same in both languages
# (Python's `\s` also matches \x1c-\x1f and \x85 and misses \ufeff).
WHITESPACE_CLASS: Final = (
    r"[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
)
_WHITESPACE: Final = re.compile(WHITESPACE_CLASS + "+")
# Characters of a page's text kept as `text_sample` in the result of a job that asks for no
# fields: what the classic worker stored beside the title.
TEXT_SAMPLE_CHARACTERS: Final = 1000
# Elements whose text is no part of the text sample: never shown as text (a `<template>`'s
# contents are not in the tree at all, in either engine).
TEXT_SAMPLE_SKIPPED: Final = ("script", "style", "noscript", "template")


@dataclass(frozen=True)
class Transform:
    """One step of a field's `transforms` (`{"type": ..., options}`; transforms.py applies
    it): plain data, so that a field spec travels to an extraction process as it is."""

    type: str
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str, default: Any = None) -> Any:
        """The value of option `name`, or `default` when the payload left it out."""
        for key, value in self.options:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class FieldSpec:
    """One named field: the first match's text (or `attribute`), or every match with `all`,
    then its `transforms` in order. In an item, the selector ITEM_ELEMENT_SELECTOR reads the
    item's element itself."""

    name: str
    selector: str
    attribute: str | None = None
    all: bool = False
    transforms: tuple[Transform, ...] = ()
    # `selector` is an XPath expression, not a CSS selector.
    xpath: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "selector": self.selector,
            "attribute": self.attribute,
            "all": self.all,
            "xpath": self.xpath,
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
        unknown = set(spec) - {"selector", "xpath", "attribute", "all", "transforms"}
        if unknown:
            raise BadInput(f"extract.{name} has unknown keys: {', '.join(sorted(unknown))}")
        xpath = "xpath" in spec
        if xpath and "selector" in spec:
            raise BadInput(f"extract.{name} names both a selector and an xpath")
        selector = spec.get("xpath" if xpath else "selector")
        attribute = spec.get("attribute")
        take_all = spec.get("all", False)
        if not isinstance(selector, str) or not selector.strip():
            what = "xpath" if xpath else "selector"
            raise BadInput(f"extract.{name}.{what} must be a non-empty string")
        if attribute is not None and (not isinstance(attribute, str) or not attribute):
            raise BadInput(f"extract.{name}.attribute must be a non-empty string")
        if not isinstance(take_all, bool):
            raise BadInput(f"extract.{name}.all must be true or false")
        transforms = tuple(
            Transform(
                str(step["type"]),
                tuple((key, value) for key, value in step.items() if key != "type"),
            )
            for step in spec.get("transforms") or ()
        )
        fields.append(
            FieldSpec(name, selector.strip(), attribute, take_all, transforms, xpath=xpath)
        )
    return tuple(fields)


@dataclass(frozen=True)
class ItemsSpec:
    """The payload's `items`: one object per element matching `selector` (at most `limit`),
    each of `fields` read inside that element."""

    selector: str
    fields: tuple[FieldSpec, ...]
    limit: int = DEFAULT_ITEMS_LIMIT
    # `selector` is an XPath expression (its element matches are the items).
    xpath: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "selector": self.selector,
            "fields": [spec.as_json() for spec in self.fields],
            "limit": self.limit,
            "xpath": self.xpath,
        }


def parse_items(items: object) -> ItemsSpec | None:
    """Read the payload's `items` (validated by the queue's rules); None when absent."""
    if items is None:
        return None
    if not isinstance(items, Mapping) or not isinstance(items.get("fields"), Mapping):
        raise BadInput("items must be a mapping with a selector and fields")
    xpath = "xpath" in items
    selector = items.get("xpath" if xpath else "selector")
    if not isinstance(selector, str) or not selector.strip():
        raise BadInput(f"items.{'xpath' if xpath else 'selector'} must be a non-empty string")
    return ItemsSpec(
        selector.strip(),
        parse_fields(item_fields_as_extract(items["fields"])),
        int(items.get("limit", DEFAULT_ITEMS_LIMIT)),
        xpath=xpath,
    )


@dataclass
class ExtractedPage:
    """What extraction found on one page (both engines fill the same fields)."""

    fields: dict[str, Any] = field(default_factory=dict)
    title: str | None = None
    links: list[str] = field(default_factory=list)
    follow: list[str] = field(default_factory=list)
    # The links matching the job's next.selector (absolute, in page order), when it has one.
    next_links: list[str] = field(default_factory=list)
    # The first TEXT_SAMPLE_CHARACTERS of the body's text, when the job asked for no fields.
    text_sample: str | None = None
    # One object per item element, when the job asked for items.
    items: list[dict[str, Any]] | None = None
    # What the extraction left out or cut beyond a marked value ("items": elements past the
    # limit or the budget), named in the result's `truncated`.
    truncated: list[str] = field(default_factory=list)
    # The URL the page's relative links resolve against (its <base href>, else its final URL).
    link_base: str | None = None
    # What structuredData asked for, once read.
    structured_data: StructuredData | None = None
    # A rendered page's HTML, when its structured data is still to be read (never stored).
    document_html: str | None = None


@dataclass
class PageOutcome:
    """What fetching one URL produced, by either engine, before it becomes the job's result."""

    url: str
    final_url: str
    status: int | None
    content_type: str | None
    extracted: ExtractedPage | None
    timing_ms: dict[str, float]
    # Refused by the SSRF guard or the egress proxy: each one is listed.
    blocked_requests: list[dict[str, str]] = field(default_factory=list)
    content_length: int | None = None
    # Not fetched because the job said so (blockResources): a count per kind, not a refusal.
    skipped_requests: dict[str, int] = field(default_factory=dict)
    # For a parser (JobOptions.html_limit): the document's response headers (names lower-cased)
    # and its HTML, at most html_limit characters (html_truncated: it was cut).
    headers: dict[str, str] = field(default_factory=dict)
    html: str | None = None
    html_truncated: bool = False
    # What each of the job's page steps reported (step_runner.py), in order.
    steps: list[dict[str, Any]] = field(default_factory=list)
    # With next.click: the result's `pagination` (pages read, why they ended).
    pagination: dict[str, Any] | None = None
    # Captures of the rendered page the job keeps (payload keep): "screenshot" (PNG) and
    # "pdf", each at most its cap (artifacts.py); one over its cap is named in `too_large`.
    captures: dict[str, bytes] = field(default_factory=dict)
    too_large: list[str] = field(default_factory=list)
    # SHA-256 of the body the static engine read (None: none read, or the rendered engine).
    content_hash: bytes | None = None
    # The site answered 304 to a conditional request (recrawl.py): nothing was read.
    not_modified: bool = False
    # With a session (JobOptions.session_cookies): the jar after the page, to save with it.
    cookies: list[dict[str, Any]] | None = None


# Runs inside the page (Runtime.evaluate). One round trip does the optional wait for a
# selector, every field, the title and the raw links; `page_from_browser` finishes the links.
#
# Nothing larger than the result may leave the page: a 300 MB text node, or 300 nested
# elements of 1 MB each read with `all`, would otherwise be copied whole into the worker before
# the result cap (cap_result) could cut it. So text is read through a TreeWalker that stops
# once it has enough (never `textContent`, which builds the whole string), and every value
# draws on one budget of `maxChars` characters for all fields (an item of a list costs its
# length plus 2, so a million empty matches cost too). A value cut here ends in
# TRUNCATION_MARKER, a list cut here ends with the marker as its last item, and a field read
# after the budget is spent is the marker alone. Links draw on a budget of their own
# (`linkChars` per list). The budget is the result limit in characters, so whatever is cut
# here is over the limit anyway, and cap_result cuts and lists it.
BROWSER_EXTRACT_SCRIPT = r"""
async (spec) => {
  const norm = (s) => (s || '').replace(/WHITESPACE_CLASS+/g, ' ').trim();
  const MARK = spec.marker;
  // At most `limit` characters of a node's text, and whether there was more.
  const text = (n, limit) => {
    const walker = document.createTreeWalker(n, NodeFilter.SHOW_TEXT);
    const parts = [];
    let length = 0;
    while (walker.nextNode()) {
      const data = walker.currentNode.data;
      if (length + data.length > limit) {
        parts.push(data.slice(0, limit - length));
        return [parts.join(''), true];
      }
      parts.push(data);
      length += data.length;
    }
    return [parts.join(''), false];
  };
  let left = spec.maxChars;
  // A value within what is left of the budget (cut and marked if need be), charged to it. An
  // XPath may select an attribute node (its value, as `attribute` reads one) or a text or
  // comment node (its text, normalised); `attribute` applies to elements only.
  const take = (f, n) => {
    if (left <= 0) return MARK;
    let value, more;
    if (n.nodeType !== 1) {
      const raw = n.nodeType === 2 ? n.value : n.nodeValue;
      if (raw === null || f.attribute) { left -= 4; return null; }
      more = raw.length > left;
      value = more ? raw.slice(0, left) : raw;
      if (n.nodeType !== 2) value = norm(value);
    } else if (f.attribute) {
      value = n.getAttribute(f.attribute);
      if (value === null) { left -= 4; return null; }
      more = value.length > left;
      if (more) value = value.slice(0, left);
    } else {
      [value, more] = text(n, left);
      value = norm(value);
    }
    left -= value.length + 2;
    return more ? value + MARK : value;
  };
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
  // The matches of a field (or of items) inside `context`, in document order: a CSS
  // selector's elements, or the nodes an XPath selects (a result that is not a node-set throws).
  const select = (f, context, first) => {
    if (!f.xpath) {
      return first ? [context.querySelector(f.selector)].filter((n) => n !== null)
                   : context.querySelectorAll(f.selector);
    }
    if (first) {
      const node = document.evaluate(
        f.selector, context, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;
      return node === null ? [] : [node];
    }
    const found = document.evaluate(
      f.selector, context, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
    const nodes = [];
    for (let i = 0; i < found.snapshotLength; i++) nodes.push(found.snapshotItem(i));
    return nodes;
  };
  const fields = {};
  for (const f of spec.fields) {
    let nodes;
    try { nodes = select(f, document, !f.all); }
    catch (e) { return {badSelector: f.selector, xpath: f.xpath, error: String(e)}; }
    if (!f.all) { fields[f.name] = nodes.length ? take(f, nodes[0]) : null; continue; }
    const values = [];
    for (const n of nodes) {
      if (left <= 0) { values.push(MARK); break; }
      values.push(take(f, n));
    }
    fields[f.name] = values;
  }
  // Items: one object per element, in document order, each field read inside its element (an
  // element's querySelector never returns the element itself: ':scope' stands for it).
  let items = null, itemsCut = false;
  if (spec.items) {
    const scope = spec.itemElement;
    let elements;
    try {
      elements = Array.from(select(spec.items, document, false)).filter((n) => n.nodeType === 1);
    } catch (e) {
      return {badSelector: spec.items.selector, xpath: spec.items.xpath, error: String(e)};
    }
    const probe = document.createElement('div');
    for (const f of spec.items.fields) {
      if (f.selector === scope && !f.xpath) continue;
      try {
        if (f.xpath) document.createExpression(f.selector); else probe.querySelector(f.selector);
      }
      catch (e) { return {badSelector: f.selector, xpath: f.xpath, error: String(e)}; }
    }
    items = [];
    itemsCut = elements.length > spec.items.limit;
    for (const element of elements) {
      if (items.length >= spec.items.limit) break;
      if (left <= 0) { itemsCut = true; break; }
      const item = {};
      for (const f of spec.items.fields) {
        let nodes;
        try { nodes = f.selector === scope && !f.xpath ? [element] : select(f, element, !f.all); }
        catch (e) { return {badSelector: f.selector, xpath: f.xpath, error: String(e)}; }
        if (!f.all) { item[f.name] = nodes.length ? take(f, nodes[0]) : null; continue; }
        const values = [];
        for (const n of nodes) {
          if (left <= 0) { values.push(MARK); break; }
          values.push(take(f, n));
        }
        item[f.name] = values;
      }
      items.push(item);
    }
  }
  const hrefs = (selector) => {
    const out = [];
    let chars = spec.linkChars;
    for (const a of document.querySelectorAll(selector)) {
      if (a.localName !== 'a' || !a.hasAttribute('href')) continue;
      const href = a.getAttribute('href');
      chars -= href.length + 2;
      if (chars < 0) break;
      out.push(href);
      if (out.length >= spec.linkCandidates) break;
    }
    return out;
  };
  let follow = [];
  if (spec.followSelector) {
    try { follow = hrefs(spec.followSelector); }
    catch (e) { return {badSelector: spec.followSelector, error: String(e)}; }
  }
  let next = [];
  if (spec.nextSelector) {
    try { next = hrefs(spec.nextSelector); }
    catch (e) { return {badSelector: spec.nextSelector, error: String(e)}; }
  }
  const titleNode = document.querySelector('title');
  let title = null;
  if (titleNode) {
    const [raw, more] = text(titleNode, spec.maxChars);
    title = more ? norm(raw) + MARK : norm(raw);
  }
  // The first `spec.textSample` characters (code points) of the body's text as `norm` would
  // make it, read node by node and no further than needed.
  let textSample = null;
  if (spec.textSample && document.body) {
    const skipped = new Set(spec.textSampleSkipped);
    const walker = document.createTreeWalker(
      document.body, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT,
      {acceptNode: (n) => n.nodeType === 1 && skipped.has(n.localName)
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
    const points = (s) => s.length - (s.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g) || []).length;
    let out = '', length = 0, space = false;
    while (length < spec.textSample && walker.nextNode()) {
      if (walker.currentNode.nodeType !== 3) continue;
      const collapsed = walker.currentNode.data.replace(/WHITESPACE_CLASS+/g, ' ');
      if (collapsed === '') continue;
      const lead = collapsed[0] === ' ', trail = collapsed[collapsed.length - 1] === ' ';
      const core = collapsed.slice(lead ? 1 : 0, trail ? collapsed.length - 1 : undefined);
      if (core === '') { space = true; continue; }
      if (out && (space || lead)) { out += ' '; length += 1; }
      out += core;
      length += points(core);
      space = trail;
    }
    textSample = Array.from(out).slice(0, spec.textSample).join('') || null;
  }
  // The rendered document for its structured data, unless it is larger than a page may be.
  let documentHtml = null, documentHtmlTooLarge = false;
  if (spec.documentHtmlChars > 0 && document.documentElement) {
    const html = document.documentElement.outerHTML;
    if (html.length > spec.documentHtmlChars) documentHtmlTooLarge = true;
    else documentHtml = html;
  }
  const base = document.querySelector('base[href]');
  const baseHref = base ? base.getAttribute('href') : null;
  return {fields, items, itemsCut, title, links: hrefs('a[href]'), follow, next, textSample,
          documentHtml, documentHtmlTooLarge,
          baseHref: baseHref !== null && baseHref.length <= spec.linkChars ? baseHref : null,
          finalUrl: location.href, contentType: document.contentType};
}
""".replace("WHITESPACE_CLASS", WHITESPACE_CLASS)


def browser_script_argument(
    fields: Sequence[FieldSpec],
    *,
    wait_for: str | None,
    wait_for_ms: int,
    follow_selector: str | None,
    max_links: int,
    max_result_bytes: int,
    next_selector: str | None = None,
    text_sample: bool = False,
    items: ItemsSpec | None = None,
    document_html_chars: int = 0,
    text_chars: int = 0,
) -> dict[str, Any]:
    """The JSON argument `BROWSER_EXTRACT_SCRIPT` expects. `max_result_bytes` (the stored
    result's limit) bounds what the script copies out of the page: field values together at
    that many characters, each list of raw links at LINK_CHARS_PER_LINK per kept link.
    `text_sample`: read the page's text sample (TEXT_SAMPLE_CHARACTERS). `items`: read them
    after the fields, from the same budget. `document_html_chars`: hand over the rendered
    document's HTML when it has at most that many characters (0: never). `next_selector`:
    read the links matching it as the page's next page links. `text_chars`: read that many
    characters of the body's text instead (the text artifact; the sample is their start)."""
    return {
        "documentHtmlChars": document_html_chars,
        "items": items.as_json() if items is not None else None,
        "itemElement": ITEM_ELEMENT_SELECTOR,
        "textSample": max(TEXT_SAMPLE_CHARACTERS if text_sample else 0, text_chars),
        "textSampleSkipped": list(TEXT_SAMPLE_SKIPPED),
        "fields": [spec.as_json() for spec in fields],
        "waitFor": wait_for,
        "waitForMs": wait_for_ms,
        "followSelector": follow_selector,
        "nextSelector": next_selector,
        "linkCandidates": max_links * LINK_CANDIDATES_PER_LINK,
        "maxChars": max_result_bytes,
        "linkChars": max_links * LINK_CHARS_PER_LINK,
        "marker": TRUNCATION_MARKER,
    }


def page_from_browser(
    raw: Mapping[str, Any], *, page_url: str, max_links: int = DEFAULT_MAX_LINKS
) -> ExtractedPage:
    """Convert the script's answer; raise BadInput for a selector Chromium rejected.

    `page_url` is the URL the links are relative to when the page has no `<base href>` (the
    script's `finalUrl` when it has one).
    """
    if raw.get("badSelector") is not None:
        kind = "XPath" if raw.get("xpath") else "CSS selector"
        raise BadInput(
            f"invalid {kind} {raw['badSelector']!r}: {raw.get('error')}",
            reason="bad_selector",
        )
    base = link_base(raw.get("finalUrl") or page_url, raw.get("baseHref"))
    return ExtractedPage(
        fields=dict(raw.get("fields") or {}),
        title=raw.get("title") or None,
        links=resolve_links(raw.get("links") or [], base, max_links),
        follow=resolve_links(raw.get("follow") or [], base, max_links),
        next_links=resolve_links(raw.get("next") or [], base, max_links),
        text_sample=raw.get("textSample") or None,
        items=list(raw["items"]) if raw.get("items") is not None else None,
        truncated=[
            *(["items"] if raw.get("itemsCut") else []),
            *(["structured_data"] if raw.get("documentHtmlTooLarge") else []),
        ],
        link_base=base,
        document_html=raw.get("documentHtml"),
    )


# --- what both engines share ------------------------------------------------------------------


def normalise_text(text: str) -> str:
    """Whitespace runs become one space, ends trimmed (the browser script's `norm`)."""
    return _WHITESPACE.sub(" ", text).strip()


def link_base(page_url: str, base_href: str | None) -> str:
    """The URL a page's relative links resolve against: its `<base href>` if any."""
    return urljoin(page_url, base_href.strip()) if base_href is not None else page_url


def resolve_links(hrefs: Iterable[str], base_url: str, limit: int) -> list[str]:
    """Absolute http(s) URLs of `hrefs`, without fragments, each once, at most `limit`."""
    out: list[str] = []
    seen: set[str] = set()
    for href in hrefs:
        try:
            absolute = urljoin(base_url, href.strip()).split("#", 1)[0]
            scheme = urlsplit(absolute).scheme.lower()
        except ValueError:
            continue  # a malformed href (e.g. an invalid IPv6 literal) is no link
        if scheme not in ("http", "https") or absolute in seen:
            continue
        seen.add(absolute)
        out.append(absolute)
        if len(out) >= limit:
            break
    return out


# --- the static engine: lexbor --------------------------------------------------------------

_EMPTY_DOCUMENT: Final = LexborHTMLParser("")


@functools.lru_cache(maxsize=1024)
def check_selector(selector: str) -> None:
    """Raise BadInput(reason="bad_selector") if lexbor cannot parse `selector`.

    Cached: a crawl repeats the same few selectors on every page.
    """
    try:
        _EMPTY_DOCUMENT.css(selector)
    except SelectolaxError as error:
        raise BadInput(
            f"invalid CSS selector {selector!r}: {error}", reason="bad_selector"
        ) from error


def check_spec_selector(spec: FieldSpec | ItemsSpec) -> None:
    """Raise BadInput(reason="bad_selector") if the spec's CSS selector or XPath is invalid."""
    if spec.xpath:
        check_xpath(spec.selector)
    elif spec.selector != ITEM_ELEMENT_SELECTOR:
        check_selector(spec.selector)


def _select(document: LexborHTMLParser, selector: str, *, first: bool) -> list[LexborNode]:
    """Matches in document order, each element once (lexbor repeats an element that matches
    several selectors of a group; querySelectorAll does not)."""
    found: list[LexborNode] = []
    seen: set[int] = set()
    for node in document.css(selector):
        if node.mem_id in seen:
            continue
        seen.add(node.mem_id)
        found.append(node)
        if first:
            break
    return found


def _select_inside(element: LexborNode, selector: str, *, first: bool) -> list[LexborNode]:
    """`element.querySelectorAll(selector)` (or querySelector): matches among its descendants,
    in document order, each once. lexbor's own lists the element itself when it matches."""
    if selector == ITEM_ELEMENT_SELECTOR:
        return [element]
    found: list[LexborNode] = []
    seen: set[int] = {element.mem_id}
    for node in element.css(selector):
        if node.mem_id in seen:
            continue
        seen.add(node.mem_id)
        found.append(node)
        if first:
            break
    return found


def _attribute(node: LexborNode, name: str) -> str | None:
    """`getAttribute(name)`: None when absent, "" for an attribute without a value."""
    attributes = node.attributes
    for key in (name, name.lower()):
        if key in attributes:
            return attributes[key] or ""
    return None


def _hrefs(document: LexborHTMLParser, selector: str, limit: int) -> list[str]:
    out: list[str] = []
    for node in _select(document, selector, first=False):
        href = node.attributes.get("href") if node.tag == "a" else None
        if href is None:
            continue
        out.append(href)
        if len(out) >= limit:
            break
    return out


class _TextBudget:
    """What is left of a page's characters for field values. A value costs its length plus 2
    (null costs 4), so a million empty matches cost too."""

    def __init__(self, characters: int) -> None:
        self.left = characters

    def take(self, value: str | None) -> str | None:
        """`value` as far as the budget allows: cut to what is left and ending in
        TRUNCATION_MARKER when longer; the marker alone once the budget is spent."""
        if self.left <= 0:
            return TRUNCATION_MARKER
        if value is None:
            self.left -= 4
            return None
        if len(value) > self.left:
            value = value[: self.left] + TRUNCATION_MARKER
            self.left = -2
            return value
        self.left -= len(value) + 2
        return value


def extract_static(
    html: str,
    fields: Sequence[FieldSpec],
    *,
    base_url: str,
    follow_selector: str | None = None,
    max_links: int = DEFAULT_MAX_LINKS,
    max_characters: int = MAX_EXTRACTED_CHARACTERS,
    wait_for: str | None = None,
    next_selector: str | None = None,
    text_sample: bool = False,
    items: ItemsSpec | None = None,
    structured_data: Sequence[str] = (),
    text_chars: int = 0,
) -> ExtractedPage:
    """Extract fields, title and links from an HTML document without a browser, with the same
    meaning as BROWSER_EXTRACT_SCRIPT. Raises BadInput for a selector lexbor cannot parse.

    The field values together take at most `max_characters` (the result's limit), as in the
    browser engine's script: a value cut there ends in TRUNCATION_MARKER, a list cut there
    ends with the marker as its last item, a field read after the budget is spent is the
    marker alone, and no more text is read from the page.
    `wait_for`: a selector that must match (PermanentFailure `wait_for_timeout` otherwise; the
    static HTML is all there is to wait for). `text_sample`: read the page's text sample.
    `items`: read after the fields, from the same budget, as the browser script reads them.
    `structured_data`: the syntaxes of the page's structured data to read (structured_data.py).
    `next_selector`: the links matching it are the page's next page links. `text_chars`: read
    that many characters of the body's text as `text_sample` instead (the text artifact).

    CPU-bound and unbounded in time on hostile HTML (a parse of deeply nested lists takes
    seconds): the worker runs it in a child process within the job's time
    (extraction_processes.py), never on the event loop.
    """
    specs: list[FieldSpec | ItemsSpec] = [*fields]
    if items is not None:
        specs += [items, *items.fields]
    for spec in specs:
        check_spec_selector(spec)
    for selector in (follow_selector, next_selector, wait_for):
        if selector:
            check_selector(selector)
    try:
        # Scripting on, as in Chromium: `<noscript>` holds text, not elements.
        document = LexborHTMLParser(html, scripting=True)
    except SelectolaxError as error:
        # lexbor accepts any text as HTML; it fails only when it cannot allocate its tree.
        raise PermanentFailure(
            f"the HTML of {base_url} could not be parsed within the memory a parse may use "
            f"({error})",
            reason="response_too_large",
        ) from error
    if wait_for and not _select(document, wait_for, first=True):
        raise PermanentFailure(
            f"waitFor selector {wait_for!r} is not in the static HTML of {base_url} "
            "(render: false runs no JavaScript; use render: true)",
            reason="wait_for_timeout",
        )
    page = ExtractedPage()
    budget = _TextBudget(max_characters)
    tree = XPathTree(document) if any(spec.xpath for spec in specs) else None

    def matches(spec: FieldSpec | ItemsSpec, element: LexborNode | None) -> list[XPathMatch]:
        first = isinstance(spec, FieldSpec) and not spec.all
        if spec.xpath:
            assert tree is not None
            # A text or comment node gives its text normalised, as an element's text is.
            return [
                (normalise_text(match[0]), False)
                if isinstance(match, tuple) and not match[1]
                else match
                for match in tree.select(spec.selector, element, first=first)
            ]
        if element is None:
            return list(_select(document, spec.selector, first=first))
        return list(_select_inside(element, spec.selector, first=first))

    for spec in fields:
        page.fields[spec.name] = _field_value(spec, matches(spec, None), budget)
    if items is not None:
        elements = [match for match in matches(items, None) if isinstance(match, LexborNode)]
        page.items = []
        if len(elements) > items.limit:
            page.truncated.append("items")
        for element in elements[: items.limit]:
            if budget.left <= 0:
                if "items" not in page.truncated:
                    page.truncated.append("items")
                break
            page.items.append(
                {
                    spec.name: _field_value(spec, matches(spec, element), budget)
                    for spec in items.fields
                }
            )
    titles = _select(document, "title", first=True)
    title = normalise_text(titles[0].text(deep=True)) if titles else ""
    if len(title) > max_characters:
        title = title[:max_characters] + TRUNCATION_MARKER
    page.title = title or None
    bases = _select(document, "base[href]", first=True)
    base = link_base(base_url, bases[0].attributes.get("href") or "" if bases else None)
    candidates = max_links * LINK_CANDIDATES_PER_LINK
    page.link_base = base
    page.links = resolve_links(_hrefs(document, "a[href]", candidates), base, max_links)
    if follow_selector:
        page.follow = resolve_links(_hrefs(document, follow_selector, candidates), base, max_links)
    if next_selector:
        page.next_links = resolve_links(
            _hrefs(document, next_selector, candidates), base, max_links
        )
    if structured_data:
        page.structured_data = read_structured_data(html, base, structured_data)
    text_limit = max(TEXT_SAMPLE_CHARACTERS if text_sample else 0, text_chars)
    if text_limit and document.body is not None:
        page.text_sample = _text_sample(document.body, text_limit) or None
    return page


def _field_value(
    spec: FieldSpec, matches: Sequence[XPathMatch], budget: _TextBudget
) -> str | list[str | None] | None:
    """A field's value from its matches, charged to `budget` as the browser script's `take`."""

    def value(node: XPathMatch) -> str | None:
        if budget.left <= 0:
            return TRUNCATION_MARKER  # spent: no more text is read
        if not isinstance(node, LexborNode):
            # An XPath's attribute, text or comment node (or one with no value, the document).
            if node is None or spec.attribute is not None:
                return budget.take(None)
            return budget.take(node[0])
        if spec.attribute is not None:
            return budget.take(_attribute(node, spec.attribute))
        return budget.take(normalise_text(node.text(deep=True)))

    if not spec.all:
        return value(matches[0]) if matches else None
    values: list[str | None] = []
    for node in matches:
        if budget.left <= 0:
            values.append(TRUNCATION_MARKER)
            break
        values.append(value(node))
    return values


def _text_sample(body: LexborNode, limit: int) -> str:
    """The first `limit` characters of `body`'s text, normalised as `normalise_text` would
    (the browser script's `textSample`, step for step), reading no further than needed."""
    parts: list[str] = []
    length = 0
    space = False
    node = body.child
    while node is not None and length < limit:
        descend = False
        if node.tag == "-text":
            collapsed = _WHITESPACE.sub(" ", node.text_content or "")
            if collapsed:
                lead, trail = collapsed[0] == " ", collapsed[-1] == " "
                core = collapsed[1 if lead else 0 : len(collapsed) - 1 if trail else None]
                if not core:
                    space = True
                else:
                    if parts and (space or lead):
                        parts.append(" ")
                        length += 1
                    parts.append(core)
                    length += len(core)
                    space = trail
        elif node.tag not in TEXT_SAMPLE_SKIPPED and node.child is not None:
            descend = True
        if descend:
            node = node.child
            continue
        # The next node in document order outside this one's subtree, never leaving `body`.
        while node is not None and node.next is None:
            node = node.parent
            if node is None or node.mem_id == body.mem_id:
                node = None
        if node is not None:
            node = node.next
    return "".join(parts)[:limit]


# --- the size cap ----------------------------------------------------------------------------

# Values this small are never cut: cutting them saves less than it costs to say so.
_SMALLEST_CUT: Final = 64
# `,"truncated":` before the list of cut names.
_TRUNCATED_KEY_BYTES: Final = len(',"truncated":')


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _marked(value: Any) -> bool:
    """The extraction cut `value`: a string ending in TRUNCATION_MARKER, or a list whose last
    item is the marker."""
    if isinstance(value, str):
        return value.endswith(TRUNCATION_MARKER)
    return isinstance(value, list) and bool(value) and value[-1] == TRUNCATION_MARKER


def cap_result(result: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Return `result` made to fit `max_bytes` of JSON, in time linear in its size (each value
    is serialised once to measure it).

    The field values, the link lists and the title share what the rest leaves, the largest
    first: every value above a common share is cut to it (a string keeps a prefix ending in
    TRUNCATION_MARKER, or becomes null when even the marker does not fit; a list keeps its first
    items, the first one that does not fit cut like a string), and the cut names are listed in
    `result["truncated"]` (after any the extraction already put there, and the fields it cut
    itself: a value ending in TRUNCATION_MARKER, a list ending with it). Raises
    PermanentFailure(reason="result_too_large") when even the cut result does not fit (an
    enormous URL or title, or more field names than the limit holds).
    """
    already = [str(label) for label in result.pop("truncated", None) or []]
    slots: list[tuple[str, dict[str, Any], str]] = []
    fields = result.get("fields")
    if isinstance(fields, dict):
        # Values the extraction cut (its budget spent) are named too, even when the result
        # then fits: a reader of `truncated` learns of every cut.
        named_before = set(already)
        already.extend(
            label
            for name, value in fields.items()
            if _marked(value) and (label := f"fields.{name}") not in named_before
        )
    if isinstance(fields, dict):
        slots.extend((f"fields.{name}", fields, name) for name in fields)
    slots.extend(
        (key, result, key)
        for key in (
            "items",
            "structured_data",
            "links",
            "follow",
            "title",
            "text_sample",
            "html",
            "text",
        )
        if result.get(key)
    )
    sizes = [_size(container[key]) for _, container, key in slots]
    # The size of everything else: the result with each slot's value as null (4 bytes).
    skeleton = dict(result)
    if isinstance(fields, dict):
        skeleton["fields"] = dict.fromkeys(fields)
    skeleton.update((key, None) for _, container, key in slots if container is result)
    total = _size(skeleton) + sum(size - 4 for size in sizes)
    label_bytes = _size(already) if already else 0
    if total + (_TRUNCATED_KEY_BYTES + label_bytes if already else 0) <= max_bytes:
        if already:
            result["truncated"] = already
        return result
    named = set(already)
    sized = sorted(
        (
            (size, label, container, key)
            for size, (label, container, key) in zip(sizes, slots, strict=True)
            if size > _SMALLEST_CUT
        ),
        key=lambda slot: slot[0],
        reverse=True,
    )
    cut_total = 0  # the sizes of the values cut so far (the `count` largest)
    count = share = 0
    for index, (value_size, label, _, _) in enumerate(sized):
        cut_total += value_size
        if label not in named:
            label_bytes += _size(label) + (1 if label_bytes else 2)
        count = index + 1
        room = max_bytes - (total - cut_total) - _TRUNCATED_KEY_BYTES - label_bytes
        share = room // count
        following = sized[count][0] if count < len(sized) else 0
        if share >= following:
            break
    if count == 0 or share < 0:
        raise _too_large(max_bytes)
    for _, label, container, key in sized[:count]:
        container[key] = _cut(container[key], share)
        if label not in named:
            already.append(label)
    result["truncated"] = already
    if _size(result) > max_bytes:
        raise _too_large(max_bytes)
    return result


def _cut(value: Any, limit: int) -> Any:
    """`value` cut to at most `limit` bytes of JSON (null when nothing smaller fits)."""
    if isinstance(value, str):
        room = limit - _size(TRUNCATION_MARKER) + 2  # the quotes are shared
        if room < 2:
            return None
        keep = min(len(value), room)
        while (size := _size(value[:keep])) > room:
            # Shrink in proportion (escapes and multi-byte characters), at least by one.
            keep = min(keep - 1, keep * room // size)
        return value[:keep] + TRUNCATION_MARKER
    if isinstance(value, list):
        kept: list[Any] = []
        used = 2
        for item in value:
            separator = 1 if kept else 0
            size = _size(item)
            if used + separator + size > limit:
                room = limit - used - separator
                if isinstance(item, str) and room >= _size(TRUNCATION_MARKER):
                    kept.append(_cut(item, room))  # the item that does not fit, cut
                break
            used += separator + size
            kept.append(item)
        return kept
    return None


def _too_large(max_bytes: int) -> PermanentFailure:
    return PermanentFailure(
        f"result is larger than the {max_bytes}-byte limit even after truncation",
        reason="result_too_large",
    )
