"""Output batches, keys and manifests as bytes (output_encoding.py), spec.output as settings
(output_spec.py), and when the uploader cuts a batch."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest
from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.output_encoding import (
    batch_key,
    encode_batch,
    manifest_document,
    manifest_key,
    output_prefix,
)
from scrapeq_operator.output_spec import job_output
from scrapeq_operator.output_uploader import OutputUploader
from scrapeq_operator.settings import parse_output_default
from scrapeq_queue.output_batches import (
    Output,
    OutputProgress,
    OutputRow,
    OutputSettings,
    UploadedBatch,
)

pytestmark = pytest.mark.timeout(10)

FINISHED = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def row(
    id_: int, state: str = "completed", result: object = None, error: str | None = None
) -> OutputRow:
    return OutputRow(
        id=id_,
        url=f"https://shop.test/{id_}",
        state=state,
        result=result,
        error=error,
        finished_at=FINISHED,
    )


def test_a_jsonl_batch_holds_one_line_per_row_with_id_url_state_result_error_and_time() -> None:
    rows = [
        row(1, result={"fields": {"title": "Ä"}}),
        row(2, "failed", error="HTTP 404"),
        row(3, result={"result_object": {"key": "k", "bytes": 9, "sha256": "ab"}}),
    ]
    encoded = encode_batch(rows, "jsonl", changes_only=False)
    lines = [json.loads(line) for line in encoded.data.decode().splitlines()]
    assert lines[0] == {
        "id": 1,
        "url": "https://shop.test/1",
        "state": "completed",
        "result": {"fields": {"title": "Ä"}},
        "error": None,
        "finished_at": "2026-12-03T12:00:00+00:00",
    }
    assert lines[1]["error"] == "HTTP 404"
    # A result kept in the bucket is referenced as the row holds it, not copied.
    assert lines[2]["result"] == {"result_object": {"key": "k", "bytes": 9, "sha256": "ab"}}
    assert (encoded.lines, encoded.skipped) == (3, 0)
    assert encoded.counts == {"completed": 2, "failed": 1, "cancelled": 0}


def test_the_same_rows_always_encode_to_the_same_bytes() -> None:
    rows = [row(1, result={"b": 1, "a": 2}), row(2)]
    for output_format in ("jsonl", "csv"):
        first = encode_batch(rows, output_format, changes_only=False)  # type: ignore[arg-type]
        again = encode_batch(rows, output_format, changes_only=False)  # type: ignore[arg-type]
        assert first.data == again.data


def test_a_csv_batch_has_a_header_and_the_result_as_one_json_cell() -> None:
    encoded = encode_batch(
        [row(1, result={"fields": {"p": "1,5"}}), row(2, "cancelled")], "csv", changes_only=False
    )
    table = list(csv.DictReader(io.StringIO(encoded.data.decode())))
    assert [entry["id"] for entry in table] == ["1", "2"]
    assert json.loads(table[0]["result"]) == {"fields": {"p": "1,5"}}
    assert table[1]["result"] == ""
    assert table[1]["state"] == "cancelled"


def test_changes_only_skips_rows_that_say_unchanged_but_counts_them() -> None:
    rows = [row(1, result={"changed": False}), row(2, result={"changed": True}), row(3)]
    encoded = encode_batch(rows, "jsonl", changes_only=True)
    assert [json.loads(line)["id"] for line in encoded.data.decode().splitlines()] == [2, 3]
    assert (encoded.lines, encoded.skipped) == (2, 1)
    assert encoded.counts["completed"] == 3


def test_changes_only_leaves_out_source_rows_and_keeps_failed_pages() -> None:
    sitemap = OutputRow(
        id=1,
        url="https://shop.test/sitemap.xml",
        state="completed",
        result={"changed": True, "entries": 10, "enqueued": 10},
        error=None,
        finished_at=FINISHED,
        source=True,
    )
    rows = [sitemap, row(2, result={"changed": True}), row(3, "failed", error="HTTP 500")]
    encoded = encode_batch(rows, "jsonl", changes_only=True)
    assert [json.loads(line)["id"] for line in encoded.data.decode().splitlines()] == [2, 3]
    assert (encoded.lines, encoded.skipped) == (2, 1)
    everything = encode_batch(rows, "jsonl", changes_only=False)
    assert everything.lines == 3


def test_keys_are_deterministic_and_keep_a_recreated_job_apart() -> None:
    prefix = output_prefix("scrapeq/", "/exports/", "team", "laptops", "uid-1")
    assert prefix == "scrapeq/exports/team/laptops/uid-1"
    assert batch_key(prefix, 42, "jsonl") == "scrapeq/exports/team/laptops/uid-1/batch-000042.jsonl"
    assert manifest_key(prefix) == "scrapeq/exports/team/laptops/uid-1/manifest.json"
    assert output_prefix("", "output", "team", "laptops", "uid-2").endswith("/uid-2")


def test_the_manifest_adds_up_the_batches() -> None:
    batches = [
        UploadedBatch(
            1, "p/batch-000001.jsonl", 3, 3, 0, 120, "a" * 64, {"completed": 3}, FINISHED
        ),
        UploadedBatch(
            2,
            "p/batch-000002.jsonl",
            2,
            1,
            1,
            40,
            "b" * 64,
            {"completed": 1, "failed": 1},
            FINISHED,
        ),
    ]
    document = manifest_document(
        namespace="team",
        name="laptops",
        uid="u",
        bucket="b",
        prefix="p",
        format="jsonl",
        batches=batches,
    )
    assert document["counts"] == {"completed": 4, "failed": 1, "cancelled": 0}
    assert (document["rows"], document["lines"], document["skipped"]) == (5, 4, 1)
    assert [batch["sha256"] for batch in document["batches"]] == ["a" * 64, "b" * 64]


def test_spec_output_overrides_the_pool_default_and_enabled_false_opts_out() -> None:
    where = {"store_prefix": "scrapeq", "namespace": "team", "name": "laptops", "uid": "u"}
    assert job_output({}, None, **where) is None
    default = {"format": "csv", "batchRows": 50}
    settings = job_output({"output": {"batchRows": 10}}, default, **where)
    assert settings == OutputSettings(
        format="csv", batch_rows=10, batch_seconds=5.0, key_prefix="scrapeq/output/team/laptops/u"
    )
    assert job_output({}, default, **where) is not None
    assert job_output({"output": {"enabled": False}}, default, **where) is None


def test_an_output_prefix_that_climbs_out_is_refused() -> None:
    with pytest.raises(JobNotRunnableError) as refused:
        job_output(
            {"output": {"prefix": "a/../../b"}},
            None,
            store_prefix="s",
            namespace="n",
            name="j",
            uid="u",
        )
    assert refused.value.reason == "InvalidSpec"
    assert refused.value.permanent


def test_the_pool_default_must_be_a_json_object_of_output_fields() -> None:
    assert parse_output_default('{"format": "jsonl"}') == {"format": "jsonl"}
    assert parse_output_default("") is None
    with pytest.raises(ValueError, match=r"unknown spec\.output fields: bucket"):
        parse_output_default('{"bucket": "x"}')
    with pytest.raises(ValueError, match="JSON object"):
        parse_output_default("[1]")


@pytest.mark.parametrize(
    ("ready", "oldest", "ended", "due"),
    [
        (0, None, True, False),  # nothing to cut, even at the end
        (999, 1.0, False, False),  # fewer than batchRows, younger than batchSeconds
        (1000, 0.1, False, True),  # batchRows reached
        (1, 5.0, False, True),  # the oldest waited batchSeconds
        (1, 0.1, True, True),  # the job ended: the last batch now
    ],
)
def test_a_batch_is_cut_by_rows_by_seconds_or_at_the_end(
    ready: int, oldest: float | None, ended: bool, due: bool
) -> None:
    output = Output("u", "n", "j", OutputSettings(batch_rows=1000, batch_seconds=5.0), ended, 0)
    progress = OutputProgress(ready, oldest, 0, not ended)
    assert OutputUploader._batch_due(output, progress) is due


def test_output_settings_refuse_bounds_outside_the_tables() -> None:
    with pytest.raises(ValueError, match="batchRows"):
        OutputSettings(batch_rows=0)
    with pytest.raises(ValueError, match="batchSeconds"):
        OutputSettings(batch_seconds=0)
