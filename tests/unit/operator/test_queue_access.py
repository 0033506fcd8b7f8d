"""Which ScrapeJobs the QueuePolicies admit (docs/operator.md, "Queue access")."""

from __future__ import annotations

from typing import Any

import pytest
from scrapeq_operator.queue_access import (
    MAX_LISTED_POLICIES,
    PRIORITY_NOT_ALLOWED_REASON,
    QUEUE_NOT_ALLOWED_REASON,
    QueuePolicy,
    admission,
    admitted_message,
    namespace_caps,
    read_policy,
)

pytestmark = pytest.mark.timeout(10)


def policy(name: str, namespaces: list[str], queues: list[str], **spec: Any) -> QueuePolicy:
    return read_policy(
        {"metadata": {"name": name}, "spec": {"namespaces": namespaces, "queues": queues, **spec}}
    )


def test_no_policy_at_all_or_no_resource_admits_every_namespace_queue_and_priority() -> None:
    for policies in (None, []):
        assert admission(policies, namespace="team-b", queue="bulk", priority=1000) is None


def test_the_charts_default_grant_of_everything_admits_everything() -> None:
    everything = [policy("default", ["*"], ["*"])]
    assert everything[0].max_priority == 1000
    assert admission(everything, namespace="any", queue="any", priority=1000) is None


def test_a_namespace_no_policy_names_is_refused_with_the_namespace_queue_and_policies() -> None:
    policies = [policy("team-a", ["team-a"], ["*"]), policy("shared", ["*"], ["shared"])]

    refusal = admission(policies, namespace="team-b", queue="bulk", priority=0)

    assert refusal is not None
    assert refusal.reason == QUEUE_NOT_ALLOWED_REASON
    assert not refusal.permanent
    assert "namespace team-b may not use queue bulk" in refusal.message
    assert "QueuePolicies consulted: shared, team-a" in refusal.message
    assert admission(policies, namespace="team-b", queue="shared", priority=0) is None
    assert admission(policies, namespace="team-a", queue="bulk", priority=0) is None


def test_a_priority_above_every_covering_grant_is_refused_naming_the_highest_allowed() -> None:
    policies = [
        policy("low", ["team-b"], ["bulk"], maxPriority=10),
        policy("lower", ["*"], ["*"], maxPriority=0),
        policy("other", ["team-a"], ["bulk"], maxPriority=500),
    ]

    refusal = admission(policies, namespace="team-b", queue="bulk", priority=50)

    assert refusal is not None
    assert refusal.reason == PRIORITY_NOT_ALLOWED_REASON
    assert "may use queue bulk up to priority 10, not 50" in refusal.message
    assert "granted by low, lower" in refusal.message
    assert "QueuePolicies consulted: low, lower, other" in refusal.message
    assert admission(policies, namespace="team-b", queue="bulk", priority=10) is None
    assert admission(policies, namespace="team-b", queue="bulk", priority=-5) is None


def test_grants_add_up_so_one_policy_is_enough() -> None:
    policies = [
        policy("narrow", ["team-b"], ["bulk"], maxPriority=0),
        policy("wide", ["team-b", "team-c"], ["bulk", "urgent"], maxPriority=100),
    ]
    assert admission(policies, namespace="team-b", queue="bulk", priority=100) is None
    assert admission(policies, namespace="team-c", queue="urgent", priority=100) is None
    assert "granted by wide" in admitted_message(
        policies, namespace="team-b", queue="bulk", priority=100
    )


def test_a_long_list_of_policies_is_cut_in_the_message() -> None:
    policies = [policy(f"p{number:02}", ["other"], ["*"]) for number in range(25)]

    refusal = admission(policies, namespace="team-b", queue="bulk", priority=0)

    assert refusal is not None
    assert f"and {25 - MAX_LISTED_POLICIES} more" in refusal.message
    assert "p24" not in refusal.message


def test_a_policy_with_fields_the_schema_would_refuse_grants_nothing() -> None:
    broken = read_policy({"metadata": {"name": "broken"}, "spec": {"namespaces": "team-b"}})
    assert broken.namespaces == frozenset()
    assert admission([broken], namespace="team-b", queue="bulk", priority=0) is not None
    odd = read_policy(
        {
            "metadata": {"name": "odd"},
            "spec": {"namespaces": ["*"], "queues": ["*"], "maxPriority": "high"},
        }
    )
    refusal = admission([odd], namespace="team-b", queue="bulk", priority=-1000)
    assert refusal is not None
    assert refusal.reason == PRIORITY_NOT_ALLOWED_REASON


def test_caps_are_the_lowest_of_the_policies_naming_a_namespace_and_star_caps_everyone() -> None:
    policies = [
        policy("everyone", ["*"], ["*"], maxRowsInFlightPerNamespace=100),
        policy("team-a", ["team-a"], ["bulk"], maxRowsInFlightPerNamespace=5),
        policy("team-b", ["team-b"], ["bulk"], maxRowsInFlightPerNamespace=500),
        policy("uncapped", ["team-c"], ["*"]),
    ]

    assert namespace_caps(policies) == {"*": 100, "team-a": 5, "team-b": 100}


def test_no_policy_or_no_capping_policy_caps_nothing() -> None:
    assert namespace_caps(None) == {}
    assert namespace_caps([policy("default", ["*"], ["*"])]) == {}


def test_a_cap_the_schema_would_refuse_caps_at_one_row() -> None:
    odd = policy("odd", ["team-a"], ["*"], maxRowsInFlightPerNamespace="many")
    zero = policy("zero", ["team-b"], ["*"], maxRowsInFlightPerNamespace=0)
    assert namespace_caps([odd, zero]) == {"team-a": 1, "team-b": 1}
