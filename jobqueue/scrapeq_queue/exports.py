"""Export: streaming the results of completed rows out of the database in bounded memory."""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TextIO

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import database_errors_translated, translate_database_errors
from scrapeq_queue.rows import ExportRow

# Rows fetched from the server-side cursor per round trip: the client never holds more than
# this many results at once, whatever the size of the export.
EXPORT_BATCH_ROWS: Final = 500

# CSV needs its columns before the first row: they are url, status, finished_at and then every
# field key seen in the first CSV_HEADER_SAMPLE_ROWS rows, in order of first appearance. Keys
# that only appear later are left out of the CSV (JSON Lines keeps everything).
CSV_HEADER_SAMPLE_ROWS: Final = 100

EXPORT_FORMATS: Final = ("jsonl", "csv")

_FIXED_COLUMNS: Final = ("url", "status", "finished_at")


@dataclass(frozen=True)
class NamedOwner:
    """One ScrapeJob object (uid) that had rows under a namespace/name."""

    uid: str
    # When its first row was created: the later, the more recent the ScrapeJob.
    first_row_at: datetime
    completed: int


@translate_database_errors
async def owners_named(
    connection: psycopg.AsyncConnection[Any], *, namespace: str, name: str
) -> list[NamedOwner]:
    """Every ScrapeJob uid with rows under namespace/name, the most recently created first.

    Needs no Kubernetes access: the rows carry their owner. A name reused after a delete gives
    several uids; none means no ScrapeJob of that name ever had rows (or they were pruned).
    """
    cursor = await connection.execute(
        statements.OWNERS_BY_NAME, {"owner_namespace": namespace, "owner_name": name}
    )
    return [
        NamedOwner(uid=uid, first_row_at=first_row_at, completed=int(completed))
        for uid, first_row_at, completed in await cursor.fetchall()
    ]


@translate_database_errors
async def owner_namespaces_named(
    connection: psycopg.AsyncConnection[Any], *, name: str
) -> list[str]:
    """The namespaces in which a ScrapeJob called `name` has rows, sorted."""
    cursor = await connection.execute(statements.OWNER_NAMESPACES_BY_NAME, {"owner_name": name})
    return [str(row[0]) for row in await cursor.fetchall()]


def result_fields(result: Any) -> dict[str, Any]:
    """The extracted fields of a stored result.

    A worker's result keeps them under `fields`; a result written by someone else that is a
    flat JSON object (no `fields` object) is taken as the fields itself; anything else has none.
    """
    if not isinstance(result, dict):
        return {}
    fields = result.get("fields")
    if isinstance(fields, dict):
        return fields
    if "fields" in result:
        return {}
    return result


async def export_results(
    connection: psycopg.AsyncConnection[Any],
    *,
    owner_namespace: str,
    owner_name: str,
    owner_uid: str | None = None,
    queue: str | None = None,
    batch_rows: int = EXPORT_BATCH_ROWS,
) -> AsyncIterator[ExportRow]:
    """Yield the completed rows of one owner (ScrapeJob namespace/name), in id order.

    With `owner_uid`, only that ScrapeJob object's rows (see `owners_named`); without it, the
    rows of every ScrapeJob that ever had this namespace/name.

    Reads through a named (server-side) cursor inside one transaction, `batch_rows` at a time,
    so memory stays bounded by one batch; the rows are a consistent snapshot of the moment the
    export started. The connection is busy until the iteration ends or is closed.
    """
    with database_errors_translated():
        async with (
            connection.transaction(),
            connection.cursor(name="scrapeq_export") as cursor,
        ):
            cursor.itersize = batch_rows
            await cursor.execute(
                statements.JOBS_EXPORT_COMPLETED,
                {
                    "owner_namespace": owner_namespace,
                    "owner_name": owner_name,
                    "owner_uid": owner_uid,
                    "queue": queue,
                },
            )
            async for url, status, finished_at, result in cursor:
                yield ExportRow(
                    url=url,
                    status=status,
                    finished_at=finished_at,
                    fields=result_fields(result),
                )


def export_document(row: ExportRow) -> dict[str, Any]:
    """The JSON object exported for one page: url, status, finished_at (ISO 8601), fields."""
    return {
        "url": row.url,
        "status": row.status,
        "finished_at": row.finished_at.isoformat(),
        "fields": row.fields,
    }


async def write_jsonl(rows: AsyncIterator[ExportRow], output: TextIO) -> int:
    """Write one JSON object per row and line (see `export_document`); return the row count."""
    count = 0
    async for row in rows:
        output.write(json.dumps(export_document(row), ensure_ascii=False) + "\n")
        count += 1
    return count


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


async def write_csv(
    rows: AsyncIterator[ExportRow],
    output: TextIO,
    *,
    header_sample_rows: int = CSV_HEADER_SAMPLE_ROWS,
) -> int:
    """Write a CSV with a header row; return the number of data rows.

    Columns: url, status, finished_at, then the field keys of the first `header_sample_rows`
    rows in order of first appearance (later-only keys are dropped). Strings are written as
    they are, missing and null values as empty cells, anything else as JSON.
    """
    sample: list[ExportRow] = []
    iterator = aiter(rows)
    async for row in iterator:
        sample.append(row)
        if len(sample) >= header_sample_rows:
            break
    field_names: dict[str, None] = {}
    for row in sample:
        field_names.update(dict.fromkeys(row.fields))
    columns = [*_FIXED_COLUMNS, *(name for name in field_names if name not in _FIXED_COLUMNS)]
    writer = csv.writer(output, lineterminator="\n")
    writer.writerow(columns)
    extra = columns[len(_FIXED_COLUMNS) :]

    def write(row: ExportRow) -> None:
        writer.writerow(
            [row.url, row.status, row.finished_at.isoformat()]
            + [_csv_cell(row.fields.get(name)) for name in extra]
        )

    for row in sample:
        write(row)
    count = len(sample)
    if count >= header_sample_rows:
        async for row in iterator:
            write(row)
            count += 1
    return count
