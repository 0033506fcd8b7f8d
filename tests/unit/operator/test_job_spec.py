"""Reading a ScrapeJob spec: where its URLs come from, urlsFrom lists, and the row payload."""

from __future__ import annotations

import gzip
from datetime import timedelta

import pytest
from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.job_spec import (
    MAX_DECOMPRESSED_BYTES,
    ConfigMapKey,
    SitemapSource,
    decode_url_list,
    first_url,
    parse_url_list,
    row_options,
    url_source,
)


def test_a_single_url_is_a_list_of_one() -> None:
    assert url_source({"url": "https://a.example/"}) == ["https://a.example/"]


def test_inline_urls_keep_their_order_and_collapse_duplicates() -> None:
    spec = {"urls": ["https://b.example/", "https://a.example/", "https://b.example/"]}
    assert url_source(spec) == ["https://b.example/", "https://a.example/"]


def test_urls_from_names_the_configmap_key() -> None:
    spec = {"urlsFrom": {"configMapKeyRef": {"name": "lists", "key": "urls.txt"}}}
    assert url_source(spec) == ConfigMapKey(name="lists", key="urls.txt")
    assert first_url(spec) is None


def test_a_url_list_skips_blank_lines_and_comments() -> None:
    text = "# shop\nhttps://a.example/1\n\n  http://a.example/2  \nhttps://a.example/1\n"
    urls = parse_url_list(text, max_urls=10, where="ConfigMap l key k")
    assert urls == ["https://a.example/1", "http://a.example/2"]


def test_a_url_list_with_bad_lines_names_them() -> None:
    text = "https://ok.example/\nftp://files.example/x\nnot a url\n"
    with pytest.raises(JobNotRunnableError) as caught:
        parse_url_list(text, max_urls=10, where="ConfigMap l key k")
    assert caught.value.reason == "InvalidURLList"
    assert "line 2: 'ftp://files.example/x'" in caught.value.message
    assert "line 3" in caught.value.message


def test_an_empty_url_list_cannot_run_until_its_configmap_is_fixed() -> None:
    with pytest.raises(JobNotRunnableError) as caught:
        parse_url_list("# nothing\n\n", max_urls=10, where="ConfigMap l key k")
    assert caught.value.reason == "NoURLs"
    assert not caught.value.permanent  # a ConfigMap can change: the job is retried


def test_a_url_list_over_the_limit_cannot_run_until_its_configmap_is_fixed() -> None:
    text = "\n".join(f"https://e.example/{n}" for n in range(11))
    with pytest.raises(JobNotRunnableError) as caught:
        parse_url_list(text, max_urls=10, where="ConfigMap l key k")
    assert caught.value.reason == "TooManyURLs"
    assert not caught.value.permanent


def test_a_spec_without_any_url_source_fails_for_good() -> None:
    with pytest.raises(JobNotRunnableError) as caught:
        url_source({"parserType": "html"})
    assert (caught.value.reason, caught.value.permanent) == ("NoURLs", True)


def test_row_options_carry_the_scrape_settings_in_the_payload() -> None:
    spec = {
        "url": "https://a.example/",
        "render": False,
        "waitUntil": "load",
        "timeoutSeconds": 20,
        "extract": {"title": {"selector": "h1"}},
        "retries": {"limit": 2, "backoffSeconds": 7},
        "queue": "fast",
        "priority": 5,
        "parser": "product",
        "payload": {"headers": {"X-Trace": "1"}, "render": True},
    }
    options = row_options(spec)
    assert (options["queue"], options["priority"], options["parser_type"]) == (
        "fast",
        5,
        "product",
    )
    assert (options["max_retries"], options["backoff_seconds"]) == (2, 7.0)
    assert options["payload"] == {
        "headers": {"X-Trace": "1"},
        "render": False,
        "waitUntil": "load",
        "timeoutSeconds": 20,
        "extract": {"title": {"selector": "h1"}},
        "parser": "product",
    }


