"""The retry delay: exponential with jitter, a Retry-After hint wins, always capped."""

from __future__ import annotations

from scrapeq_queue import JITTER_RANGE, MAX_RETRY_DELAY_SECONDS, backoff_delay_seconds


def test_the_delay_doubles_with_every_retry() -> None:
    delays = [backoff_delay_seconds(n, 10.0) for n in range(4)]
    assert delays == [10.0, 20.0, 40.0, 80.0]


def test_jitter_only_shortens_the_delay_within_its_range() -> None:
    low, high = JITTER_RANGE
    assert backoff_delay_seconds(2, 10.0, jitter=low) == 40.0 * low
    assert backoff_delay_seconds(2, 10.0, jitter=high) == 40.0


def test_retry_after_wins_over_the_schedule() -> None:
    assert backoff_delay_seconds(5, 10.0, retry_after_seconds=3.0) == 3.0


def test_the_delay_never_exceeds_the_cap() -> None:
    assert backoff_delay_seconds(30, 10.0) == MAX_RETRY_DELAY_SECONDS
    assert backoff_delay_seconds(0, 10.0, retry_after_seconds=86_400) == MAX_RETRY_DELAY_SECONDS
