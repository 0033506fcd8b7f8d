"""One result of the pages a listing's "next" button shows in turn, in the same tab.

A `next.click` listing (pagination.py) is read page after page within the row; the renderer
stops when a click shows nothing new (`same_content`) and makes one result of what it read.
"""

from __future__ import annotations

from collections.abc import Sequence

from .extraction import ExtractedPage


def merge_clicked_pages(pages: Sequence[ExtractedPage], max_links: int) -> ExtractedPage:
    """One result of the pages a "next" button showed in turn: the first page's fields, title,
    text sample and structured data; every page's items in order; their links and follow links
    each once, in the order first seen (links at most `max_links`)."""
    first = pages[0]
    merged = ExtractedPage(
        fields=first.fields,
        title=first.title,
        text_sample=first.text_sample,
        link_base=first.link_base,
        structured_data=first.structured_data,
        document_html=first.document_html,
    )
    if first.items is not None:
        merged.items = [item for page in pages for item in page.items or ()]
    merged.links = list(dict.fromkeys(link for page in pages for link in page.links))[:max_links]
    merged.follow = list(dict.fromkeys(link for page in pages for link in page.follow))
    merged.truncated = list(dict.fromkeys(cut for page in pages for cut in page.truncated))
    return merged


def same_content(one: ExtractedPage, other: ExtractedPage) -> bool:
    """Whether a click showed nothing new: the same fields, items and links as before."""
    return (one.fields, one.items, one.links) == (other.fields, other.items, other.links)
