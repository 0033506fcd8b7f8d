"""Scheduled ScrapeJobs (spec.schedule) on the real parts: kube-apiserver, PostgreSQL, the
operator process and, where runs must finish, a real long-running `scrapeq worker` scraping a
static loopback site (`render: false`, loopback allowed explicitly).

Each scheduled ScrapeJob creates its runs as child ScrapeJobs labelled
`scrapeq.io/schedule: <parent>`; the tests watch those objects, the parent's status and the
queue's rows. The operator checks schedules every second here (production: 5 s; see
FAST_OPERATOR_ENVIRONMENT).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    WorkerProcesses,
    loopback_site,
    owner_progress,
    scrapejob,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

SCHEDULE_LABEL = "scrapeq.io/schedule"


def _page(path: str) -> bytes:
    return f"<html><body><h1>Page {path}</h1></body></html>".encode()


@pytest.fixture
def site() -> Iterator[str]:
    """A static site on 127.0.0.1 that answers every path with a small page."""
    with loopback_site(_page) as url:
        yield url


@pytest.fixture
def operator(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> Iterator[OperatorProcess]:
    """The operator for this namespace, checking schedules every second. At the end every
    ScrapeJob of the namespace is deleted while it still runs (finalizers need it): scheduled
    ScrapeJobs left behind would go on starting runs under any later cluster-wide operator."""
    # FAST_OPERATOR_ENVIRONMENT checks schedules every second.
    process = operator_factory(empty_database_url)
    yield process
    kubectl.run("delete", "scrapejobs", "--all", "-n", namespace, "--timeout=60s", check=False)


def runs(kubectl: Kubectl, namespace: str, parent: str) -> list[dict[str, Any]]:
    """The run objects of a scheduled ScrapeJob, oldest first."""
    listed = kubectl.run(
        "get", "scrapejobs", "-n", namespace, "-l", f"{SCHEDULE_LABEL}={parent}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return sorted(items, key=lambda item: item["metadata"]["name"])


def phase_of(item: dict[str, Any]) -> str | None:
    return (item.get("status") or {}).get("phase")


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def events(kubectl: Kubectl, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events about one object."""
    listed = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name}",
        "-o",
        "json",
    )
    return [
        (item["type"], item["reason"], item["message"])
        for item in json.loads(listed.stdout)["items"]
    ]


