"""Reading the rows a claim returns so that no value in them can raise.

A claim commits before its rows are read, so a value the client cannot load would strand every
row of the batch as `processing` until its lease expired, and the next claimer would stumble on
it again. The claim's cursor therefore loads values its own way: the payload under the bounds
of `payload.load_payload` (a payload out of bounds becomes an `UnreadablePayload`, which the
claim fails as `invalid_payload`), and timestamps PostgreSQL can hold but Python cannot
(`-infinity`, years before 1 or after 9999) as the nearest datetime Python has.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg.types.json import set_json_loads

from scrapeq_queue.payload import load_payload

EARLIEST: datetime = datetime.min.replace(tzinfo=UTC)
LATEST: datetime = datetime.max.replace(tzinfo=UTC)


class _BoundedTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            text = bytes(data)
            return EARLIEST if text.startswith(b"-") or text.endswith(b"BC") else LATEST


class _BoundedTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            return EARLIEST if int.from_bytes(bytes(data), "big", signed=True) < 0 else LATEST


def load_claimed_rows_safely(cursor: psycopg.AsyncCursor[Any]) -> None:
    """Make `cursor` load jsonb with load_payload and out-of-range timestamps clamped."""
    set_json_loads(load_payload, cursor)
    cursor.adapters.register_loader("timestamptz", _BoundedTimestamptzLoader)
    cursor.adapters.register_loader("timestamptz", _BoundedTimestamptzBinaryLoader)
