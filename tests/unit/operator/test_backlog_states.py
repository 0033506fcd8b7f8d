"""The backlog gauge's states partition a queue's live rows, so a sum over them is right."""

from __future__ import annotations

from scrapeq_operator.autoscaler import backlog_states
from scrapeq_queue.rows import QueueBacklog


def test_due_rows_are_either_startable_or_throttled_and_the_states_add_up_to_every_live_row() -> (
    None
):
    backlog = QueueBacklog(
        due_pending=10, delayed_pending=3, processing=2, oldest_due_age_seconds=5.0, startable_due=4
    )
    states = backlog_states(backlog)
    assert states == {"startable": 4, "throttled": 6, "delayed": 3, "processing": 2}
    assert sum(states.values()) == 10 + 3 + 2


def test_a_queue_whose_sites_are_not_counted_has_every_due_row_startable() -> None:
    backlog = QueueBacklog(due_pending=7, delayed_pending=0, processing=1, oldest_due_age_seconds=1)
    assert backlog_states(backlog) == {
        "startable": 7,
        "throttled": 0,
        "delayed": 0,
        "processing": 1,
    }
