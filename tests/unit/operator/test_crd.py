"""The ScrapeJob CRD file: one structural schema, described everywhere, with kubectl's columns.

The API server itself checks the schema in tests/e2e; these checks catch omissions early.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from scrapeq_queue import page_steps, payload

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


def test_the_crd_bounds_every_payload_field_as_the_queue_does() -> None:
    """What kubectl refuses at apply time is what a worker would refuse in a row: the same
    ranges (the CRD may be stricter: maxDepth starts at 1 there)."""
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    follow = spec[".spec.follow"]["properties"]
    assert follow["maxDepth"]["maximum"] == payload.MAX_FOLLOW_DEPTH
    assert follow["maxPages"]["maximum"] == payload.MAX_FOLLOW_PAGES
    assert follow["maxPages"]["default"] == payload.DEFAULT_FOLLOW_MAX_PAGES
    assert follow["selector"]["maxLength"] == payload.MAX_SELECTOR_CHARS
    assert spec[".spec.timeoutSeconds"]["maximum"] == payload.MAX_TIMEOUT_SECONDS
    for extract in (spec[".spec.extract"], spec[".spec.follow.extract"]):
        assert extract["maxProperties"] == payload.MAX_EXTRACT_FIELDS
        field = extract["additionalProperties"]["properties"]
        assert field["selector"]["maxLength"] == payload.MAX_SELECTOR_CHARS
        assert field["attribute"]["maxLength"] == payload.MAX_ATTRIBUTE_CHARS
        rule = extract["x-kubernetes-validations"][0]["rule"]
        assert f"{{0,{payload.MAX_FIELD_NAME_CHARS - 1}}}" in rule
    for patterns in (follow["include"], follow["exclude"]):
        assert patterns["maxItems"] == payload.MAX_FOLLOW_PATTERNS
        assert patterns["items"]["maxLength"] == payload.MAX_FOLLOW_PATTERN_CHARS


def test_the_crd_bounds_pagination_as_the_queue_does() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    pagination = spec[".spec.next"]
    assert pagination["required"] == ["selector"]
    # `page` is the worker's: the chain position of a queued row, never a spec field.
    assert set(pagination["properties"]) == payload.NEXT_KEYS - {"page"}
    assert pagination["properties"]["selector"]["maxLength"] == payload.MAX_SELECTOR_CHARS
    assert pagination["properties"]["maxPages"]["minimum"] == 1
    assert pagination["properties"]["maxPages"]["maximum"] == payload.MAX_NEXT_PAGES
    assert pagination["properties"]["maxPages"]["default"] == payload.DEFAULT_NEXT_MAX_PAGES


def test_the_crd_bounds_block_markers_as_the_queue_does() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    markers = spec[".spec.blockMarkers"]
    assert markers["maxItems"] == payload.MAX_BLOCK_MARKERS
    marker = markers["items"]
    assert marker["required"] == ["selector"]
    assert set(marker["properties"]) == {"selector", "text"}
    assert marker["properties"]["selector"]["maxLength"] == payload.MAX_SELECTOR_CHARS
    assert marker["properties"]["text"]["maxLength"] == payload.MAX_BLOCK_MARKER_TEXT_CHARS


def test_the_crd_bounds_routes_as_the_queue_does() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    routes = spec[".spec.routes"]
    assert routes["maxProperties"] == payload.MAX_ROUTES
    assert f"'^{payload.ROUTE_LABEL_PATTERN}$'" in routes["x-kubernetes-validations"][0]["rule"]
    route = routes["additionalProperties"]["properties"]
    assert tuple(route) == payload.ROUTE_KEYS
    # A route's options are the spec's own, except that a route's follow without maxPages
    # takes the maxPages of the rule that led to it.
    for key in payload.ROUTE_KEYS:
        if key != "follow":
            assert route[key] == spec[f".spec.{key}"], key
    assert "default" not in route["follow"]["properties"]["maxPages"]
    label = spec[".spec.follow"]["properties"]["label"]
    assert label["pattern"] == f"^{payload.ROUTE_LABEL_PATTERN}$"


def test_the_crd_bounds_items_and_transforms_as_the_queue_does() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    items = spec[".spec.items"]["properties"]
    assert items["limit"]["maximum"] == payload.MAX_ITEMS_LIMIT
    assert items["limit"]["default"] == payload.DEFAULT_ITEMS_LIMIT
    assert items["selector"]["maxLength"] == payload.MAX_SELECTOR_CHARS
    assert items["fields"]["maxProperties"] == payload.MAX_EXTRACT_FIELDS
    fields = [
        spec[".spec.extract"]["additionalProperties"],
        spec[".spec.follow.extract"]["additionalProperties"],
        items["fields"]["additionalProperties"],
    ]
    for field in fields:
        transforms = field["properties"]["transforms"]
        assert transforms["maxItems"] == payload.MAX_TRANSFORMS
        step = transforms["items"]["properties"]
        assert step["type"]["enum"] == list(payload.TRANSFORM_KEYS)
        assert set(step) - {"type"} == set().union(*payload.TRANSFORM_KEYS.values())
        assert step["decimal"]["enum"] == list(payload.DECIMAL_SEPARATORS)
        assert step["thousands"]["enum"] == list(payload.THOUSANDS_SEPARATORS)
        assert step["pattern"]["maxLength"] == payload.MAX_TRANSFORM_PATTERN_CHARS
        assert step["separator"]["maxLength"] == payload.MAX_JOIN_SEPARATOR_CHARS


def test_the_crd_bounds_every_step_as_the_queue_does() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    steps = spec[".spec.steps"]
    assert steps["maxItems"] == page_steps.MAX_STEPS
    step = steps["items"]["properties"]
    assert step["action"]["enum"] == list(page_steps.STEP_ACTIONS)
    # A row's sealedValue is the spec's valueFrom, sealed by the operator.
    assert set(step) == {"action", "timeoutSeconds", "valueFrom"}.union(
        *page_steps.STEP_KEYS.values()
    ) - {"sealedValue"}
    for name in ("selector", "waitFor"):
        assert step[name]["maxLength"] == page_steps.MAX_STEP_SELECTOR_CHARS
    assert step["value"]["maxLength"] == page_steps.MAX_STEP_VALUE_CHARS
    assert step["urlPattern"]["maxLength"] == page_steps.MAX_URL_PATTERN_CHARS
    assert step["timeoutSeconds"]["maximum"] == page_steps.MAX_STEP_TIMEOUT_SECONDS
    assert (
        step["maxRounds"]["maximum"] == step["maxClicks"]["maximum"] == (page_steps.MAX_STEP_ROUNDS)
    )
    assert step["count"]["maximum"] == page_steps.MAX_SCROLL_COUNT
    assert step["settleSeconds"]["maximum"] == page_steps.MAX_SETTLE_SECONDS
    assert step["idleSeconds"]["maximum"] == page_steps.MAX_IDLE_SECONDS
    assert step["state"]["enum"] == list(page_steps.WAIT_FOR_STATES)
    for key in page_steps.NAMED_KEYS:
        assert f"|{key}|" in step["key"]["pattern"] or f"|{key})" in step["key"]["pattern"]


def test_login_steps_are_the_same_vocabulary_as_spec_steps() -> None:
    spec = dict(_properties(_load()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], ""))
    login_steps = spec[".spec.session.login"]["properties"]["steps"]
    assert login_steps["items"] == spec[".spec.steps"]["items"]
    assert login_steps["maxItems"] == page_steps.MAX_STEPS
