"""Reading the rows a claim returns so that no value in them can raise.

A claim commits before its rows are read, so a value the client cannot load would strand every
row of the batch as `processing` until its lease expired, and the next claimer would stumble on
it again. The claim's cursor therefore loads values its own way: the payload under the bounds
of `payload.load_payload`, paired with the key of its text (`load_payload_and_key`; a payload
out of bounds becomes an `UnreadablePayload`, which the claim fails as `invalid_payload`), and
timestamps PostgreSQL can hold but Python cannot
(`-infinity`, years before 1 or after 9999) as the nearest datetime Python has.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import psycopg
from psycopg.abc import AdaptContext
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.json import set_json_loads

from scrapeq_queue.payload import load_payload_and_key

EARLIEST: datetime = datetime.min.replace(tzinfo=UTC)
LATEST: datetime = datetime.max.replace(tzinfo=UTC)


# The loaders psycopg uses by default (its C implementation where installed): the bounded
# loaders below call them and only handle what they refuse, so a claim's rows load at C speed.
_TIMESTAMPTZ_OID: Final = psycopg.adapters.types["timestamptz"].oid
_TEXT_LOADER: Final = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
_BINARY_LOADER: Final = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.BINARY)


class _BoundedTimestamptzLoader(Loader):
    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        assert _TEXT_LOADER is not None
        self._load = _TEXT_LOADER(oid, context).load

    def load(self, data: Any) -> datetime:
        try:
            value: datetime = self._load(data)
        except psycopg.DataError:
            text = bytes(data)
            return EARLIEST if text.startswith(b"-") or text.endswith(b"BC") else LATEST
        return value


class _BoundedTimestamptzBinaryLoader(Loader):
    format = Format.BINARY

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        assert _BINARY_LOADER is not None
        self._load = _BINARY_LOADER(oid, context).load

    def load(self, data: Any) -> datetime:
        try:
            value: datetime = self._load(data)
        except psycopg.DataError:
            return EARLIEST if int.from_bytes(bytes(data), "big", signed=True) < 0 else LATEST
        return value


def load_claimed_rows_safely(cursor: psycopg.AsyncCursor[Any]) -> None:
    """Make `cursor` load jsonb as load_payload_and_key's (value, key) pair (NULL stays None),
    and out-of-range timestamps clamped."""
    set_json_loads(load_payload_and_key, cursor)
    cursor.adapters.register_loader("timestamptz", _BoundedTimestamptzLoader)
    cursor.adapters.register_loader("timestamptz", _BoundedTimestamptzBinaryLoader)
