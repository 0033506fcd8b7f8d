"""URL lists in the worker pool's object store as a ScrapeJob's source, on a real S3 server
(versitygw) and a real PostgreSQL: streamed in batches, each URL queued once."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_queue.payload import OBJECT_SOURCE_URL
from scrapeq_queue.rows import NewJob
from scrapeq_worker import object_store
from scrapeq_worker.errors import PermanentFailure
from scrapeq_worker.http_engine import HttpEngine
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard
from scrapeq_worker.object_store import ObjectStore
from scrapeq_worker.url_sources import SourceExpansion

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET

from .conftest import Connection
from .test_sitemap_sources import OWNER, PAGE_OPTIONS, InterruptedRows, claim, owner_rows, page_rows

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.timeout(300)]


def store_for(server: LocalS3Server) -> ObjectStore:
    return ObjectStore(server.store_config(S3_BUCKET))


async def enqueue_list(connection: Connection, key: str, list_format: str) -> int:
    url = OBJECT_SOURCE_URL + key
    (source_id,) = await queue.enqueue_many(
        connection,
        [NewJob(url=url, dedup_key=f"sitemap:{url}")],
        owner=OWNER,
        payload={**PAGE_OPTIONS, "source": {"kind": "object", "key": key, "format": list_format}},
    )
    return source_id


async def expand(connection: Connection, store: ObjectStore) -> Any:
    async with HttpEngine(NetworkGuard()) as http:
        expansion = SourceExpansion(
            http, InterruptedRows(connection), object_store=store, batch_entries=5000
        )
        return await expansion.expand(
            await claim(connection), options_from_payload(PAGE_OPTIONS, default_timeout_seconds=20)
        )


async def test_a_gzip_url_list_of_thirty_thousand_lines_is_queued_once_each(
    s3_server: LocalS3Server, connection: Connection
) -> None:
    store = store_for(s3_server)
    urls = [f"https://shop.test/product/{n}" for n in range(30_000)]
    text = "# the catalogue\n" + "\n".join([*urls, urls[0], "not a url"]) + "\n"
    await store.put("lists/catalogue.txt.gz", gzip.compress(text.encode()), content_type="x")
    await enqueue_list(connection, "lists/catalogue.txt.gz", "lines")

    scraped = await expand(connection, store)

    assert sorted(page_rows(await owner_rows(connection))) == sorted(urls)
    assert scraped.result["source"] == {
        "kind": "lines",
        "entries": 30_002,
        "enqueued": 30_000,
        "sitemaps": 0,
        "skipped": 1,
        "truncated": False,
        "resumedAfter": 0,
    }


async def test_a_json_lines_list_takes_strings_and_url_fields_and_skips_the_rest(
    s3_server: LocalS3Server, connection: Connection
) -> None:
    store = store_for(s3_server)
    lines = [
        json.dumps("https://shop.test/a"),
        json.dumps({"url": "https://shop.test/b", "sku": 2}),
        json.dumps({"sku": 3}),
        "{not json",
    ]
    await store.put("lists/items.jsonl", "\n".join(lines).encode(), content_type="x")
    await enqueue_list(connection, "lists/items.jsonl", "jsonl")

    scraped = await expand(connection, store)

    assert sorted(page_rows(await owner_rows(connection))) == [
        "https://shop.test/a",
        "https://shop.test/b",
    ]
    assert scraped.result["source"]["skipped"] == 2


async def test_a_missing_list_fails_for_good_with_its_key(
    s3_server: LocalS3Server, connection: Connection
) -> None:
    await enqueue_list(connection, "lists/nowhere.txt", "lines")
    with pytest.raises(PermanentFailure, match=r"no object lists/nowhere\.txt") as raised:
        await expand(connection, store_for(s3_server))
    assert raised.value.reason == "object_not_found"


async def test_a_list_larger_than_one_range_is_read_in_ranges_whole_and_in_order(
    s3_server: LocalS3Server, connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranges of 1,000 bytes: a range boundary falls inside lines and inside the gzip stream.
    monkeypatch.setattr(object_store, "STREAM_RANGE_BYTES", 1000)
    store = store_for(s3_server)
    urls = [f"https://shop.test/item/{n}" for n in range(20_000)]
    body = gzip.compress(("\n".join(urls) + "\n").encode())
    assert len(body) > 20 * 1000
    await store.put("lists/ranged.txt.gz", body, content_type="x")
    await enqueue_list(connection, "lists/ranged.txt.gz", "lines")

    scraped = await expand(connection, store)

    assert page_rows(await owner_rows(connection)) == urls
    assert scraped.result["source"]["enqueued"] == 20_000
