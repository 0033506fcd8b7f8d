"""The status the operator writes on a SitePolicy: Applied=True once the queue holds its
generation, Applied=False (InvalidSpec) saying what is wrong when its spec cannot be kept, and
no write when the status already says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from scrapeq_operator.site_policy_spec import site_policy, site_policy_status, status_differs

pytestmark = pytest.mark.timeout(10)

NOW = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def test_a_policy_written_into_the_queue_is_applied_for_its_generation() -> None:
    status = site_policy_status({}, generation=3, problem=None, now=NOW)
    assert status["observedGeneration"] == 3
    [applied] = status["conditions"]
    assert (applied["type"], applied["status"], applied["reason"]) == ("Applied", "True", "Applied")
    assert applied["observedGeneration"] == 3
    assert applied["lastTransitionTime"] == "2026-12-04T10:00:00Z"


def test_a_spec_that_cannot_be_kept_says_what_is_wrong_and_that_the_old_policy_holds() -> None:
    with pytest.raises(ValueError, match="sites must be a list of strings") as refused:
        site_policy("broken", {"sites": "example.com"})
    status = site_policy_status({}, generation=2, problem=str(refused.value), now=NOW)
    [applied] = status["conditions"]
    assert (applied["status"], applied["reason"]) == ("False", "InvalidSpec")
    assert applied["message"] == (
        "site policy broken: sites must be a list of strings; the policy is kept as it was"
    )


def test_a_status_that_already_says_so_is_not_written_again() -> None:
    first = site_policy_status({}, generation=1, problem=None, now=NOW)
    later = NOW + timedelta(minutes=5)
    again = site_policy_status(first, generation=1, problem=None, now=later)
    # The condition keeps its lastTransitionTime while its status holds: nothing to write.
    assert again == first
    assert not status_differs(first, again)
    # A new generation is written, and the condition still keeps its transition time.
    newer = site_policy_status(first, generation=2, problem=None, now=later)
    assert status_differs(first, newer)
    assert newer["conditions"][0]["lastTransitionTime"] == "2026-12-04T10:00:00Z"
    # Going invalid is a transition.
    invalid = site_policy_status(newer, generation=3, problem="bad", now=later)
    assert invalid["conditions"][0]["lastTransitionTime"] == "2026-12-04T10:05:00Z"
