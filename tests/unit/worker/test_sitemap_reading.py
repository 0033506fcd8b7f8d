"""Sitemaps, sitemap indexes, robots.txt and plain URL lists read as streams of entries, and
the documents that are refused (XML bombs, gzip bombs, HTML, broken archives)."""

from __future__ import annotations

import gzip
import resource
import zlib
from datetime import UTC, datetime

import pytest
from scrapeq_worker.errors import PermanentFailure
from scrapeq_worker.sitemaps import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES,
    SitemapEntry,
    SitemapReader,
    parse_lastmod,
)

pytestmark = pytest.mark.timeout(60)

NAMESPACE = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: str) -> bytes:
    declaration = '<?xml version="1.0" encoding="UTF-8"?>\n'
    return f"{declaration}<urlset {NAMESPACE}>{''.join(entries)}</urlset>".encode()


def url(loc: str, lastmod: str | None = None) -> str:
    modified = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    return f"<url><loc>{loc}</loc>{modified}<priority>0.5</priority></url>"


def read(
    document: bytes, *, chunk: int = 7, **options: object
) -> tuple[SitemapReader, list[SitemapEntry]]:
    """Feed `document` in chunks of `chunk` bytes (small: every boundary gets crossed)."""
    reader = SitemapReader(**options)  # type: ignore[arg-type]
    found: list[SitemapEntry] = []
    for start in range(0, len(document), chunk):
        found += reader.feed(document[start : start + chunk])
    found += reader.finish()
    return reader, found


def test_a_urlset_yields_its_pages_with_their_lastmod() -> None:
    # lastmod is read where a filter needs it.
    reader, found = read(
        urlset(url("https://shop.test/a", "2026-03-01"), url("https://shop.test/b")),
        lastmod_after=datetime(2000, 1, 1, tzinfo=UTC),
    )
    assert found == [
        SitemapEntry("https://shop.test/a", False, datetime(2026, 3, 1, tzinfo=UTC), position=1),
        SitemapEntry("https://shop.test/b", False, position=2),
    ]
    assert reader.kind == "urlset"
    assert (reader.entries, reader.skipped, reader.truncated) == (2, 0, False)


def test_a_sitemap_index_yields_sitemaps() -> None:
    document = (
        f"<sitemapindex {NAMESPACE}><sitemap><loc>https://shop.test/s1.xml.gz</loc></sitemap>"
        "<sitemap><loc>https://shop.test/s2.xml</loc><lastmod>2026-01-01T10:00:00+01:00</lastmod>"
        "</sitemap></sitemapindex>"
    ).encode()
    reader, found = read(document)
    assert [(entry.url, entry.is_sitemap) for entry in found] == [
        ("https://shop.test/s1.xml.gz", True),
        ("https://shop.test/s2.xml", True),
    ]
    assert reader.kind == "sitemapindex"


def test_gzip_is_recognised_by_its_magic_bytes_whatever_the_name() -> None:
    _, found = read(gzip.compress(urlset(url("https://shop.test/a"))), chunk=5)
    assert [entry.url for entry in found] == ["https://shop.test/a"]


def test_entries_modified_at_or_before_lastmod_after_are_skipped_and_undated_ones_kept() -> None:
    reader, found = read(
        urlset(
            url("https://shop.test/old", "2026-01-01"),
            url("https://shop.test/same", "2026-02-01T00:00:00Z"),
            url("https://shop.test/new", "2026-02-01T00:00:01Z"),
            url("https://shop.test/undated"),
        ),
        lastmod_after=datetime(2026, 2, 1, tzinfo=UTC),
    )
    assert [entry.url for entry in found] == ["https://shop.test/new", "https://shop.test/undated"]
    assert reader.skipped == 2


def test_a_plain_text_sitemap_and_robots_txt_sitemap_lines_are_read() -> None:
    _, pages = read(b"# a comment\nhttps://shop.test/a\n\nnot a url\nhttps://shop.test/b")
    assert [entry.url for entry in pages] == ["https://shop.test/a", "https://shop.test/b"]
    robots = b"User-agent: *\nDisallow: /cart\nSitemap: https://shop.test/s.xml\nsitemap:https://shop.test/t.xml\r\n"
    _, sitemaps = read(robots, robots=True)
    assert [(entry.url, entry.is_sitemap) for entry in sitemaps] == [
        ("https://shop.test/s.xml", True),
        ("https://shop.test/t.xml", True),
    ]


