"""How many workers a pool gets: up at once, down after a window, to zero after a cool-down,
held on database errors."""

from __future__ import annotations

import pytest
from scrapeq_operator.errors import ConfigurationError
from scrapeq_operator.scaling_policy import (
    IDLE_POD_DELETION_COST,
    PoolMemory,
    PoolPolicy,
    ScalingReason,
    decide_replicas,
    deletion_costs,
    recommended_replicas,
)
from scrapeq_operator.settings import AutoscalerDefaults

POLICY = PoolPolicy(
    min_replicas=0,
    max_replicas=5,
    jobs_per_replica=10,
    scale_down_window_seconds=60,
    scale_to_zero_cooldown_seconds=300,
)


@pytest.mark.parametrize(
    ("work", "replicas"), [(0, 0), (1, 1), (10, 1), (11, 2), (49, 5), (1000, 5)]
)
def test_recommendation_is_work_over_jobs_per_replica_rounded_up_and_clamped(
    work: int, replicas: int
) -> None:
    assert recommended_replicas(work, POLICY) == replicas


def test_recommendation_never_goes_below_the_minimum() -> None:
    policy = PoolPolicy(2, 5, 10, 60, 300)
    assert recommended_replicas(0, policy) == 2


def test_a_backlog_scales_up_at_once() -> None:
    memory = PoolMemory(first_seen_at=0)
    decision = decide_replicas(current=0, work=35, now=1, policy=POLICY, memory=memory)
    assert decision.desired == 4
    assert decision.reason is ScalingReason.SCALE_UP


def test_a_lull_inside_the_window_does_not_scale_down() -> None:
    memory = PoolMemory(first_seen_at=0)
    decide_replicas(current=0, work=40, now=0, policy=POLICY, memory=memory)
    decision = decide_replicas(current=4, work=5, now=30, policy=POLICY, memory=memory)
    assert decision.desired == 4
    assert decision.reason is ScalingReason.STABILIZING


def test_after_the_window_it_scales_down_to_the_highest_recent_recommendation() -> None:
    memory = PoolMemory(first_seen_at=0)
    decide_replicas(current=0, work=40, now=0, policy=POLICY, memory=memory)
    decide_replicas(current=4, work=25, now=30, policy=POLICY, memory=memory)
    decision = decide_replicas(current=4, work=5, now=70, policy=POLICY, memory=memory)
    assert decision.desired == 3
    assert decision.reason is ScalingReason.SCALE_DOWN


def test_an_idle_queue_keeps_one_replica_until_the_cool_down_ends() -> None:
    memory = PoolMemory(first_seen_at=0)
    decide_replicas(current=0, work=20, now=0, policy=POLICY, memory=memory)
    down = decide_replicas(current=2, work=0, now=100, policy=POLICY, memory=memory)
    assert (down.desired, down.reason) == (1, ScalingReason.SCALE_DOWN)
    held = decide_replicas(current=1, work=0, now=200, policy=POLICY, memory=memory)
    assert (held.desired, held.reason) == (1, ScalingReason.COOLING_DOWN)
    zero = decide_replicas(current=1, work=0, now=301, policy=POLICY, memory=memory)
    assert (zero.desired, zero.reason) == (0, ScalingReason.SCALE_TO_ZERO)


def test_a_database_error_holds_the_current_replicas() -> None:
    memory = PoolMemory(first_seen_at=0)
    decision = decide_replicas(current=3, work=None, now=10_000, policy=POLICY, memory=memory)
    assert decision.desired == 3
    assert decision.reason is ScalingReason.DATABASE_UNAVAILABLE
    assert not decision.changes_replicas


def test_a_database_error_does_not_count_as_an_idle_reading() -> None:
    memory = PoolMemory(first_seen_at=0)
    decide_replicas(current=0, work=10, now=0, policy=POLICY, memory=memory)
    for moment in range(1, 400, 10):
        decide_replicas(current=1, work=None, now=moment, policy=POLICY, memory=memory)
    assert memory.last_busy_at == 0
    assert all(count == 1 for _, count in memory.recommendations)