def apply_in(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> str:
    """Create the ScrapeJob in `namespace`; return its uid."""
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    return str(kubectl.get("scrapejob", manifest["metadata"]["name"], namespace)["metadata"]["uid"])


def test_a_scheduled_job_runs_repeatedly_and_keeps_only_its_newest_successful_run(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
    workers: WorkerProcesses,
    site: str,
) -> None:
    workers.start(empty_database_url)
    parent_uid = apply_in(
        kubectl,
        namespace,
        scrapejob(
            "prices",
            urls=[f"{site}/price/1", f"{site}/price/2"],
            render=False,
            extract={"title": {"selector": "h1"}},
            schedule="@every 5s",
            successfulRunsHistoryLimit=1,
        ),
    )

    # Every run object ever seen Succeeded: name -> uid (older ones are pruned as we watch).
    succeeded: dict[str, str] = {}

    def two_runs_succeeded() -> bool:
        for item in runs(kubectl, namespace, "prices"):
            if phase_of(item) == "Succeeded":
                succeeded[item["metadata"]["name"]] = item["metadata"]["uid"]
        return len(succeeded) >= 2

    eventually_blocking(two_runs_succeeded, within=60, every=0.5, what="two runs to succeed")
    first_name, first_uid = min(succeeded.items())

    def history_trimmed() -> bool:
        listed = runs(kubectl, namespace, "prices")
        successful = [item for item in listed if phase_of(item) == "Succeeded"]
        names = {item["metadata"]["name"] for item in listed}
        return first_name not in names and len(successful) == 1

    eventually_blocking(
        history_trimmed, within=30, every=0.5, what="only the newest successful run left"
    )
    # The pruned run's rows stay, results and all, until retention takes them.
    pruned_progress = owner_progress(empty_database_url, first_uid)
    assert (pruned_progress.total, pruned_progress.succeeded) == (2, 2)

    # Each run was a ScrapeJob of its own, controlled by the parent, with the parent's spec
    # minus the schedule fields; its rows were scraped by the real worker.
    newest = next(
        item for item in runs(kubectl, namespace, "prices") if phase_of(item) == "Succeeded"
    )
    (owner,) = newest["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (parent_uid, True)
    assert "schedule" not in newest["spec"]
    assert "successfulRunsHistoryLimit" not in newest["spec"]
    assert newest["status"]["progress"] == "2/2"
    assert any("Page /price/" in item["result"] for item in newest["status"]["preview"])

    status = eventually_blocking(
        lambda: (
            (s := kubectl.get("scrapejob", "prices", namespace).get("status", {})).get(
                "lastSuccessfulTime"
            )
            and s
        ),
        within=20,
        what="the parent's lastSuccessfulTime",
    )
    assert status["phase"] == "Scheduled", operator.log_tail()
    assert status["lastScheduleTime"] <= status["nextScheduleTime"]
    assert condition(status, "Ready")["reason"] == "Scheduled"

    # Deleting the schedule deletes its runs (there is no garbage collector in this cluster).
    kubectl.run("delete", "scrapejob", "prices", "-n", namespace, "--timeout=60s")
    eventually_blocking(
        lambda: runs(kubectl, namespace, "prices") == [],
        within=30,
        what="the runs to be deleted with their schedule",
    )


def test_forbid_starts_no_second_run_while_the_first_is_active(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
) -> None:
    # concurrencyPolicy is left out: Forbid is the default. No worker runs, so the first
    # run stays active (its row pending) for good.
    apply_in(
        kubectl,
        namespace,
        scrapejob("stuck", url="https://stuck.example.com/", schedule="@every 5s"),
    )
    (first,) = eventually_blocking(
        lambda: runs(kubectl, namespace, "stuck"),
        within=30,
        what="the first run",
    )
    first_name = first["metadata"]["name"]
    eventually_blocking(
        lambda: owner_progress(empty_database_url, first["metadata"]["uid"]).total == 1,
        within=30,
        what="the first run's row",
    )

    # Two more fire times come and go, each skipped with an Event of its own (the message
    # names the fire time): still one run, and the schedule says why.
    def two_fire_times_skipped() -> bool:
        names = [item["metadata"]["name"] for item in runs(kubectl, namespace, "stuck")]
        assert names == [first_name]
        skips = {
            message
            for _, reason, message in events(kubectl, namespace, "stuck")
            if reason == "RunSkipped"
        }
        return len(skips) >= 2

    eventually_blocking(two_fire_times_skipped, within=30, every=0.5, what="two skipped fire times")

    status = kubectl.get("scrapejob", "stuck", namespace)["status"]
    assert status["active"] == [first_name]
    assert (
        status["lastScheduleTime"] == first["metadata"]["annotations"]["scrapeq.io/scheduled-time"]
    )
    skipped = condition(status, "RunSkipped")
    assert (skipped.get("status"), skipped.get("reason")) == ("True", "ConcurrencyForbidden")
    assert first_name in skipped["message"]
    assert any(
        reason == "RunSkipped" and first_name in message
        for _, reason, message in events(kubectl, namespace, "stuck")
    )


def test_replace_cancels_the_active_run_and_starts_a_new_one(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
) -> None:
    apply_in(
        kubectl,
        namespace,
        scrapejob(
            "fresh",
            url="https://fresh.example.com/",
            schedule="@every 5s",
            concurrencyPolicy="Replace",
        ),
    )
    (first,) = eventually_blocking(
        lambda: runs(kubectl, namespace, "fresh"), within=30, what="the first run"
    )
    first_uid = first["metadata"]["uid"]
    eventually_blocking(
        lambda: owner_progress(empty_database_url, first_uid).total == 1,
        within=30,
        what="the first run's row",
    )

    def replaced() -> list[dict[str, Any]]:
        listed = runs(kubectl, namespace, "fresh")
        uids = {item["metadata"]["uid"] for item in listed}
        return listed if listed and first_uid not in uids else []

    (second, *_) = eventually_blocking(replaced, within=30, what="the first run to be replaced")
    assert second["metadata"]["name"] > first["metadata"]["name"]
    progress = owner_progress(empty_database_url, first_uid)
    assert (progress.total, progress.cancelled) == (1, 1)
    eventually_blocking(
        lambda: (
            second["metadata"]["name"]
            in (kubectl.get("scrapejob", "fresh", namespace).get("status", {}).get("active") or [])
        ),
        within=20,
        what="the new run to be the active one",
    )
    assert any(
        reason == "RunReplaced" and first["metadata"]["name"] in message
        for _, reason, message in events(kubectl, namespace, "fresh")
    )


def test_an_invalid_schedule_makes_the_job_not_ready_and_starts_no_run(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator: OperatorProcess,
) -> None:
    # Five fields, so the API server's shape check lets it through; minute 61 does not exist.
    apply_in(
        kubectl,
        namespace,
        scrapejob("typo", url="https://typo.example.com/", schedule="61 * * * *"),
    )

    def not_ready() -> dict[str, Any]:
        status = kubectl.get("scrapejob", "typo", namespace).get("status", {})
        ready = condition(status, "Ready")
        return ready if ready.get("reason") == "InvalidSchedule" else {}

    ready = eventually_blocking(not_ready, within=30, what="Ready=False InvalidSchedule")
    assert ready["status"] == "False"
    assert "minute: 61 is out of range 0-59" in ready["message"]
    assert any(
        (type_, reason) == ("Warning", "InvalidSchedule")
        for type_, reason, _ in events(kubectl, namespace, "typo")
    )
    assert runs(kubectl, namespace, "typo") == []


def test_a_suspended_schedule_starts_no_run(
    kubectl: Kubectl,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    apply_in(
        kubectl,
        namespace,
        scrapejob("paused", url="https://paused.example.com/", schedule="@every 5s", suspend=True),
    )
    # The same schedule, not suspended: its runs show when fire times have passed.
    apply_in(
        kubectl,
        namespace,
        scrapejob(
            "control",
            url="https://control.example.com/",
            schedule="@every 5s",
            concurrencyPolicy="Allow",
        ),
    )
    status = eventually_blocking(
        lambda: (
            (s := kubectl.get("scrapejob", "paused", namespace).get("status", {})).get("phase")
            == "Suspended"
            and s
        ),
        within=30,
        what="phase Suspended",
    )
    assert condition(status, "Ready")["reason"] == "Suspended"
    assert "nextScheduleTime" not in status

    # Two fire times later (the control has started two runs) there is still no run.
    def control_ran_twice() -> bool:
        assert runs(kubectl, namespace, "paused") == []
        return len(runs(kubectl, namespace, "control")) >= 2

    eventually_blocking(
        control_ran_twice, within=30, every=0.5, what="two runs of the control schedule"
    )
    assert runs(kubectl, namespace, "paused") == []
