"""What an output's objects hold: batch files (JSON Lines or CSV), their keys, the manifest.

Pure functions, so that the same rows always give the same bytes: a batch uploaded again
after a crash replaces its object with an identical one.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from scrapeq_queue.output_batches import (
    FINISHED_STATES,
    OutputFormat,
    OutputRow,
    UploadedBatch,
    batch_counts,
)

CONTENT_TYPES: Final[Mapping[OutputFormat, str]] = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
}
MANIFEST_NAME: Final = "manifest.json"
# The CSV's columns: a row's result is one JSON cell (its fields vary from page to page).
CSV_COLUMNS: Final = ("id", "url", "state", "finished_at", "error", "result")
# Bumped when a line's or the manifest's shape changes incompatibly.
FORMAT_VERSION: Final = 1


@dataclass(frozen=True)
class EncodedBatch:
    """A batch's object: its bytes, lines written, rows skipped (changesOnly), rows by state."""

    data: bytes
    lines: int
    skipped: int
    counts: Mapping[str, int]


def output_prefix(
    store_prefix: str, output_prefix: str, namespace: str, name: str, uid: str
) -> str:
    """The key prefix of one ScrapeJob's output: <store prefix>/<output prefix>/<ns>/<name>/<uid>
    (the uid keeps a re-created ScrapeJob of the same name apart)."""
    parts = [part.strip("/") for part in (store_prefix, output_prefix) if part.strip("/")]
    return "/".join([*parts, namespace, name, uid])


def batch_key(prefix: str, sequence: int, format: OutputFormat) -> str:
    """The key of batch `sequence`: the same on every upload of that batch."""
    return f"{prefix}/batch-{sequence:06d}.{format}"


def manifest_key(prefix: str) -> str:
    return f"{prefix}/{MANIFEST_NAME}"


def is_unchanged(result: Any) -> bool:
    """True for a result that says its page did not change since the last crawl."""
    return isinstance(result, dict) and result.get("changed") is False


def is_change(row: OutputRow) -> bool:
    """Whether `changesOnly` output writes the row: a page, unless its result says it did not
    change (a failed page is news too); never a source row (a sitemap or URL list is not a
    page of the crawl)."""
    return not row.source and not is_unchanged(row.result)


def row_document(row: OutputRow) -> dict[str, Any]:
    """One row as a JSON line: id, url, state, result (a result kept in the bucket is its
    pointer, `result_object`, as the row holds it), error and finished time (ISO 8601)."""
    return {
        "id": row.id,
        "url": row.url,
        "state": row.state,
        "result": row.result,
        "error": row.error,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def encode_batch(
    rows: Sequence[OutputRow], format: OutputFormat, *, changes_only: bool
) -> EncodedBatch:
    """The object of a batch of `rows` (in the order given). With `changes_only`, rows that are
    no change (`is_change`) are counted as skipped and not written."""
    written = [row for row in rows if not changes_only or is_change(row)]
    counts = batch_counts(rows)
    if format == "jsonl":
        text = "".join(
            json.dumps(row_document(row), ensure_ascii=False, sort_keys=True) + "\n"
            for row in written
        )
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in written:
            document = row_document(row)
            writer.writerow(
                [
                    document["id"],
                    document["url"],
                    document["state"],
                    document["finished_at"] or "",
                    document["error"] or "",
                    ""
                    if row.result is None
                    else json.dumps(row.result, ensure_ascii=False, sort_keys=True),
                ]
            )
        text = buffer.getvalue()
    return EncodedBatch(
        data=text.encode("utf-8"),
        lines=len(written),
        skipped=len(rows) - len(written),
        counts=counts,
    )


def manifest_document(
    *,
    namespace: str,
    name: str,
    uid: str,
    bucket: str,
    prefix: str,
    format: OutputFormat,
    batches: Sequence[UploadedBatch],
) -> dict[str, Any]:
    """The manifest of a finished output: counts by state (they add up to the job's rows),
    lines written and rows skipped, and every batch's key, row count, byte size and SHA-256."""
    counts = dict.fromkeys(FINISHED_STATES, 0)
    for batch in batches:
        for state, count in batch.counts.items():
            counts[state] = counts.get(state, 0) + count
    return {
        "version": FORMAT_VERSION,
        "scrapeJob": {"namespace": namespace, "name": name, "uid": uid},
        "bucket": bucket,
        "prefix": prefix,
        "format": format,
        "rows": sum(batch.rows for batch in batches),
        "lines": sum(batch.lines for batch in batches),
        "skipped": sum(batch.skipped for batch in batches),
        "counts": counts,
        "batches": [
            {
                "sequence": batch.sequence,
                "key": batch.key,
                "rows": batch.rows,
                "lines": batch.lines,
                "bytes": batch.bytes,
                "sha256": batch.sha256,
            }
            for batch in batches
        ],
    }


def encode_manifest(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")
