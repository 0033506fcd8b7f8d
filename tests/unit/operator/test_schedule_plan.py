"""What a scheduled ScrapeJob decides at each check: runs to start, replace, skip and prune,
and the status it shows (pure functions; the e2e tests run the real thing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scrapeq_operator.cron import parse_schedule
from scrapeq_operator.schedule_plan import (
    RUN_SKIPPED_CONDITION,
    SCHEDULE_LABEL,
    SCHEDULED_TIME_ANNOTATION,
    ConcurrencyPolicy,
    Run,
    applied_schedule,
    history_to_prune,
    invalid_schedule_status,
    owned_runs,
    plan_check,
    run_manifest,
    run_name,
    schedule_anchor,
    schedule_status,
)

T0 = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)
EVERY_MINUTE = parse_schedule("* * * * *")


def run(minute: int, phase: str | None = None, *, deleting: bool = False) -> Run:
    """A run started for T0 + `minute` minutes."""
    at = T0 + timedelta(minutes=minute)
    return Run(
        name=run_name("nightly", at),
        uid=f"uid-{minute}",
        scheduled_at=at,
        phase=phase,
        completion_time=at + timedelta(seconds=30) if phase else None,
        deleting=deleting,
    )


def check(policy: ConcurrencyPolicy, runs: list[Run], **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "anchor": T0,
        "now": T0 + timedelta(minutes=1, seconds=2),
        "runs": runs,
        "successful_limit": 3,
        "failed_limit": 1,
        "suspended": False,
    }
    arguments.update(overrides)
    return plan_check(EVERY_MINUTE, policy, **arguments)


def test_a_due_fire_time_starts_a_run_named_after_it() -> None:
    plan = check(ConcurrencyPolicy.FORBID, [])
    assert plan.start == T0 + timedelta(minutes=1)
    assert plan.last_schedule_time == plan.start
    assert run_name("nightly", plan.start) == f"nightly-{int(plan.start.timestamp())}"


def test_nothing_starts_before_the_first_fire_time() -> None:
    plan = check(ConcurrencyPolicy.ALLOW, [], now=T0 + timedelta(seconds=59))
    assert plan.start is None
    assert plan.skipped is None


def test_a_fire_time_whose_run_exists_is_not_started_again() -> None:
    """A check that saw a stale status must not start (or, with Replace, replace) it twice."""
    plan = check(ConcurrencyPolicy.REPLACE, [run(1)])
    assert plan.start is None
    assert plan.replace == ()


def test_forbid_skips_while_a_run_is_active_and_keeps_the_anchor() -> None:
    active = run(0, "Running")
    plan = check(ConcurrencyPolicy.FORBID, [active])
    assert plan.start is None
    assert plan.skipped == T0 + timedelta(minutes=1)
    assert plan.blocked_by == (active,)
    assert plan.last_schedule_time == T0


def test_forbid_starts_once_the_active_run_finished() -> None:
    plan = check(ConcurrencyPolicy.FORBID, [run(0, "Succeeded")])
    assert plan.start == T0 + timedelta(minutes=1)


def test_a_run_being_deleted_is_not_active() -> None:
    plan = check(ConcurrencyPolicy.FORBID, [run(0, "Running", deleting=True)])
    assert plan.start == T0 + timedelta(minutes=1)


def test_allow_starts_alongside_an_active_run() -> None:
    plan = check(ConcurrencyPolicy.ALLOW, [run(0)])
    assert plan.start == T0 + timedelta(minutes=1)
    assert plan.replace == ()


def test_replace_deletes_the_active_runs_and_starts_a_new_one() -> None:
    pending, running, done = run(-2), run(0, "Running"), run(-5, "Succeeded")
    plan = check(ConcurrencyPolicy.REPLACE, [done, pending, running])
    assert plan.start == T0 + timedelta(minutes=1)
    assert plan.replace == (pending, running)


def test_a_suspended_schedule_starts_nothing() -> None:
    plan = check(ConcurrencyPolicy.ALLOW, [], suspended=True)
    assert plan.start is None
    assert plan.skipped is None


def test_missed_fire_times_start_one_run_for_the_latest() -> None:
    plan = check(ConcurrencyPolicy.ALLOW, [], now=T0 + timedelta(minutes=30, seconds=5))
    assert plan.start == T0 + timedelta(minutes=30)


def test_history_keeps_the_newest_runs_per_outcome_and_drops_the_oldest_first() -> None:
    runs = [
        run(1, "Succeeded"),
        run(2, "Failed"),
        run(3, "Succeeded"),
        run(4, "Cancelled"),
        run(5, "Succeeded"),
        run(6, "Running"),
    ]
    assert [r.name for r in history_to_prune(runs, 1, 1)] == [
        runs[0].name,
        runs[1].name,
        runs[2].name,
    ]
    assert history_to_prune(runs, 3, 2) == []
    assert [r.uid for r in history_to_prune(runs, 0, 0)] == [
        "uid-1",
        "uid-2",
        "uid-3",
        "uid-4",
        "uid-5",
    ]


def test_runs_being_deleted_do_not_count_against_the_history() -> None:
    runs = [run(1, "Succeeded", deleting=True), run(2, "Succeeded")]
    assert history_to_prune(runs, 1, 1) == []


def test_only_runs_controlled_by_this_parent_count_oldest_first() -> None:
    def body(name: str, owner_uid: str, annotation: str | None) -> dict[str, Any]:
        annotations = {SCHEDULED_TIME_ANNOTATION: annotation} if annotation else {}
        return {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "annotations": annotations,
                "ownerReferences": [{"uid": owner_uid, "controller": True}],
            },
            "status": {"phase": "Succeeded", "completionTime": "2026-03-01T10:05:00Z"},
        }

    runs = owned_runs(
        [
            body("nightly-1772359320", "parent", "2026-03-01T10:02:00Z"),
            body("nightly-1772359260", "parent", None),
            body("nightly-1772359200", "an-earlier-parent", "2026-03-01T10:00:00Z"),
        ],
        "parent",
    )
    assert [r.name for r in runs] == ["nightly-1772359260", "nightly-1772359320"]
    # Without the annotation, the name's suffix tells the fire time.
    assert runs[0].scheduled_at == datetime(2026, 3, 1, 10, 1, tzinfo=UTC)
    assert runs[1].completion_time == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)


def test_the_anchor_is_the_latest_run_even_when_the_status_is_stale() -> None:
    status = {"lastScheduleTime": "2026-03-01T10:00:00Z"}
    assert schedule_anchor(status, T0 - timedelta(days=1), [run(3)], T0) == T0 + timedelta(
        minutes=3
    )
    assert schedule_anchor({}, T0 - timedelta(days=1), [], T0) == T0 - timedelta(days=1)


def test_a_run_gets_the_spec_without_the_schedule_fields_and_points_to_its_parent() -> None:
    parent = {
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "parent-uid"},
        "spec": {
            "url": "https://shop.example.com/",
            "render": False,
            "schedule": "@every 5s",
            "concurrencyPolicy": "Forbid",
            "successfulRunsHistoryLimit": 1,
            "failedRunsHistoryLimit": 1,
            "suspend": False,
        },
    }
    manifest = run_manifest(parent, T0)
    assert manifest["metadata"]["name"] == f"nightly-{int(T0.timestamp())}"
    assert manifest["metadata"]["namespace"] == "shop"
    assert manifest["metadata"]["labels"] == {SCHEDULE_LABEL: "nightly"}
    assert manifest["metadata"]["annotations"] == {
        SCHEDULED_TIME_ANNOTATION: "2026-03-01T10:00:00Z"
    }
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner["uid"] == "parent-uid"
    assert owner["kind"] == "ScrapeJob"
    assert owner["controller"] is True
    assert manifest["spec"] == {"url": "https://shop.example.com/", "render": False}


def test_a_run_of_a_changed_since_schedule_reads_the_sitemap_after_the_last_successful_run() -> (
    None
):
    sitemap = "https://shop.example.com/sitemap.xml"
    parent = {
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "parent-uid"},
        "spec": {
            "urlsFrom": {"sitemap": sitemap, "changedSincePreviousRun": True},
            "schedule": "@daily",
        },
    }
    runs = [run(0, "Succeeded"), run(10, "Succeeded"), run(20, "Failed"), run(30)]

    first = run_manifest(parent, T0, [])
    later = run_manifest(parent, T0 + timedelta(minutes=40), runs)

    assert first["spec"] == {"urlsFrom": {"sitemap": sitemap}}
    assert later["spec"] == {
        "urlsFrom": {"sitemap": sitemap, "lastmodAfter": "2026-03-01T10:10:00Z"}
    }
    assert parent["spec"]["urlsFrom"] == {"sitemap": sitemap, "changedSincePreviousRun": True}


def status_after(plan: Any, runs_after: list[Run], **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "previous": {},
        "schedule_text": "* * * * *",
        "schedule": EVERY_MINUTE,
        "policy": ConcurrencyPolicy.FORBID,
        "plan": plan,
        "runs_after": runs_after,
        "suspended": False,
        "applied": {"schedule": "* * * * *", "timeZone": "UTC", "suspend": False},
        "generation": 1,
        "now": T0 + timedelta(minutes=1, seconds=2),
    }
    arguments.update(overrides)
    return schedule_status(**arguments)


def test_the_status_after_a_start_names_the_active_run_and_the_next_fire_time() -> None:
    plan = check(ConcurrencyPolicy.FORBID, [run(0, "Succeeded")])
    started = run(1)
    status = status_after(plan, [run(0, "Succeeded"), started])
    assert status["phase"] == "Scheduled"
    assert status["lastScheduleTime"] == "2026-03-01T10:01:00Z"
    assert status["nextScheduleTime"] == "2026-03-01T10:02:00Z"
    assert status["active"] == [started.name]
    assert status["lastSuccessfulTime"] == "2026-03-01T10:00:30Z"
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Scheduled")


def test_a_run_pruned_in_the_check_that_saw_it_succeed_still_sets_last_successful_time() -> None:
    done = run(0, "Succeeded")
    plan = check(ConcurrencyPolicy.FORBID, [done], successful_limit=0)
    assert plan.prune == (done,)
    status = status_after(plan, [run(1)])
    assert status["lastSuccessfulTime"] == "2026-03-01T10:00:30Z"


def test_a_skipped_run_is_recorded_in_a_condition_until_a_run_starts() -> None:
    active = run(0, "Running")
    plan = check(ConcurrencyPolicy.FORBID, [active])
    status = status_after(plan, [active], previous={"lastScheduleTime": "2026-03-01T10:00:00Z"})
    assert status["lastScheduleTime"] == "2026-03-01T10:00:00Z"
    assert status["active"] == [active.name]
    skipped = next(c for c in status["conditions"] if c["type"] == RUN_SKIPPED_CONDITION)
    assert skipped["status"] == "True"
    assert skipped["reason"] == "ConcurrencyForbidden"
    assert active.name in skipped["message"]
    assert status["reason"] == "ConcurrencyForbidden"
    assert "2026-03-01T10:01:00Z" in skipped["message"]

    later = check(ConcurrencyPolicy.FORBID, [run(0, "Succeeded")])
    cleared = status_after(later, [run(0, "Succeeded"), run(1)], previous=status)
    assert RUN_SKIPPED_CONDITION not in {c["type"] for c in cleared["conditions"]}


def test_a_suspended_schedule_shows_suspended_and_no_next_time() -> None:
    plan = check(ConcurrencyPolicy.FORBID, [], suspended=True)
    status = status_after(plan, [], suspended=True)
    assert status["phase"] == "Suspended"
    assert status["nextScheduleTime"] is None
    assert status["active"] is None


def test_an_invalid_schedule_fails_the_job_with_ready_false() -> None:
    status = invalid_schedule_status(
        previous={}, message="spec.schedule: minute: 61 is out of range 0-59", generation=1, now=T0
    )
    assert status["phase"] == "Failed"
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSchedule")
    assert "61 is out of range" in ready["message"]
    assert status["reason"] == "InvalidSchedule"
    assert status["message"] == "spec.schedule: minute: 61 is out of range 0-59"


def applied(previous: dict[str, Any], **changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "schedule_text": "0 * * * *",
        "time_zone": None,
        "suspended": False,
        "created_at": T0,
        "now": T0 + timedelta(days=2),
    }
    arguments.update(changes)
    return applied_schedule({"appliedSchedule": previous} if previous else {}, **arguments)


def test_the_first_check_applies_the_schedule_since_the_job_was_created() -> None:
    first = applied({})
    assert first == {
        "schedule": "0 * * * *",
        "timeZone": "UTC",
        "suspend": False,
        "since": "2026-03-01T10:00:00Z",
    }
    assert applied(first) == first


def test_a_changed_schedule_time_zone_or_suspension_applies_from_the_check_that_sees_it() -> None:
    first = applied({})
    for change in (
        {"schedule_text": "0 3 * * *"},
        {"time_zone": "Europe/Berlin"},
        {"suspended": True},
    ):
        assert applied(first, **change)["since"] == "2026-03-03T10:00:00Z", change


def test_fire_times_before_a_schedule_change_are_not_caught_up() -> None:
    # Suspended for two days, then resumed: the hourly fire times in between are not started.
    resumed = {"appliedSchedule": {"since": "2026-03-03T10:00:30Z"}}
    now = datetime(2026, 3, 3, 10, 0, 40, tzinfo=UTC)
    anchor = schedule_anchor(resumed, T0, [run(0, "Succeeded")], now)
    assert anchor == datetime(2026, 3, 3, 10, 0, 30, tzinfo=UTC)
    plan = plan_check(
        parse_schedule("0 * * * *"),
        ConcurrencyPolicy.FORBID,
        anchor=anchor,
        now=now,
        runs=[run(0, "Succeeded")],
        successful_limit=3,
        failed_limit=1,
        suspended=False,
    )
    assert plan.start is None
