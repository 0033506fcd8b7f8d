"""The bounds of a site's limits have one source, scrapeq_queue.politeness: every copy a user
meets before Python sees the value (the CRD's schema, the chart's values schema) says the same.
The database's own clamp is checked against the same constants in
tests/integration/queue/test_politeness_bounds.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scrapeq_queue.politeness import MAX_CONCURRENT_PER_HOST_LIMIT, MAX_DELAY_SECONDS

ROOT = Path(__file__).resolve().parents[3]
BOUNDS = {
    "maxConcurrentPerHost": (1, MAX_CONCURRENT_PER_HOST_LIMIT),
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
