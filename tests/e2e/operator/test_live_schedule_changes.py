"""The operational fields of a scheduled ScrapeJob change on the live object, on the real parts
(kube-apiserver, PostgreSQL, the operator process): suspend, schedule, timeZone,
concurrencyPolicy and the history limits; what it scrapes stays immutable, refused with a
message that says what may change. `kubectl get -o wide` shows SCHEDULE and LAST SCHEDULE.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.operator.operator_parts import Kubectl, scrapejob, wait_for_status

# The operator of test_schedules.py: schedules checked every second, and the namespace's
# ScrapeJobs deleted while it still runs, so no schedule outlives the test.
from tests.e2e.operator.test_schedules import operator  # noqa: F401
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]


def _patch(kubectl: Kubectl, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return kubectl.run(
        "patch",
        "scrapejob",
        name,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": spec}),
        check=False,
    )


def _runs(kubectl: Kubectl, namespace: str, parent: str) -> list[str]:
    listed = kubectl.run(
        "get", "scrapejobs", "-n", namespace, "-l", f"scrapeq.io/schedule={parent}", "-o", "name"
    )
    return listed.stdout.split()


def _create(kubectl: Kubectl, namespace: str, name: str, **spec: Any) -> None:
    manifest = scrapejob(name, url="https://shop.example.com/", render=False, **spec)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("operator")
def test_a_suspended_schedule_is_resumed_and_suspended_again_on_the_live_object(
    kubectl: Kubectl, namespace: str
) -> None:
    _create(kubectl, namespace, "prices", schedule="@every 5s", suspend=True)
    wait_for_status(
        kubectl,
        namespace,
        "prices",
        lambda status: status.get("phase") == "Suspended",
        what="the schedule to show Suspended",
    )
    assert _runs(kubectl, namespace, "prices") == []

    assert _patch(kubectl, namespace, "prices", {"suspend": False}).returncode == 0
    resumed = wait_for_status(
        kubectl,
        namespace,
        "prices",
        lambda status: status.get("phase") == "Scheduled",
        what="the schedule to resume",
    )
    assert resumed["appliedSchedule"]["suspend"] is False
    since = datetime.fromisoformat(resumed["appliedSchedule"]["since"])
    # Fire times that passed while suspended are not caught up: the first run comes one
    # interval after the resume at the earliest.
    names = eventually_blocking(
        lambda: _runs(kubectl, namespace, "prices"), within=30, what="a first run"
    )
    first = int(names[0].rsplit("-", 1)[1])
    assert first >= since.timestamp() + 5

    assert _patch(kubectl, namespace, "prices", {"suspend": True}).returncode == 0
    suspended = wait_for_status(
        kubectl,
        namespace,
        "prices",
        lambda status: status.get("phase") == "Suspended",
        what="the schedule to be suspended again",
    )
    assert "nextScheduleTime" not in suspended


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("operator")
def test_schedule_time_zone_policy_and_history_limits_change_on_the_live_object(
    kubectl: Kubectl, namespace: str
) -> None:
    _create(kubectl, namespace, "nightly", schedule="0 3 * * *")
    wait_for_status(
        kubectl,
        namespace,
        "nightly",
        lambda status: status.get("nextScheduleTime"),
        what="a first nextScheduleTime",
    )
    change = {
        "schedule": "30 2 * * *",
        "timeZone": "Europe/Berlin",
        "concurrencyPolicy": "Replace",
        "successfulRunsHistoryLimit": 7,
        "failedRunsHistoryLimit": 2,
    }
    result = _patch(kubectl, namespace, "nightly", change)
    assert result.returncode == 0, result.stderr

    status = wait_for_status(
        kubectl,
        namespace,
        "nightly",
        lambda status: status.get("appliedSchedule", {}).get("timeZone") == "Europe/Berlin",
        what="the new schedule to take effect",
    )
    assert status["appliedSchedule"]["schedule"] == "30 2 * * *"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "(Europe/Berlin), concurrencyPolicy Replace" in ready["message"]
    next_time = datetime.fromisoformat(status["nextScheduleTime"]).astimezone(
        ZoneInfo("Europe/Berlin")
    )
    # 02:30 Berlin time, or 03:30 on the night the clocks skip 02:30.
    assert (next_time.hour, next_time.minute) in {(2, 30), (3, 30)}
    assert datetime.fromisoformat(status["nextScheduleTime"]) > datetime.now(UTC)

    wide = kubectl.run("get", "scrapejobs", "nightly", "-n", namespace, "-o", "wide").stdout
    header, row = wide.splitlines()[:2]
    assert "SCHEDULE" in header
    assert "LAST SCHEDULE" in header
    assert "30 2 * * *" in row


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("operator")
def test_an_unknown_time_zone_fails_the_schedule_until_it_is_fixed(
    kubectl: Kubectl, namespace: str
) -> None:
    _create(kubectl, namespace, "typo", schedule="0 3 * * *", timeZone="Europe/Berln")
    failed = wait_for_status(
        kubectl,
        namespace,
        "typo",
        lambda status: status.get("reason") == "InvalidSchedule",
        what="the unknown time zone to be reported",
    )
    assert failed["phase"] == "Failed"
    assert "unknown time zone 'Europe/Berln'" in failed["message"]
    row = kubectl.run("get", "scrapejobs", "typo", "-n", namespace).stdout.splitlines()[1]
    assert "InvalidSchedule" in row

    assert _patch(kubectl, namespace, "typo", {"timeZone": "Europe/Berlin"}).returncode == 0
    fixed = wait_for_status(
        kubectl,
        namespace,
        "typo",
        lambda status: status.get("phase") == "Scheduled",
        what="the fixed schedule to run",
    )
    assert "reason" not in fixed


def test_what_a_job_scrapes_cannot_change_and_the_message_says_what_can(
    kubectl: Kubectl, namespace: str
) -> None:
    _create(kubectl, namespace, "fixed-schedule", schedule="@hourly")
    refused = _patch(kubectl, namespace, "fixed-schedule", {"url": "https://other.example.com/"})
    assert refused.returncode != 0
    assert "spec is immutable except suspend, schedule, timeZone" in refused.stderr

    removed = _patch(kubectl, namespace, "fixed-schedule", {"schedule": None})
    assert removed.returncode != 0
    assert "spec.schedule cannot be added to or removed" in removed.stderr

    _create(kubectl, namespace, "one-off")
    added = _patch(kubectl, namespace, "one-off", {"schedule": "@hourly"})
    assert added.returncode != 0
    assert "spec.schedule cannot be added to or removed" in added.stderr
    suspended = _patch(kubectl, namespace, "one-off", {"suspend": True})
    assert suspended.returncode != 0
    assert "only apply with spec.schedule" in suspended.stderr

    bad_zone = _patch(kubectl, namespace, "fixed-schedule", {"timeZone": "not a zone"})
    assert bad_zone.returncode != 0
    assert "timeZone must be an IANA time zone name" in bad_zone.stderr
