"""Reading a sitemap, a sitemap index or a robots.txt as a stream of entries, memory bounded.

A source row's document arrives in chunks (url_sources.py); `SitemapReader.feed` takes each
chunk and returns the entries it completed. gzip is recognised by its magic bytes, whatever the
URL or the Content-Type say. XML goes through lxml's pull parser with entities left unresolved,
no DTD loaded, no network and huge trees off, and each finished entry is cleared at once, so
memory stays near one chunk whatever the document's size; a document that declares a DTD is
refused before it reaches the parser (the sitemap protocol has none, and a DTD is how XML bombs
are built). A document that is neither a `urlset`, a `sitemapindex` nor a plain-text list of
URLs is refused with its reason.

The sitemap protocol's bounds (https://www.sitemaps.org/protocol.html) apply: at most
MAX_ENTRIES entries and MAX_DOCUMENT_BYTES uncompressed bytes per document. Beyond either the
reader stops and says `truncated`: the entries before the bound stand.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal
from urllib.parse import urlsplit

from lxml import etree

from .errors import PermanentFailure

# The sitemap protocol's bounds per document: 50,000 URLs, 50 MB (52,428,800 bytes) uncompressed.
MAX_ENTRIES: Final = 50_000
MAX_DOCUMENT_BYTES: Final = 50 * 1024 * 1024
# The protocol's bound on a URL's length.
MAX_URL_CHARS: Final = 2048
# A line of a URL list longer than this is no URL (nor a JSON Lines entry worth reading).
_MAX_LINE_BYTES: Final = 64 * 1024
# A robots.txt is read up to this size (Google reads 500 KiB of it).
MAX_ROBOTS_BYTES: Final = 500 * 1024
GZIP_MAGIC: Final = b"\x1f\x8b"
# The most a gzip chunk is decompressed into at once (memory per reader stays near this).
_DECOMPRESSED_PIECE_BYTES: Final = 256 * 1024
# Markup no sitemap has: a DTD (and with it entity declarations, the stuff of XML bombs).
_FORBIDDEN_MARKUP: Final = (b"<!DOCTYPE", b"<!ENTITY")
# Bytes kept from the end of one chunk to find forbidden markup split across two chunks.
_CARRIED_BYTES: Final = max(len(markup) for markup in _FORBIDDEN_MARKUP) - 1
_SITEMAP_LINE: Final = re.compile(rb"^\s*sitemap\s*:\s*(\S+)\s*$", re.IGNORECASE)
_W3C_DATE: Final = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")

DocumentKind = Literal["urlset", "sitemapindex", "text", "robots", "lines", "jsonl"]
# A URL list of the object store: one URL per line, or JSON Lines (a string, or {"url": ...}).
ListFormat = Literal["lines", "jsonl"]
INVALID_REASON: Final = "invalid_sitemap"


@dataclass(frozen=True)
class SitemapEntry:
    """One entry of a source: a page (`is_sitemap` False) or a sitemap to read in turn."""

    url: str
    is_sitemap: bool
    lastmod: datetime | None = None
    # The entry's place in its document (1 for the first entry, skipped ones counted).
    position: int = 0


def parse_lastmod(text: str) -> datetime | None:
    """A W3C datetime (a date, or an RFC 3339 date-time) as an aware datetime; None when the
    text is not one. A date alone is midnight UTC; a time without a zone is taken as UTC."""
    value = text.strip()
    if not value:
        return None
    if _W3C_DATE.match(value):
        parts = [int(part) for part in value.split("-")] + [1, 1]
        try:
            return datetime(parts[0], parts[1], parts[2], tzinfo=UTC)
        except ValueError:
            return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _json_line_url(line: bytes) -> bytes:
    """The URL of a JSON Lines entry (a string, or an object's "url"); b"" when it has none."""
    try:
        value = json.loads(line)
    except ValueError:
        return b""
    if isinstance(value, dict):
        value = value.get("url")
    return value.encode() if isinstance(value, str) else b""


def _usable_url(text: str) -> str | None:
    url = text.strip()
    if not url or len(url) > MAX_URL_CHARS:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url


class SitemapReader:
    """Turns the chunks of one document into entries; feed() each chunk, then finish().

    `robots`: the document is a robots.txt, whose `Sitemap:` lines are its entries (as
    sitemaps). `url_list`: the document is a URL list of that format (lines, jsonl), read
    whole whatever its size; lines that are not URLs are skipped and counted. `lastmod_after`:
    entries whose `lastmod` is at or before it are skipped (entries without one are kept:
    nothing says they did not change). `start_after`: the first entries
    of the document already handled by an earlier attempt, counted in `entries` but neither
    returned nor counted as skipped. Raises PermanentFailure (reason invalid_sitemap) for what
    is not a sitemap.
    """

    def __init__(
        self,
        *,
        robots: bool = False,
        url_list: ListFormat | None = None,
        lastmod_after: datetime | None = None,
        start_after: int = 0,
    ) -> None:
        self.kind: DocumentKind | None = "robots" if robots else url_list
        # A URL list is no sitemap: neither the protocol's bounds nor its first-line rule apply.
        self.bounded = url_list is None
        self.lastmod_after = lastmod_after
        self.start_after = start_after
        # Entries read (in document order, skipped ones included) and entries left out.
        self.entries = 0
        self.skipped = 0
        self.truncated = False
        self.bytes_read = 0
        self._decompressor: zlib._Decompress | None = None
        self._started = False
        self._carried = b""
        self._text_tail = b""
        self._parser: etree.XMLPullParser | None = None
        self._done = False
        # Element tags seen, by their local name (a tag repeats on every entry).
        self._names: dict[str, str] = {}
        # The line being read is too long for a URL: the rest of it is dropped.
        self._overlong = False
        self._root_name: str | None = None

    @property
    def done(self) -> bool:
        """True once the reader stopped at a bound: later chunks are not read."""
        return self._done

    def feed(self, chunk: bytes) -> list[SitemapEntry]:
        """The entries completed by `chunk` (raw bytes from the network)."""
        if self._done or not chunk:
            return []
        if not self._started:
            self._started = True
            if chunk[:2] == GZIP_MAGIC:
                self._decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        if self._decompressor is None:
            return self._read(chunk)
        # Decompressed a piece at a time: a few compressed bytes can stand for gigabytes.
        found: list[SitemapEntry] = []
        pending = chunk
        while pending and not self._done:
            try:
                data = self._decompressor.decompress(pending, _DECOMPRESSED_PIECE_BYTES)
            except zlib.error as error:
                raise PermanentFailure(
                    f"the sitemap is not a valid gzip archive ({error})", reason=INVALID_REASON
                ) from error
            found += self._read(data)
            pending = self._decompressor.unconsumed_tail
        return found

    def finish(self) -> list[SitemapEntry]:
        """The entries left once the document ended; raises for a document that ended broken
        or empty."""
        if self._done:
            return []
        found: list[SitemapEntry] = []
        if self._decompressor is not None:
            try:
                found += self._read(self._decompressor.flush())
            except zlib.error as error:
                raise PermanentFailure(
                    f"the sitemap's gzip archive is cut short ({error})", reason=INVALID_REASON
                ) from error
            if not self._done and not self._decompressor.eof:
                raise PermanentFailure(
                    "the sitemap's gzip archive is cut short", reason=INVALID_REASON
                )
        if self._done:
            return found
        self._done = True
        if self.kind in ("text", "robots", "lines", "jsonl"):
            found += list(self._lines(self._text_tail, final=True))
            return found
        if self._parser is None:
            raise PermanentFailure("the sitemap is empty", reason=INVALID_REASON)
        try:
            self._parser.close()
        except etree.XMLSyntaxError as error:
            raise PermanentFailure(
                f"the sitemap is not well-formed XML ({error})", reason=INVALID_REASON
            ) from error
        found += self._events()
        return found

    def release(self) -> None:
        """Drop the parser and what it holds (call it in the thread that fed the reader)."""
        self._parser = None
        self._done = True

    def _read(self, data: bytes) -> list[SitemapEntry]:
        if not data:
            return []
        limit = MAX_ROBOTS_BYTES if self.kind == "robots" else MAX_DOCUMENT_BYTES
        if self.bounded and self.bytes_read + len(data) > limit:
            data = data[: max(0, limit - self.bytes_read)]
            self.truncated = True
        self.bytes_read += len(data)
        if self.kind is None:
            start = data.lstrip()[:1]
            if not start:
                return []
            self.kind = "urlset" if start == b"<" or data.startswith(b"\xef\xbb\xbf") else "text"
        if self.kind in ("text", "robots", "lines", "jsonl"):
            found = list(self._lines(self._text_tail + data, final=False))
        else:
            found = self._xml(data)
        if self.truncated:
            self._done = True
        return found

    def _lines(self, data: bytes, *, final: bool) -> Iterator[SitemapEntry]:
        if self._overlong:
            # The rest of a line too long to be a URL: dropped up to its end.
            end = data.find(b"\n")
            if end < 0:
                return
            data = data[end + 1 :]
            self._overlong = False
        lines = data.split(b"\n")
        self._text_tail = b"" if final else lines.pop()
        if len(self._text_tail) > _MAX_LINE_BYTES:
            self._text_tail = b""
            self._overlong = True
            self.entries += 1
            self.skipped += 1
        for raw in lines:
            if self.kind == "robots":
                matched = _SITEMAP_LINE.match(raw)
                if matched is None:
                    continue
                raw = matched.group(1)
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            if self.kind == "jsonl":
                line = _json_line_url(line)
            first = line.decode("utf-8", "replace")
            if self.kind == "text" and self.entries == 0 and _usable_url(first) is None:
                raise PermanentFailure(
                    "not a sitemap: the document is neither XML nor a list of URLs (its first "
                    f"line is {line[:60].decode('utf-8', 'replace')!r})",
                    reason=INVALID_REASON,
                )
            entry = self._entry(line.decode("utf-8", "replace"), self.kind == "robots", None)
            if entry is not None:
                yield entry
            if self._done:
                return

    def _xml(self, data: bytes) -> list[SitemapEntry]:
        scanned = self._carried + data
        for markup in _FORBIDDEN_MARKUP:
            if markup in scanned:
                raise PermanentFailure(
                    f"the sitemap declares {markup.decode()[2:]}: sitemaps have no DTD, and "
                    "entities are not expanded",
                    reason=INVALID_REASON,
                )
        self._carried = scanned[-_CARRIED_BYTES:]
        if self._parser is None:
            self._parser = etree.XMLPullParser(
                events=("end",),
                resolve_entities=False,
                load_dtd=False,
                no_network=True,
                huge_tree=False,
                remove_comments=True,
                remove_pis=True,
            )
        try:
            self._parser.feed(data)
        except etree.XMLSyntaxError as error:
            raise PermanentFailure(
                f"the sitemap is not well-formed XML ({error})", reason=INVALID_REASON
            ) from error
        return self._events()

    def _events(self) -> list[SitemapEntry]:
        assert self._parser is not None
        found: list[SitemapEntry] = []
        for _, element in self._parser.read_events():
            if self._done:
                break
            tag = element.tag
            if not isinstance(tag, str):
                continue
            name = self._names.get(tag)
            if name is None:
                name = self._names[tag] = etree.QName(tag).localname
            if self._root_name is None:
                root = element.getroottree().getroot()
                self._root_name = etree.QName(root).localname
                self._root(self._root_name)
            if name != "url" and name != "sitemap":
                continue  # an entry's child (read with its entry), or the root
            parent = element.getparent()
            if parent is None or parent.getparent() is not None:
                continue  # a <url> nested deeper than an entry
            entry = self._xml_entry(element, is_sitemap=name == "sitemap")
            if entry is not None:
                found.append(entry)
            # Drop what was read: the tree never holds more than the entry being read.
            element.clear()
            while element.getprevious() is not None:
                del parent[0]
        return found

    def _root(self, name: str) -> None:
        if name == "urlset":
            self.kind = "urlset"
        elif name == "sitemapindex":
            self.kind = "sitemapindex"
        else:
            raise PermanentFailure(
                f"not a sitemap: the document's root element is {name[:50]!r}, not urlset or "
                "sitemapindex",
                reason=INVALID_REASON,
            )

    def _xml_entry(self, element: etree._Element, *, is_sitemap: bool) -> SitemapEntry | None:
        loc = ""
        lastmod: datetime | None = None
        for child in element:
            tag = child.tag
            if not isinstance(tag, str):
                continue
            name = self._names.get(tag)
            if name is None:
                name = self._names[tag] = etree.QName(tag).localname
            if name == "loc":
                loc = child.text or ""
            elif name == "lastmod" and self.lastmod_after is not None:
                # Read only where it decides something.
                lastmod = parse_lastmod(child.text or "")
        if is_sitemap != (self.kind == "sitemapindex"):
            # A <url> in an index or a <sitemap> in a urlset: read as what the root says.
            is_sitemap = self.kind == "sitemapindex"
        return self._entry(loc, is_sitemap, lastmod)

    def _entry(self, text: str, is_sitemap: bool, lastmod: datetime | None) -> SitemapEntry | None:
        if self.bounded and self.entries >= MAX_ENTRIES:
            self.truncated = True
            self._done = True
            return None
        self.entries += 1
        if self.entries <= self.start_after:
            return None
        url = _usable_url(text)
        if url is None:
            self.skipped += 1
            return None
        if self.lastmod_after is not None and lastmod is not None and lastmod <= self.lastmod_after:
            self.skipped += 1
            return None
        return SitemapEntry(url, is_sitemap, lastmod, position=self.entries)
