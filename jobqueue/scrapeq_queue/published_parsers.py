"""Which parsers the workers of a queue have: each worker publishes the parsers its image
registered, for every queue it serves; the operator reads them before it queues a ScrapeJob
that names a parser (docs/parsers.md, "Publication").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

# A worker's publication is kept this long after it was last refreshed: a pool scaled to zero
# for days still says what its image had; a week without a worker is an abandoned row.
PUBLICATION_KEPT_SECONDS: Final = 7 * 24 * 3600.0


@dataclass(frozen=True)
class QueueParsers:
    """What the workers of one queue published: how many did (0: none ever did, so nobody
    can tell what the queue's pools have) and the union of their parsers."""

    workers: int
    parsers: frozenset[str]


@translate_database_errors
async def publish_parsers(
    connection: psycopg.AsyncConnection[Any],
    worker_id: str,
    queues: Collection[str],
    parsers: Collection[str],
) -> None:
    """Record that `worker_id` serves `queues` with `parsers` (replacing what it said before),
    and delete the publications no worker refreshed for PUBLICATION_KEPT_SECONDS."""
    await connection.execute(
        statements.PARSERS_PUBLISH,
        {
            "worker_id": worker_id,
            "queues": sorted(set(queues)),
            "parsers": sorted(set(parsers)),
            "keep_seconds": PUBLICATION_KEPT_SECONDS,
        },
    )


@translate_database_errors
async def queue_parsers(connection: psycopg.AsyncConnection[Any], queue: str) -> QueueParsers:
    """What the workers of `queue` published."""
    cursor = await connection.execute(statements.PARSERS_OF_QUEUE, {"queue": queue})
    row = await cursor.fetchone()
    assert row is not None
    return QueueParsers(int(row[0]), frozenset(row[1]))
