"""Which queues are reported as having due rows and no worker pool (pure bookkeeping)."""

from __future__ import annotations

from scrapeq_operator.queue_coverage import QueueCoverage
from scrapeq_queue.rows import QueueBacklog


def due(count: int) -> QueueBacklog:
    return QueueBacklog(
        due_pending=count, delayed_pending=0, processing=0, oldest_due_age_seconds=1.0
    )


def test_a_queue_with_due_rows_and_no_pool_is_reported_after_the_grace_period() -> None:
    coverage = QueueCoverage(grace_seconds=30)
    assert coverage.update(["default"], {"default": due(3), "shop": due(2)}, now=0).unserved == ()
    assert coverage.update(["default"], {"shop": due(2)}, now=29).unserved == ()
    change = coverage.update(["default"], {"shop": due(2)}, now=30)
    assert change.unserved == ("shop",)
    assert coverage.reported == {"shop"}
    assert coverage.update(["default"], {"shop": due(2)}, now=31).unserved == ()


def test_a_reported_queue_clears_when_a_pool_serves_it() -> None:
    coverage = QueueCoverage(grace_seconds=0)
    coverage.update([], {"shop": due(1)}, now=0)
    change = coverage.update(["shop"], {"shop": due(1)}, now=1)
    assert change.cleared == ("shop",)
    assert coverage.reported == frozenset()


def test_a_queue_without_due_rows_is_never_reported() -> None:
    coverage = QueueCoverage(grace_seconds=0)
    assert coverage.update([], {"shop": due(0)}, now=0).unserved == ()


def test_a_pool_that_appears_within_the_grace_period_is_never_reported() -> None:
    coverage = QueueCoverage(grace_seconds=30)
    coverage.update([], {"shop": due(1)}, now=0)
    coverage.update(["shop"], {"shop": due(1)}, now=10)
    # The pool went away again: the grace period starts anew.
    assert coverage.update([], {"shop": due(1)}, now=35).unserved == ()
