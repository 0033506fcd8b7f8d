"""How exported rows become JSON Lines and CSV: the column rule and the cell encoding."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

import scrapeq_queue as queue

FINISHED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def rows_of(fields: Iterable[dict[str, Any]]) -> AsyncIterator[queue.ExportRow]:
    for number, values in enumerate(fields):
        yield queue.ExportRow(
            url=f"https://e.test/{number}", status="completed", finished_at=FINISHED, fields=values
        )


def test_result_fields_come_from_fields_or_a_flat_object() -> None:
    assert queue.result_fields({"status": 200, "fields": {"a": 1}}) == {"a": 1}
    assert queue.result_fields({"a": 1}) == {"a": 1}
    assert queue.result_fields({"fields": None}) == {}
    assert queue.result_fields(None) == {}
    assert queue.result_fields([1, 2]) == {}


async def test_csv_columns_are_the_keys_of_the_sampled_rows_and_later_keys_are_dropped() -> None:
    output = io.StringIO()
    count = await queue.write_csv(
        rows_of([{"a": 1}, {"b": "x", "a": None}, {"c": [1], "a": {"k": True}}]),
        output,
        header_sample_rows=2,
    )
    assert count == 3
    assert output.getvalue() == (
        "url,status,finished_at,a,b\n"
        "https://e.test/0,completed,2026-01-02T03:04:05+00:00,1,\n"
        "https://e.test/1,completed,2026-01-02T03:04:05+00:00,,x\n"
        'https://e.test/2,completed,2026-01-02T03:04:05+00:00,"{""k"": true}",\n'
    )


async def test_jsonl_keeps_every_field_of_every_row() -> None:
    output = io.StringIO()
    assert await queue.write_jsonl(rows_of([{"a": 1}, {"c": "é"}]), output) == 2
    assert output.getvalue() == (
        '{"url": "https://e.test/0", "status": "completed",'
        ' "finished_at": "2026-01-02T03:04:05+00:00", "fields": {"a": 1}}\n'
        '{"url": "https://e.test/1", "status": "completed",'
        ' "finished_at": "2026-01-02T03:04:05+00:00", "fields": {"c": "é"}}\n'
    )
