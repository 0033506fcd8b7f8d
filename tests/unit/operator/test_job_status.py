"""How a ScrapeJob's status follows its rows: phases, DONE text, conditions, patches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scrapeq_operator.job_status import (
    PREVIEW_ITEMS,
    PREVIEW_RESULT_CHARS,
    Phase,
    build_status,
    decide_phase,
    merge_conditions,
    parse_time,
    patch_due,
    progress_text,
    status_changes,
)
from scrapeq_queue import OwnerProgress, ResultPreview

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def preview(url: str, result: Any) -> ResultPreview:
    """A recent result as the queue reports it (only its URL and result reach the status)."""
    return ResultPreview(job_id=1, url=url, result=result, finished_at=NOW)


def test_a_job_without_rows_is_pending() -> None:
    assert decide_phase(OwnerProgress(), 0) is Phase.PENDING


def test_a_job_whose_rows_all_wait_for_a_first_attempt_is_pending() -> None:
    assert decide_phase(OwnerProgress(total=3, pending=3), 0) is Phase.PENDING


def test_a_job_with_a_row_in_flight_is_running() -> None:
    assert decide_phase(OwnerProgress(total=3, pending=2, processing=1), 0) is Phase.RUNNING


def test_a_job_with_a_retry_pending_is_running_not_complete() -> None:
    counts = OwnerProgress(total=2, succeeded=1, retrying=1)
    assert decide_phase(counts, 100) is Phase.RUNNING


def test_a_job_whose_rows_all_succeeded_is_succeeded() -> None:
    assert decide_phase(OwnerProgress(total=3, succeeded=3), 0) is Phase.SUCCEEDED


def test_one_failed_row_fails_the_job_by_default() -> None:
    assert decide_phase(OwnerProgress(total=100, succeeded=99, failed=1), 0) is Phase.FAILED


def test_failures_within_the_allowed_percentage_still_succeed() -> None:
    assert decide_phase(OwnerProgress(total=100, succeeded=95, failed=5), 5) is Phase.SUCCEEDED
    assert decide_phase(OwnerProgress(total=100, succeeded=94, failed=6), 5) is Phase.FAILED


def test_cancelled_rows_make_a_finished_job_cancelled() -> None:
    assert decide_phase(OwnerProgress(total=3, succeeded=1, cancelled=2), 0) is Phase.CANCELLED


def test_done_counts_every_finished_row_out_of_all_rows() -> None:
    assert progress_text(OwnerProgress(total=120, succeeded=30, failed=7, pending=83)) == "37/120"


def test_done_says_the_rows_so_far_with_a_plus_while_a_source_expands() -> None:
    counts = OwnerProgress(total=5001, succeeded=12, processing=1, pending=4988, expanding=1)
    assert progress_text(counts) == "12/5001+"
    status = build_status(
        counts, previous={}, generation=1, allowed_failure_percent=0, queue="default", now=NOW
    )
    assert (status["phase"], status["total"], status["expanding"]) == ("Running", 5001, 1)
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["message"] == (
        "5001 URLs queued on queue default so far; sources still expanding: 1"
    )


def test_done_says_n_of_n_and_expanding_is_unset_once_every_source_ended() -> None:
    counts = OwnerProgress(total=5001, succeeded=13, pending=4988)
    assert progress_text(counts) == "13/5001"
    status = build_status(
        counts, previous={}, generation=1, allowed_failure_percent=0, queue="default", now=NOW
    )
    assert status["expanding"] is None


def test_a_succeeded_status_has_counts_times_and_a_complete_condition() -> None:
    started = NOW - timedelta(minutes=5)
    finished = NOW - timedelta(seconds=2)
    counts = OwnerProgress(
        total=2,
        succeeded=2,
        first_started_at=started,
        last_finished_at=finished,
        preview=(preview("https://a.example/", {"title": "A"}),),
    )
    status = build_status(
        counts, previous={}, generation=1, allowed_failure_percent=0, queue="default", now=NOW
    )
    assert status["phase"] == "Succeeded"
    assert status["progress"] == "2/2"
    assert status["startTime"] == "2026-11-30T08:55:00Z"
    assert status["completionTime"] == "2026-11-30T08:59:58Z"
    assert status["preview"] == [{"url": "https://a.example/", "result": '{"title":"A"}'}]
    (complete,) = [c for c in status["conditions"] if c["type"] == "Complete"]
    assert complete["status"] == "True"
    assert complete["reason"] == "Succeeded"
    assert complete["observedGeneration"] == 1


def test_a_running_status_has_no_completion_time_and_no_terminal_condition() -> None:
    status = build_status(
        OwnerProgress(total=2, processing=1, pending=1),
        previous={},
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW,
    )
    assert status["phase"] == "Running"
    assert status["completionTime"] is None
    assert [c["type"] for c in status["conditions"]] == ["Ready"]


def test_a_failed_status_names_the_last_error() -> None:
    status = build_status(
        OwnerProgress(total=1, failed=1, last_error="HTTP 500 from https://x.example/"),
        previous={},
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW,
    )
    assert status["phase"] == "Failed"
    assert status["lastError"] == "HTTP 500 from https://x.example/"
    (failed,) = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert "HTTP 500" in failed["message"]
    assert status["reason"] == "URLsFailed"
    assert status["message"] == "1 of 1 URLs failed; last error: HTTP 500 from https://x.example/"


def _shop_status(counts: OwnerProgress, previous: dict[str, Any], unserved: bool) -> dict[str, Any]:
    return build_status(
        counts,
        previous=previous,
        generation=1,
        allowed_failure_percent=0,
        queue="shop",
        now=NOW,
        queue_unserved=unserved,
    )


def test_rows_waiting_on_a_queue_no_pool_serves_make_the_job_stalled_until_one_does() -> None:
    stalled = _shop_status(OwnerProgress(total=2, pending=2), {}, unserved=True)
    (condition,) = [c for c in stalled["conditions"] if c["type"] == "Stalled"]
    assert (condition["status"], condition["reason"]) == ("True", "NoWorkerPool")
    assert "no worker pool serves queue shop" in condition["message"]
    assert stalled["reason"] == "NoWorkerPool"
    assert stalled["message"].startswith("no worker pool serves queue shop")
    assert len(stalled["message"]) <= 120

    served = _shop_status(OwnerProgress(total=2, pending=2), stalled, unserved=False)
    assert "Stalled" not in {c["type"] for c in served["conditions"]}
    assert (served["reason"], served["message"]) == (None, None)


def test_a_job_whose_rows_are_all_in_flight_is_not_stalled() -> None:
    status = _shop_status(OwnerProgress(total=1, processing=1), {}, unserved=True)
    assert "Stalled" not in {c["type"] for c in status["conditions"]}


def test_queued_rows_turn_a_not_ready_job_ready() -> None:
    not_ready = {
        "type": "Ready",
        "status": "False",
        "reason": "ConfigMapNotFound",
        "message": "missing",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-11-30T08:00:00Z",
    }
    status = build_status(
        OwnerProgress(total=2, pending=2),
        previous={"conditions": [not_ready]},
        generation=1,
        allowed_failure_percent=0,
        queue="shop",
        now=NOW,
    )
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("True", "Enqueued")
    assert ready["message"] == "2 URLs queued on queue shop"
    assert ready["lastTransitionTime"] == "2026-11-30T09:00:00Z"


def test_conditions_set_by_others_are_kept() -> None:
    other = {
        "type": "Archived",
        "status": "True",
        "reason": "Exported",
        "message": "to S3",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-11-30T08:00:00Z",
    }
    status = build_status(
        OwnerProgress(total=2, succeeded=2),
        previous={"conditions": [other]},
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW,
    )
    assert status["conditions"][0] == other
    assert [c["type"] for c in status["conditions"]] == ["Archived", "Ready", "Complete"]


def test_previews_are_few_and_short() -> None:
    previews = tuple(preview(f"https://e.example/{n}", "x" * 5000) for n in range(10))
    status = build_status(
        OwnerProgress(total=10, succeeded=10, preview=previews),
        previous={},
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW,
    )
    assert len(status["preview"]) == PREVIEW_ITEMS
    assert all(len(item["result"]) == PREVIEW_RESULT_CHARS for item in status["preview"])


def test_an_unchanged_condition_keeps_its_transition_time() -> None:
    old = [
        {
            "type": "Complete",
            "status": "True",
            "reason": "Succeeded",
            "message": "a",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    new = [
        {
            "type": "Complete",
            "status": "True",
            "reason": "Succeeded",
            "message": "b",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-11-30T09:00:00Z",
        }
    ]
    (merged,) = merge_conditions(old, new)
    assert merged["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert merged["message"] == "b"


def test_a_changed_condition_gets_a_new_transition_time() -> None:
    old = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "ConfigMapNotFound",
            "message": "a",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    new = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Enqueued",
            "message": "b",
            "lastTransitionTime": "2026-11-30T09:00:00Z",
        }
    ]
    (merged,) = merge_conditions(old, new)
    assert merged["lastTransitionTime"] == "2026-11-30T09:00:00Z"


def test_an_identical_status_needs_no_patch() -> None:
    status = build_status(
        OwnerProgress(total=2, succeeded=2),
        previous={},
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW,
    )
    again = build_status(
        OwnerProgress(total=2, succeeded=2),
        previous=status,
        generation=1,
        allowed_failure_percent=0,
        queue="default",
        now=NOW + timedelta(minutes=1),
    )
    assert status_changes(status, again) == {}


def test_a_patch_carries_only_changed_keys_and_nulls_for_cleared_ones() -> None:
    previous = {"phase": "Running", "total": 2, "lastError": "boom"}
    wanted = {"phase": "Succeeded", "total": 2, "lastError": None, "preview": None}
    assert status_changes(previous, wanted) == {"phase": "Succeeded", "lastError": None}


@pytest.mark.parametrize("phase", [Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED])
def test_finished_phases_are_terminal(phase: Phase) -> None:
    assert phase.terminal


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.RUNNING])
def test_unfinished_phases_are_not_terminal(phase: Phase) -> None:
    assert not phase.terminal


def test_a_young_unfinished_job_waits_for_its_first_status_patch() -> None:
    created = NOW - timedelta(seconds=1)
    assert not patch_due(
        terminal=False, last_patch_at=None, created_at=created, now=NOW, min_interval_seconds=3
    )
    assert patch_due(
        terminal=False,
        last_patch_at=None,
        created_at=created,
        now=NOW + timedelta(seconds=2),
        min_interval_seconds=3,
    )


def test_a_job_whose_rows_came_late_waits_from_when_they_came() -> None:
    # Created long ago, its rows just seen (a busy operator, a dependency that just finished):
    # a job that finishes within the interval still gets only its final status.
    created = NOW - timedelta(seconds=30)
    seen = NOW - timedelta(seconds=1)
    assert not patch_due(
        terminal=False,
        last_patch_at=None,
        created_at=created,
        now=NOW,
        min_interval_seconds=3,
        rows_seen_at=seen,
    )
    assert patch_due(
        terminal=False,
        last_patch_at=None,
        created_at=created,
        now=NOW + timedelta(seconds=2),
        min_interval_seconds=3,
        rows_seen_at=seen,
    )
    # Rows seen before the object's creation time (clocks apart): counted from the creation.
    assert not patch_due(
        terminal=False,
        last_patch_at=None,
        created_at=NOW,
        now=NOW + timedelta(seconds=2),
        min_interval_seconds=3,
        rows_seen_at=NOW - timedelta(seconds=10),
    )


def test_an_unfinished_job_is_patched_at_most_once_per_interval() -> None:
    last = NOW - timedelta(seconds=2)
    created = NOW - timedelta(hours=1)
    assert not patch_due(
        terminal=False, last_patch_at=last, created_at=created, now=NOW, min_interval_seconds=3
    )


def test_a_finished_job_is_patched_at_once() -> None:
    assert patch_due(
        terminal=True, last_patch_at=NOW, created_at=NOW, now=NOW, min_interval_seconds=3
    )


def test_kubernetes_times_are_parsed_with_their_zone() -> None:
    assert parse_time("2026-11-30T09:00:00Z") == NOW
    assert parse_time(None) is None
    assert parse_time("yesterday") is None
