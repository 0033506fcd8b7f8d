"""A page's structured data (JSON-LD, microdata, Open Graph) through extruct.

Most shops publish their product data this way; a job asks for it with `structuredData` and its
result gets `structured_data: {"json-ld": [...], "microdata": [...], "opengraph": [...]}` in
extruct's uniform shape. Static pages are read from the fetched HTML, rendered pages from the
rendered document's HTML; either way the parse is lxml's over hostile input, so it runs only in
the extraction processes (extraction_processes.py), within the job's time and memory, never on
the event loop.

Each syntax is read on its own: a page whose JSON-LD is broken still gives its Open Graph tags,
and the broken syntax's list is empty with the reason under `errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from scrapeq_queue.payload import STRUCTURED_DATA_SYNTAXES

# What extruct's parse errors are cut to in a result: enough to recognise the problem.
MAX_ERROR_CHARACTERS: Final = 200

__all__ = ["STRUCTURED_DATA_SYNTAXES", "StructuredData", "read_structured_data"]


@dataclass
class StructuredData:
    """The items of each syntax asked for, and why a syntax could not be read."""

    items: dict[str, list[Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def read_structured_data(html: str, base_url: str, syntaxes: Sequence[str]) -> StructuredData:
    """The structured data of `html` for each of `syntaxes` (an empty list when the page has
    none); never raises for any page: a syntax that cannot be read is empty and named in
    `errors`. CPU-bound and unbounded in time on hostile HTML: call it in an extraction
    process."""
    # Imported here: extruct brings rdflib and takes half a second to import, which only the
    # extraction processes asked for structured data pay, once each.
    import extruct
    import lxml.etree
    from extruct.utils import parse_html

    found = StructuredData(items={syntax: [] for syntax in syntaxes})
    try:
        tree = parse_html(html.encode("utf-8", "surrogatepass"), "UTF-8")
    except (lxml.etree.ParserError, ValueError):
        return found  # an empty document: no structured data
    for syntax in syntaxes:
        try:
            extracted = extruct.extract(
                tree, base_url=base_url, syntaxes=[syntax], errors="strict", uniform=True
            )
        except Exception as error:  # extruct's and its parsers' errors have no common base
            found.errors[syntax] = f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARACTERS]
            continue
        found.items[syntax] = list(extracted.get(syntax) or [])
    return found