def test_entries_that_are_not_http_urls_are_skipped_and_counted() -> None:
    reader, found = read(
        urlset(url("file:///etc/passwd"), url("javascript:alert(1)"), url("https://shop.test/a"))
    )
    assert [entry.url for entry in found] == ["https://shop.test/a"]
    assert reader.skipped == 2


def test_a_sitemap_over_the_protocols_entry_bound_is_cut_there() -> None:
    document = urlset(*(url(f"https://shop.test/{n}") for n in range(MAX_ENTRIES + 10)))
    reader, found = read(document, chunk=64 * 1024)
    assert len(found) == MAX_ENTRIES
    assert reader.truncated


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (
            b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 '
            b'"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]><urlset><url><loc>&lol2;'
            b"</loc></url></urlset>",
            "declares DOCTYPE",
        ),
        (
            b'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "http://169.254.169.254/x.dtd">'
            b"<urlset/>",
            "declares DOCTYPE",
        ),
        (b"<!doctype html><html><body>Not found</body></html>", "not well-formed XML"),
        (
            b"<html><body><a href='https://shop.test/a'>a</a></body></html>",
            "root element is 'html'",
        ),
        (b"<urlset><url><loc>https://shop.test/a</loc></url>", "not well-formed XML"),
        (b"\x1f\x8b\x08\x00garbage that is not deflate", "not a valid gzip archive"),
        (gzip.compress(urlset(url("https://shop.test/a")))[:-12], "cut short"),
        (b"", "empty"),
        (b"Hello, this is not a sitemap\nhttps://shop.test/a", "neither XML nor a list of URLs"),
    ],
)
def test_a_document_that_is_not_a_sitemap_is_refused_with_its_reason(
    document: bytes, reason: str
) -> None:
    with pytest.raises(PermanentFailure, match=reason) as raised:
        read(document)
    assert raised.value.reason == "invalid_sitemap"


def gzip_bomb(start: bytes, zeros: int) -> bytes:
    """`start` then `zeros` zero bytes, gzip-compressed without holding them uncompressed."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [compressor.compress(start)]
    block = b"0" * (1024 * 1024)
    parts += [compressor.compress(block) for _ in range(zeros // len(block))]
    parts.append(compressor.flush())
    return b"".join(parts)


def test_a_gzip_bomb_is_read_only_up_to_the_protocols_size_bound() -> None:
    # 256 MB of zeros after a valid start, 250 KB compressed: decompression stops at 50 MB.
    start = f"<urlset {NAMESPACE}>{url('https://shop.test/a')}<!--".encode()
    bomb = gzip_bomb(start, 256 * 1024 * 1024)
    assert len(bomb) < 1024 * 1024
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reader, found = read(bomb, chunk=64 * 1024)
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert [entry.url for entry in found] == ["https://shop.test/a"]
    assert reader.truncated
    assert reader.bytes_read == MAX_DOCUMENT_BYTES
    # Never the whole bomb in memory (ru_maxrss is in KiB).
    assert peak_after - peak_before < 100 * 1024


def test_a_reader_that_resumes_skips_the_entries_already_handled_without_counting_them() -> None:
    document = urlset(*(url(f"https://shop.test/{n}") for n in range(10)))
    reader, found = read(document, start_after=6)
    assert [entry.url for entry in found] == [f"https://shop.test/{n}" for n in range(6, 10)]
    assert [entry.position for entry in found] == [7, 8, 9, 10]
    assert (reader.entries, reader.skipped) == (10, 0)


def test_lastmod_accepts_w3c_dates_and_date_times_and_refuses_the_rest() -> None:
    assert parse_lastmod("2026-05") == datetime(2026, 5, 1, tzinfo=UTC)
    assert parse_lastmod("2026-05-02T10:30Z") == datetime(2026, 5, 2, 10, 30, tzinfo=UTC)
    assert parse_lastmod("yesterday") is None
    assert parse_lastmod("2026-13-01") is None
