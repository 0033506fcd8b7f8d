"""The bounds of a site's limits have one source, scrapeq_queue.politeness: every copy a user
meets before Python sees the value (the CRD's schema, the chart's values schema) says the same,
and the database's clamp is written from them by the migration runner (checked against a real
database in tests/integration/queue/test_politeness_bounds.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scrapeq_queue import migrations
from scrapeq_queue.politeness import MAX_CONCURRENT_PER_SITE_LIMIT, MAX_DELAY_SECONDS

ROOT = Path(__file__).resolve().parents[3]
BOUNDS = {
    "maxConcurrentPerSite": (1, MAX_CONCURRENT_PER_SITE_LIMIT),
    "delaySeconds": (0, MAX_DELAY_SECONDS),
}


def politeness_schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every `politeness` object schema in a JSON schema (or a CRD, which holds one)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "politeness" and isinstance(value, dict) and "properties" in value:
                yield value
            yield from politeness_schemas(value)
    elif isinstance(node, list):
        for item in node:
            yield from politeness_schemas(item)


@pytest.mark.parametrize(
    "copy",
    [
        "crds/scrapejobs.scrapeq.io.yaml",
        "charts/scrapeq/files/scrapejobs.scrapeq.io.yaml",
        "charts/scrapeq/values.schema.json",
    ],
)
def test_every_schema_bounds_a_site_s_limit_and_delay_as_the_queue_does(copy: str) -> None:
    text = (ROOT / copy).read_text()
    document = json.loads(text) if copy.endswith(".json") else yaml.safe_load(text)
    schemas = list(politeness_schemas(document))
    assert schemas, f"{copy} has no politeness schema"
    for schema in schemas:
        for field, (low, high) in BOUNDS.items():
            declared = schema["properties"][field]
            assert (declared["minimum"], declared["maximum"]) == (low, high), (copy, field)
            if copy.endswith(".yaml"):
                # What `kubectl explain` shows says the same bounds.
                assert f"({low}-{high:g})" in declared["description"], (copy, field)


def test_the_database_s_clamp_names_the_bounds_only_as_placeholders_the_runner_fills() -> None:
    readers = ROOT / "jobqueue/scrapeq_queue/sql/payload_limits.sql"
    text = readers.read_text(encoding="utf-8")
    assert "{{MAX_CONCURRENT_PER_SITE_LIMIT}}" in text
    assert "{{MAX_DELAY_SECONDS}}" in text
    assert str(MAX_CONCURRENT_PER_SITE_LIMIT) not in text
    assert f"{MAX_DELAY_SECONDS:g}" not in text
    for migration in migrations.available_migrations():
        assert "{{" not in migration.sql, migration.version
    latest = migrations.available_migrations()[-1].sql
    assert f"{MAX_CONCURRENT_PER_SITE_LIMIT})::integer" in latest
    assert f"{MAX_DELAY_SECONDS:g})::double precision" in latest


def test_a_migration_naming_an_unknown_placeholder_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"0042_x names an unknown placeholder \{\{MAX_PAGES\}\}"):
        migrations._with_placeholders_filled("SELECT {{MAX_PAGES}}", "0042_x")
