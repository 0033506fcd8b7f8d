"""Reading a ScrapeJob's spec.output (or the pool's default) into the output's settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapeq_queue.output_batches import OUTPUT_FORMATS, OutputFormat, OutputSettings

from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.output_encoding import output_prefix

# Where a job's output goes under the store's prefix when spec.output.prefix is not given.
DEFAULT_OUTPUT_PREFIX = "output"


def job_output(
    spec: Mapping[str, Any],
    default: Mapping[str, Any] | None,
    *,
    store_prefix: str,
    namespace: str,
    name: str,
    uid: str,
) -> OutputSettings | None:
    """The output settings of a ScrapeJob: spec.output over the operator's default (None when
    neither asks for one). JobNotRunnableError (InvalidSpec) for values the schema let through
    but the output cannot use."""
    given = spec.get("output")
    if given is None and not default:
        return None
    if given is not None and given.get("enabled") is False:
        return None
    merged: dict[str, Any] = {**(default or {}), **(given or {})}
    format_name = str(merged.get("format") or "jsonl")
    if format_name not in OUTPUT_FORMATS:
        raise JobNotRunnableError(
            "InvalidSpec",
            f"spec.output.format must be jsonl or csv, got {format_name!r}",
            permanent=True,
        )
    output_format: OutputFormat = "csv" if format_name == "csv" else "jsonl"
    prefix = str(merged.get("prefix") or DEFAULT_OUTPUT_PREFIX)
    if ".." in prefix.split("/"):
        raise JobNotRunnableError(
            "InvalidSpec", "spec.output.prefix may not contain '..'", permanent=True
        )
    try:
        return OutputSettings(
            format=output_format,
            batch_rows=int(merged.get("batchRows") or OutputSettings.batch_rows),
            batch_seconds=float(merged.get("batchSeconds") or OutputSettings.batch_seconds),
            key_prefix=output_prefix(store_prefix, prefix, namespace, name, uid),
            changes_only=bool(merged.get("changesOnly", False)),
        )
    except ValueError as error:
        raise JobNotRunnableError("InvalidSpec", f"spec.output: {error}", permanent=True) from error
