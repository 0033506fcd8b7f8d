"""What the status sync knows of a ScrapeJob, read from the object the watch delivers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scrapeq_operator.status_sync import IndexDirectory, JobRef, job_ref

BODY: dict[str, Any] = {
    "metadata": {
        "uid": "u-1",
        "namespace": "shop",
        "name": "laptops",
        "resourceVersion": "42",
        "generation": 1,
        "creationTimestamp": "2026-11-30T09:00:00Z",
    },
    "spec": {"urls": ["https://a.example/"], "queue": "fast", "allowedFailurePercent": 5},
    "status": {"phase": "Running"},
}


def test_a_job_ref_carries_what_the_status_sync_needs() -> None:
    ref = job_ref(BODY)
    assert (ref.uid, ref.namespace, ref.name, ref.resource_version) == (
        "u-1",
        "shop",
        "laptops",
        "42",
    )
    assert (ref.queue, ref.allowed_failure_percent, ref.first_url) == (
        "fast",
        5,
        "https://a.example/",
    )
    assert ref.created_at == datetime(2026, 11, 30, 9, tzinfo=UTC)
    assert not ref.deleting
    assert not ref.finished


def test_a_job_ref_gives_the_status_as_the_watch_showed_it_and_a_fresh_copy_each_time() -> None:
    status = {
        "phase": "Running",
        "observedGeneration": 1,
        "succeeded": 3,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Enqueued"}],
        "preview": [{"url": "https://a.example/é", "data": {"title": "Ünïcode"}}],
    }
    ref = job_ref({**BODY, "status": status})
    assert ref.status == status
    assert (ref.phase, ref.observed_generation) == ("Running", 1)
    ref.status["conditions"].clear()
    assert ref.status == status
    assert job_ref({**BODY, "status": None}).status == {}


def test_a_job_in_a_terminal_phase_for_its_generation_is_finished() -> None:
    body = {**BODY, "status": {"phase": "Succeeded", "observedGeneration": 1}}
    assert job_ref(body).finished
    # Of an earlier generation: the new spec has not been looked at yet.
    body = {**BODY, "metadata": {**BODY["metadata"], "generation": 2}, "status": body["status"]}
    assert not job_ref(body).finished


def test_a_job_being_deleted_is_marked() -> None:
    body = {**BODY, "metadata": {**BODY["metadata"], "deletionTimestamp": "2026-11-30T10:00:00Z"}}
    assert job_ref(body).deleting


def test_the_directory_reads_the_latest_entry_of_the_kopf_index() -> None:
    older = job_ref(BODY)
    newer = job_ref({**BODY, "metadata": {**BODY["metadata"], "resourceVersion": "43"}})
    index: dict[str, list[JobRef]] = {"u-1": [older, newer], "u-2": []}
    directory = IndexDirectory(index)
    found = directory.get("u-1")
    assert found is not None
    assert found.resource_version == "43"
    assert directory.get("u-2") is None
    assert directory.get("missing") is None
    assert [ref.uid for ref in directory.all()] == ["u-1"]
