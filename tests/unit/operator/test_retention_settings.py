"""Retention settings of the operator: defaults, environment variables, what is refused, and
that an interval of 0 turns the loop off."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

import pytest
from scrapeq_operator.errors import ConfigurationError
from scrapeq_operator.retention import Retention
from scrapeq_operator.settings import OperatorSettings

DATABASE = {"DATABASE_URL": "postgresql://db/x"}


def test_retention_defaults_prune_hourly_keeping_a_week_and_ten_thousand_failures() -> None:
    settings = OperatorSettings.from_environment(DATABASE)
    assert settings.prune_interval_seconds == 3600
    assert settings.retain_completed_days == 7
    assert settings.retain_failed_last == 10_000
    assert settings.retain_idle_sites_days == 7


def test_retention_settings_come_from_the_environment() -> None:
    settings = OperatorSettings.from_environment(
        {
            **DATABASE,
            "SCRAPEQ_OPERATOR_PRUNE_INTERVAL_SECONDS": "0",
            "SCRAPEQ_OPERATOR_RETAIN_COMPLETED_DAYS": "0.5",
            "SCRAPEQ_OPERATOR_RETAIN_FAILED_LAST": "0",
            "SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS": "0",
        }
    )
    assert settings.prune_interval_seconds == 0
    assert settings.retain_completed_days == 0.5
    assert settings.retain_failed_last == 0
    assert settings.retain_idle_sites_days == 0


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SCRAPEQ_OPERATOR_PRUNE_INTERVAL_SECONDS", "-1", r"INTERVAL_SECONDS\) must be 0 or"),
        ("SCRAPEQ_OPERATOR_RETAIN_COMPLETED_DAYS", "-0.5", r"COMPLETED_DAYS\) must be 0 or"),
        ("SCRAPEQ_OPERATOR_RETAIN_FAILED_LAST", "-3", r"FAILED_LAST\) must be 0 or more"),
        ("SCRAPEQ_OPERATOR_RETAIN_FAILED_LAST", "many", "is not an integer"),
        ("SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS", "-1", r"IDLE_SITES_DAYS\) must be 0 or"),
    ],
)
def test_a_bad_retention_value_names_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OperatorSettings.from_environment({**DATABASE, name: value})


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("SCRAPEQ_OPERATOR_RETAIN_IDLE_HOSTS_DAYS", "SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS"),
        ("SCRAPEQ_OPERATOR_MAX_CONCURRENT_PER_HOST", "SCRAPEQ_OPERATOR_MAX_CONCURRENT_PER_SITE"),
    ],
)
def test_a_site_variable_under_its_name_before_0_1_0_is_refused_with_its_name_now(
    old: str, new: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"{old} is now {new}"):
        OperatorSettings.from_environment({**DATABASE, old: "3"})


class RecordingRuntime:
    """Stands in for the operator's runtime: counts the connections asked for, gives none."""

    def __init__(self) -> None:
        self.connections_asked = 0
        self.asked = asyncio.Event()

    def connection(self) -> Any:
        self.connections_asked += 1
        self.asked.set()
        raise RuntimeError("no database in a unit test")


async def test_an_interval_of_zero_turns_the_retention_loop_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = OperatorSettings(database_url="postgresql://db/x", prune_interval_seconds=0)
    runtime = RecordingRuntime()
    caplog.set_level(logging.INFO, logger="scrapeq_operator.retention")
    await asyncio.wait_for(Retention(settings, cast(Any, runtime)).run(), 5)
    assert runtime.connections_asked == 0
    assert "retention: off" in caplog.text


async def test_a_positive_interval_prunes_at_once_and_keeps_running() -> None:
    settings = OperatorSettings(database_url="postgresql://db/x", prune_interval_seconds=3600)
    runtime = RecordingRuntime()
    loop = asyncio.create_task(Retention(settings, cast(Any, runtime)).run())
    try:
        await asyncio.wait_for(runtime.asked.wait(), 5)
        assert runtime.connections_asked == 1
        assert not loop.done()  # a failed pass waits for the next interval
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
