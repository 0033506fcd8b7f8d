"""The parsers workers publish per queue, on a real PostgreSQL: a republication replaces a
worker's list, a queue's parsers are the union of its workers', a queue no worker ever served
says so, and week-old publications of other workers go (docs/parsers.md, "Publication")."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)


async def test_a_queues_parsers_are_the_union_of_what_its_workers_last_published(
    async_connection: Connection,
) -> None:
    await queue.publish_parsers(async_connection, "pod-a", ["shop"], ["shop.list", "old"])
    await queue.publish_parsers(async_connection, "pod-a", ["shop", "news"], ["shop.list"])
    await queue.publish_parsers(async_connection, "pod-b", ["shop"], ["shop.product"])
    await queue.publish_parsers(async_connection, "pod-c", ["plain"], [])

    assert await queue.queue_parsers(async_connection, "shop") == queue.QueueParsers(
        2, frozenset({"shop.list", "shop.product"})
    )
    assert await queue.queue_parsers(async_connection, "news") == queue.QueueParsers(
        1, frozenset({"shop.list"})
    )
    assert await queue.queue_parsers(async_connection, "plain") == queue.QueueParsers(
        1, frozenset()
    )
    assert await queue.queue_parsers(async_connection, "never") == queue.QueueParsers(
        0, frozenset()
    )


async def test_publications_nobody_refreshed_for_a_week_are_deleted_by_the_next_one(
    async_connection: Connection,
) -> None:
    await queue.publish_parsers(async_connection, "gone", ["shop"], ["shop.old"])
    await queue.publish_parsers(async_connection, "stale-self", ["shop"], ["shop.self"])
    await async_connection.execute(
        "UPDATE scrapeq_worker_parsers SET published_at = now() - interval '8 days'"
    )

    await queue.publish_parsers(async_connection, "stale-self", ["shop"], ["shop.self"])

    assert await queue.queue_parsers(async_connection, "shop") == queue.QueueParsers(
        1, frozenset({"shop.self"})
    )
