"""What a job's `keep` asks of the engines, decided before any page is fetched, and the pointer
a row keeps of a result stored as an object (worker/scrapeq_worker/artifacts.py)."""

from __future__ import annotations

import pytest
from scrapeq_worker.artifacts import (
    RESULT_OBJECT_MAX_BYTES,
    TEXT_MAX_CHARS,
    Artifacts,
    pointer_document,
)
from scrapeq_worker.errors import BadInput, PermanentFailure
from scrapeq_worker.extraction import (
    TEXT_SAMPLE_CHARACTERS,
    ExtractedPage,
    PageOutcome,
    parse_fields,
)
from scrapeq_worker.job_options import JobOptions
from scrapeq_worker.object_store import ObjectStore, ObjectStoreConfig, StoredObject

pytestmark = pytest.mark.timeout(30)

ROW_LIMIT = 256 * 1024
PAGE_LIMIT = 10 * 1024 * 1024
# Never contacted: prepare and take_text only look at whether there is one.
STORE = ObjectStore(ObjectStoreConfig(bucket="results", endpoint="http://127.0.0.1:9"))


def artifacts(*, store: ObjectStore | None) -> Artifacts:
    return Artifacts(store=store, html_limit=PAGE_LIMIT, max_result_bytes=ROW_LIMIT)


def test_without_a_store_html_and_text_are_read_only_up_to_the_rows_limit() -> None:
    options = artifacts(store=None).prepare(JobOptions(keep=frozenset({"html", "text"})))
    assert (options.html_limit, options.text_chars) == (ROW_LIMIT, ROW_LIMIT)
    assert options.result_chars == 0


def test_with_a_store_html_text_and_the_result_may_be_larger_than_the_row() -> None:
    options = artifacts(store=STORE).prepare(JobOptions(keep=frozenset({"html", "text"})))
    assert (options.html_limit, options.text_chars) == (PAGE_LIMIT, TEXT_MAX_CHARS)
    assert options.result_chars == RESULT_OBJECT_MAX_BYTES


def test_a_job_that_keeps_nothing_reads_no_html_and_no_text() -> None:
    options = artifacts(store=STORE).prepare(JobOptions())
    assert (options.html_limit, options.text_chars) == (0, 0)


@pytest.mark.parametrize("capture", ["screenshot", "pdf"])
def test_a_capture_without_a_store_fails_for_good_before_the_page_is_fetched(
    capture: str,
) -> None:
    with pytest.raises(PermanentFailure) as raised:
        artifacts(store=None).prepare(JobOptions(keep=frozenset({"html", capture})))
    assert raised.value.reason == "artifact_needs_object_store"
    assert f"keep: {capture} needs an object store" in raised.value.message


def test_a_capture_of_a_page_that_is_not_rendered_is_bad_input() -> None:
    with pytest.raises(BadInput) as raised:
        artifacts(store=STORE).prepare(
            JobOptions(render=False, keep=frozenset({"screenshot", "pdf"}))
        )
    assert raised.value.message == "keep: screenshot and pdf need a rendered page (render: true)"


def _outcome(text: str) -> PageOutcome:
    return PageOutcome(
        url="https://a.example/",
        final_url="https://a.example/",
        status=200,
        content_type="text/html",
        extracted=ExtractedPage(text_sample=text),
        timing_ms={},
    )


def test_the_text_artifact_is_taken_out_and_a_job_without_fields_keeps_its_sample() -> None:
    plan = artifacts(store=STORE)
    options = plan.prepare(JobOptions(keep=frozenset({"text"})))
    outcome = _outcome("x" * 5000)
    assert plan.take_text(outcome, options) == "x" * 5000
    assert outcome.extracted is not None
    assert outcome.extracted.text_sample == "x" * TEXT_SAMPLE_CHARACTERS


def test_a_job_with_fields_gets_the_text_artifact_and_no_sample() -> None:
    plan = artifacts(store=STORE)
    options = plan.prepare(JobOptions(keep=frozenset({"text"}), fields=parse_fields({"h": "h1"})))
    outcome = _outcome("page text")
    assert plan.take_text(outcome, options) == "page text"
    assert outcome.extracted is not None
    assert outcome.extracted.text_sample is None


def test_a_pointer_keeps_the_pages_identity_its_artifacts_and_where_the_result_is() -> None:
    document = {
        "url": "https://a.example/",
        "final_url": "https://a.example/",
        "status": 200,
        "content_type": "text/html",
        "engine": "http",
        "rendered": True,
        "title": "t" * 5000,
        "fields": {"big": "x" * 1000},
        "artifacts": {"html": {"key": "k", "bytes": 1, "sha256": "s"}},
    }
    stored = StoredObject(key="p/q/1/result.json", bytes=999, sha256="ab")
    pointer = pointer_document(document, stored)
    assert pointer["result_object"] == {"key": "p/q/1/result.json", "bytes": 999, "sha256": "ab"}
    assert pointer["artifacts"] == document["artifacts"]
    assert len(pointer["title"]) == 1000
    assert "fields" not in pointer