def test_a_steady_backlog_changes_nothing() -> None:
    memory = PoolMemory(first_seen_at=0)
    decision = decide_replicas(current=2, work=20, now=0, policy=POLICY, memory=memory)
    assert (decision.desired, decision.reason) == (2, ScalingReason.STEADY)


def test_annotations_override_the_defaults() -> None:
    policy = PoolPolicy.from_annotations(
        {
            "scrapeq.io/max-replicas": "7",
            "scrapeq.io/jobs-per-replica": "3",
            "scrapeq.io/scale-down-stabilization-seconds": "1.5",
        },
        AutoscalerDefaults(),
    )
    assert (policy.max_replicas, policy.jobs_per_replica) == (7, 3)
    assert policy.scale_down_window_seconds == 1.5
    assert policy.min_replicas == AutoscalerDefaults().min_replicas


@pytest.mark.parametrize(
    "annotations",
    [
        {"scrapeq.io/max-replicas": "many"},
        {"scrapeq.io/jobs-per-replica": "0"},
        {"scrapeq.io/min-replicas": "4", "scrapeq.io/max-replicas": "2"},
        {"scrapeq.io/min-replicas": "-1"},
    ],
)
def test_unusable_annotations_are_rejected_with_their_name(annotations: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match=r"replica"):
        PoolPolicy.from_annotations(annotations, AutoscalerDefaults())


def test_a_pool_can_name_its_workers_per_site_limit() -> None:
    defaults = AutoscalerDefaults(max_concurrent_per_site=2)
    assert PoolPolicy.from_annotations({}, defaults).max_concurrent_per_site == 2
    named = {"scrapeq.io/max-concurrent-per-site": "6"}
    assert PoolPolicy.from_annotations(named, defaults).max_concurrent_per_site == 6
    for raw, message in [("0", "from 1 to 1000"), ("1001", "from 1 to 1000"), ("x", "not")]:
        with pytest.raises(ConfigurationError, match=f"max-concurrent-per-site.*{message}"):
            PoolPolicy.from_annotations({"scrapeq.io/max-concurrent-per-site": raw}, defaults)


def test_a_pool_can_name_its_workers_per_site_delay() -> None:
    defaults = AutoscalerDefaults(max_concurrent_per_site=2)
    assert PoolPolicy.from_annotations({}, defaults).site_defaults.delay_seconds == 0.0
    named = {"scrapeq.io/max-concurrent-per-site": "3", "scrapeq.io/site-delay-seconds": "1.5"}
    policy = PoolPolicy.from_annotations(named, defaults)
    assert (policy.site_defaults.max_concurrent_per_site, policy.site_defaults.delay_seconds) == (
        3,
        1.5,
    )
    for raw, message in [("3601", "from 0 to 3600"), ("-1", "negative"), ("x", "not")]:
        with pytest.raises(ConfigurationError, match=f"site-delay-seconds.*{message}"):
            PoolPolicy.from_annotations({"scrapeq.io/site-delay-seconds": raw}, defaults)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("scrapeq.io/max-concurrent-per-host", "scrapeq.io/max-concurrent-per-site"),
        ("scrapeq.io/host-delay-seconds", "scrapeq.io/site-delay-seconds"),
    ],
)
def test_a_pool_annotation_under_its_name_before_0_1_0_is_refused_with_its_name_now(
    old: str, new: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"annotation {old} is now {new}"):
        PoolPolicy.from_annotations({old: "3"}, AutoscalerDefaults())


def test_idle_pods_are_cheaper_to_delete_than_busy_ones() -> None:
    pods = ["workers-7d9f-abcde", "workers-7d9f-fghij", "workers-7d9f-klmno"]
    in_flight = {
        "workers-7d9f-fghij-41": 2,  # the worker's default id: <pod name>-<pid>
        "workers-7d9f-fghij-42": 1,
        "workers-7d9f-klmno": 1,
        "elsewhere-1": 9,
    }
    costs = deletion_costs(pods, in_flight)
    assert costs == {
        "workers-7d9f-abcde": IDLE_POD_DELETION_COST,
        "workers-7d9f-fghij": 3,
        "workers-7d9f-klmno": 1,
    }
