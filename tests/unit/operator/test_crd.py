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


def test_printer_columns_show_phase_done_failed_and_age() -> None:
    (version,) = _load()["spec"]["versions"]
    names = [column["name"] for column in version["additionalPrinterColumns"]]
    assert names[:4] == ["Phase", "Done", "Failed", "Age"]
    assert version["subresources"] == {"status": {}}