def test_the_default_parser_leaves_the_payload_without_a_parser_option() -> None:
    for spec in ({"url": "https://a.example/"}, {"url": "https://a.example/", "parser": "default"}):
        options = row_options(spec)
        assert options["parser_type"] == "default"
        assert "parser" not in options["payload"]


def test_row_payload_passes_the_queue_payload_validation() -> None:
    from scrapeq_queue.payload import validate_payload

    spec = {
        "urls": ["https://a.example/"],
        "render": True,
        "waitUntil": "networkidle2",
        "waitFor": ".product",
        "timeoutSeconds": 30,
        "extract": {"price": {"selector": ".price", "attribute": "content", "all": False}},
        "follow": {"selector": "a.product", "maxDepth": 1, "maxPages": 500},
        "blockResources": ["image", "font"],
    }
    assert validate_payload(row_options(spec)["payload"]) == []


def test_an_empty_block_resources_list_reaches_the_row_to_override_the_pool() -> None:
    spec = {"url": "https://a.example/", "blockResources": []}
    assert row_options(spec)["payload"] == {"blockResources": []}


def test_a_gzip_url_list_is_decompressed() -> None:
    text = "\n".join(f"https://e.example/{number}" for number in range(1000))
    assert decode_url_list(gzip.compress(text.encode()), where="w") == text


def test_plain_binary_data_is_read_as_utf8() -> None:
    assert decode_url_list(b"https://a.example/\n", where="w") == "https://a.example/\n"


def test_a_broken_archive_cannot_run() -> None:
    with pytest.raises(JobNotRunnableError) as caught:
        decode_url_list(b"\x1f\x8b not really gzip", where="ConfigMap l key k.gz")
    assert caught.value.reason == "InvalidURLList"
    assert "ConfigMap l key k.gz" in caught.value.message


def test_an_archive_that_decompresses_too_far_cannot_run() -> None:
    bomb = gzip.compress(b"\n" * (MAX_DECOMPRESSED_BYTES + 1))
    with pytest.raises(JobNotRunnableError, match="decompresses to more than"):
        decode_url_list(bomb, where="w")


def test_a_keep_list_reaches_the_row_as_its_payload_keep() -> None:
    from scrapeq_queue.payload import validate_payload

    spec = {"url": "https://a.example/", "keep": ["html", "screenshot"]}
    payload = row_options(spec)["payload"]
    assert payload == {"keep": ["html", "screenshot"]}
    assert validate_payload(payload) == []


def test_spec_retention_becomes_the_rows_retain_for_and_its_absence_none() -> None:
    spec = {"url": "https://a.example/", "retention": {"days": 1.5}}
    assert row_options(spec)["retain_for"] == timedelta(hours=36)
    assert row_options({"url": "https://a.example/"})["retain_for"] is None


@pytest.mark.timeout(10)
def test_a_sitemap_a_sites_robots_txt_or_an_object_list_is_one_source_row() -> None:
    sitemap = url_source(
        {
            "urlsFrom": {
                "sitemap": "https://Shop.example/s.xml",
                "lastmodAfter": "2026-01-01T00:00:00Z",
            }
        }
    )
    assert sitemap == SitemapSource("https://Shop.example/s.xml", "sitemap", "2026-01-01T00:00:00Z")
    assert isinstance(sitemap, SitemapSource)
    assert sitemap.dedup_key == "sitemap:https://shop.example/s.xml"
    assert sitemap.payload() == {"kind": "sitemap", "lastmodAfter": "2026-01-01T00:00:00Z"}
    robots = url_source({"urlsFrom": {"robots": "https://shop.example/catalogue?x=1"}})
    assert robots == SitemapSource("https://shop.example/robots.txt", "robots")
    listed = url_source({"urlsFrom": {"object": {"key": "lists/a.jsonl", "format": "jsonl"}}})
    assert isinstance(listed, SitemapSource)
    assert listed.url == "object://source/lists/a.jsonl"
    assert listed.payload() == {"kind": "object", "key": "lists/a.jsonl", "format": "jsonl"}
