"""A SitePolicy resource's spec, read into the queue's `SitePolicy` (docs/operator.md, "Site
policies"). The CRD's schema refuses most bad specs before they reach the operator; what is
left (a field of the wrong type from an older CRD, say) is refused here with what is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapeq_queue import SitePolicy


def site_policy(name: str, spec: Mapping[str, Any]) -> SitePolicy:
    """The queue's SitePolicy for the resource `name` with `spec`; ValueError saying what is
    wrong when the spec cannot be kept."""
    namespaces = spec.get("namespaces") or {}
    if not isinstance(namespaces, Mapping):
        raise ValueError(f"site policy {name}: namespaces must be an object with allow and deny")
    allowed = namespaces.get("allow")
    return SitePolicy(
        name=name,
        patterns=_strings(name, "sites", spec.get("sites")),
        max_concurrent_per_site=spec.get("maxConcurrentPerSite"),
        delay_seconds=_number(name, "delaySeconds", spec.get("delaySeconds")),
        respect_robots_txt=_flag(name, "respectRobotsTxt", spec.get("respectRobotsTxt")),
        user_agent=spec.get("userAgent"),
        contact=spec.get("contact"),
        allowed_namespaces=None if allowed is None else _strings(name, "namespaces.allow", allowed),
        denied_namespaces=_strings(name, "namespaces.deny", namespaces.get("deny") or []),
        adaptive_concurrency=bool(
            _flag(name, "adaptiveConcurrency", spec.get("adaptiveConcurrency"))
        ),
    )


def _strings(name: str, field: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"site policy {name}: {field} must be a list of strings")
    return tuple(value)


def _number(name: str, field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"site policy {name}: {field} must be a number")
    return float(value)


def _flag(name: str, field: str, value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"site policy {name}: {field} must be true or false")
    return value
