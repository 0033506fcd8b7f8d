"""The ScrapeJob CRD file: one structural schema, described everywhere, with kubectl's columns.

The API server itself checks the schema in tests/e2e; these checks catch omissions early.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "scrapejobs.scrapeq.io.yaml"


def _load() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    return document


def _properties(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in (schema.get("properties") or {}).items():
        child_path = f"{path}.{name}"
        yield child_path, child
        yield from _properties(child, child_path)
        if "items" in child:
            yield from _properties(child["items"], child_path + "[]")
        if isinstance(child.get("additionalProperties"), dict):
            yield from _properties(child["additionalProperties"], child_path + "{}")


def test_the_crd_names_match_what_users_type() -> None:
    spec = _load()["spec"]
    assert spec["group"] == "scrapeq.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ScrapeJob"
    assert spec["names"]["shortNames"] == ["sj"]
    assert "scrapeq" in spec["names"]["categories"]


def test_every_spec_and_status_field_has_a_description() -> None:
    (version,) = _load()["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    undocumented = [
        path
        for path, child in _properties(schema, "")
        if path != ".metadata" and not child.get("description")
    ]
    assert undocumented == []


def test_printer_columns_show_phase_progress_reason_and_more_with_wide() -> None:
    (version,) = _load()["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    default = [column["name"] for column in columns if not column.get("priority")]
    wide = [column["name"] for column in columns if column.get("priority") == 1]
    assert default == ["Phase", "Done", "Failed", "Reason", "Age", "Message"]
    assert wide == ["Queue", "URL", "Schedule", "Last Schedule"]
    assert version["subresources"] == {"status": {}}


# Fields of a scheduled ScrapeJob that may change on a live object (docs/scrapejob.md).
MUTABLE_SPEC_FIELDS = {
    "schedule",
    "timeZone",
    "suspend",
    "concurrencyPolicy",
    "successfulRunsHistoryLimit",
    "failedRunsHistoryLimit",
}


def test_every_spec_field_but_the_operational_ones_is_guarded_by_the_immutability_rule() -> None:
    (version,) = _load()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    (rule,) = [
        item["rule"]
        for item in spec["x-kubernetes-validations"]
        if item["message"].startswith("spec is immutable")
    ]
    for name in set(spec["properties"]) - MUTABLE_SPEC_FIELDS:
        clause = f"(has(self.{name}) ? has(oldSelf.{name}) && self.{name} == oldSelf.{name}"
        assert clause in rule, name
    for name in MUTABLE_SPEC_FIELDS:
        assert f"self.{name}" not in rule
