"""Cron schedules: what parses, what is rejected and why, and when a schedule fires (UTC and
IANA time zones across daylight saving changes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from scrapeq_operator.cron import (
    CronError,
    CronSchedule,
    EverySchedule,
    latest_fire,
    next_fire,
    parse_schedule,
)


def at(text: str) -> datetime:
    """A UTC moment from 'YYYY-MM-DD HH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires_after(schedule: str, start: str, count: int, zone: str | None = None) -> list[str]:
    """The next `count` fire times after `start` (UTC), as UTC 'YYYY-MM-DD HH:MM' strings."""
    parsed = parse_schedule(schedule, zone)
    moment = at(start)
    times = []
    for _ in range(count):
        moment = next_fire(parsed, moment)
        times.append(moment.strftime("%Y-%m-%d %H:%M"))
    return times


# --- parsing --------------------------------------------------------------------------------------


def test_a_star_field_allows_every_value() -> None:
    schedule = parse_schedule("* * * * *")
    assert isinstance(schedule, CronSchedule)
    assert schedule.minutes == frozenset(range(60))
    assert schedule.hours == frozenset(range(24))
    assert schedule.days_of_month == frozenset(range(1, 32))
    assert schedule.months == frozenset(range(1, 13))
    assert schedule.days_of_week == frozenset(range(7))


def test_lists_ranges_and_steps_combine() -> None:
    schedule = parse_schedule("1,2,10-12,*/20 0-10/5 5/10 * *")
    assert isinstance(schedule, CronSchedule)
    assert schedule.minutes == {0, 1, 2, 10, 11, 12, 20, 40}
    assert schedule.hours == {0, 5, 10}
    assert schedule.days_of_month == {5, 15, 25}


def test_month_and_weekday_names_are_case_insensitive_and_work_in_ranges() -> None:
    schedule = parse_schedule("0 0 * JAN-mar,Dec mon-FRI")
    assert isinstance(schedule, CronSchedule)
    assert schedule.months == {1, 2, 3, 12}
    assert schedule.days_of_week == {1, 2, 3, 4, 5}


def test_sunday_is_both_zero_and_seven() -> None:
    seven = parse_schedule("0 0 * * 7")
    zero = parse_schedule("0 0 * * 0")
    weekend = parse_schedule("0 0 * * 6-7")
    assert isinstance(seven, CronSchedule)
    assert isinstance(zero, CronSchedule)
    assert isinstance(weekend, CronSchedule)
    assert seven.days_of_week == zero.days_of_week == {0}
    assert weekend.days_of_week == {0, 6}


def test_a_day_of_week_star_step_counts_each_day_once() -> None:
    schedule = parse_schedule("0 0 * * */2")
    assert isinstance(schedule, CronSchedule)
    assert schedule.days_of_week == {0, 2, 4, 6}


@pytest.mark.parametrize(
    ("macro", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_macros_mean_their_five_fields(macro: str, fields: str) -> None:
    assert parse_schedule(macro) == parse_schedule(fields)


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("@every 5s", timedelta(seconds=5)),
        ("@every 30s", timedelta(seconds=30)),
        ("@every 5m", timedelta(minutes=5)),
        ("@every 1h30m", timedelta(hours=1, minutes=30)),
        ("@every 2h", timedelta(hours=2)),
        ("@every 1m30s", timedelta(seconds=90)),
    ],
)
def test_every_takes_a_duration_in_hours_minutes_and_seconds(
    text: str, interval: timedelta
) -> None:
    assert parse_schedule(text) == EverySchedule(interval)


def test_extra_whitespace_between_fields_is_fine() -> None:
    assert parse_schedule("  */5   *  * * *\t") == parse_schedule("*/5 * * * *")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the schedule is empty"),
        ("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("* * * * * *", "expected 5 fields"),
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month: 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month: 32 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week: 8 is out of range 0-7"),
        ("* * * foo *", "month: 'foo' is not a number or a name (jan-dec)"),
        ("* * * * funday", "day-of-week: 'funday' is not a number or a name (sun-sat)"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("*/0 * * * *", "minute: step '0' in '*/0' must be a positive number"),
        ("*/x * * * *", "minute: step 'x'"),
        ("30-10 * * * *", "minute: range '30-10' runs backwards (30 > 10)"),
        ("1,,2 * * * *", "minute: empty list item"),
        ("-5 * * * *", "minute: '' is not a number"),
        ("0 0 30 2 *", "day-of-month: the schedule never fires"),
        ("0 0 31 4,6,9,11 *", "day-of-month: the schedule never fires"),
        ("@reboot", "unknown macro '@reboot'"),
        ("@every", "@every needs a duration"),
        ("@every 10", "@every needs a duration"),
        ("@every 1.5h", "@every needs a duration"),
        ("@every 1d", "@every needs a duration"),
        ("@every 4s", "@every 4s is shorter than the minimum of 5s"),
        ("@every 0s", "shorter than the minimum"),
        ("TZ=Europe/Paris 0 3 * * *", "a TZ= prefix is not supported; set spec.timeZone instead"),
        ("CRON_TZ=UTC 0 3 * * *", "set spec.timeZone instead"),
    ],
)
def test_an_invalid_schedule_is_rejected_naming_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(CronError) as caught:
        parse_schedule(text)
    assert message in str(caught.value)


def test_feb_29_alone_is_a_valid_schedule() -> None:
    assert isinstance(parse_schedule("0 0 29 2 *"), CronSchedule)


def test_an_impossible_day_still_fires_when_the_weekday_is_restricted_too() -> None:
    """Vixie's OR rule: 30 February never comes, but every Monday in February does."""
    assert fires_after("0 0 30 2 mon", "2026-01-01 00:00", 1) == ["2026-02-02 00:00"]


# --- next fire time -------------------------------------------------------------------------------


def test_every_minute_fires_on_the_next_whole_minute() -> None:
    assert fires_after("* * * * *", "2026-03-01 10:15:30", 3) == [
        "2026-03-01 10:16",
        "2026-03-01 10:17",
        "2026-03-01 10:18",
    ]


def test_next_fire_is_strictly_after_the_given_moment() -> None:
    assert fires_after("15 10 * * *", "2026-03-01 10:15:00", 1) == ["2026-03-02 10:15"]


def test_steps_fire_on_their_multiples() -> None:
    assert fires_after("*/20 */12 * * *", "2026-03-01 00:00", 4) == [
        "2026-03-01 00:20",
        "2026-03-01 00:40",
        "2026-03-01 12:00",
        "2026-03-01 12:20",
    ]


def test_a_stepped_range_fires_only_inside_the_range() -> None:
    assert fires_after("0 9-17/4 * * *", "2026-03-01 12:00", 3) == [
        "2026-03-01 13:00",
        "2026-03-01 17:00",
        "2026-03-02 09:00",
    ]


def test_the_schedule_rolls_over_month_and_year_ends() -> None:
    assert fires_after("30 23 31 * *", "2026-11-15 00:00", 2) == [
        "2026-12-31 23:30",
        "2027-01-31 23:30",
    ]


def test_feb_29_fires_only_in_leap_years() -> None:
    assert fires_after("0 12 29 2 *", "2026-01-01 00:00", 3) == [
        "2028-02-29 12:00",
        "2032-02-29 12:00",
        "2036-02-29 12:00",
    ]


def test_feb_29_skips_2100_which_is_not_a_leap_year() -> None:
    assert fires_after("0 0 29 2 *", "2097-01-01 00:00", 1) == ["2104-02-29 00:00"]


def test_day_of_week_seven_fires_on_sundays() -> None:
    # 2026-03-01 is a Sunday.
    assert fires_after("0 8 * * 7", "2026-02-26 00:00", 2) == [
        "2026-03-01 08:00",
        "2026-03-08 08:00",
    ]


def test_weekdays_only() -> None:
    # Friday 2026-03-06 -> Monday 2026-03-09.
    assert fires_after("0 9 * * mon-fri", "2026-03-06 10:00", 2) == [
        "2026-03-09 09:00",
        "2026-03-10 09:00",
    ]


def test_with_both_day_fields_restricted_either_one_fires() -> None:
    # The 1st and 15th of the month, and every Friday (2026-03-06, 2026-03-13).
    assert fires_after("0 0 1,15 * fri", "2026-03-01 00:00", 4) == [
        "2026-03-06 00:00",
        "2026-03-13 00:00",
        "2026-03-15 00:00",
        "2026-03-20 00:00",
    ]


def test_a_starred_day_field_makes_both_day_fields_match_together() -> None:
    """`*/2` in day-of-month counts as unrestricted (it starts with `*`): the 13th and 27th
    are odd days that are Fridays (2026-03)."""
    assert fires_after("0 0 */2 * fri", "2026-03-01 00:00", 2) == [
        "2026-03-13 00:00",
        "2026-03-27 00:00",
    ]


def test_yearly_fires_on_new_year_midnight() -> None:
    assert fires_after("@yearly", "2026-06-01 00:00", 2) == [
        "2027-01-01 00:00",
        "2028-01-01 00:00",
    ]


def test_every_counts_from_its_anchor() -> None:
    schedule = parse_schedule("@every 5m")
    anchor = at("2026-03-01 10:00:07")
    assert next_fire(schedule, at("2026-03-01 10:12:00"), since=anchor) == at("2026-03-01 10:15:07")
    assert next_fire(schedule, at("2026-03-01 10:15:07"), since=anchor) == at("2026-03-01 10:20:07")
    assert next_fire(schedule, at("2026-03-01 10:00:00"), since=anchor) == at("2026-03-01 10:05:07")


def test_every_without_an_anchor_counts_from_the_given_moment() -> None:
    schedule = parse_schedule("@every 30s")
    assert next_fire(schedule, at("2026-03-01 10:00:00")) == at("2026-03-01 10:00:30")


def test_times_in_another_time_zone_are_read_as_the_same_instant() -> None:
    paris = datetime.fromisoformat("2026-03-01T11:30:00+01:00")  # 10:30 UTC
    assert next_fire(parse_schedule("0 11 * * *"), paris) == at("2026-03-01 11:00")


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire(parse_schedule("* * * * *"), datetime(2026, 3, 1))


# --- latest fire time in (since, now] ---------------------------------------------------------


def test_nothing_is_due_before_the_first_fire_time() -> None:
    schedule = parse_schedule("0 * * * *")
    assert latest_fire(schedule, at("2026-03-01 10:00"), at("2026-03-01 10:59:59")) is None


def test_the_fire_time_equal_to_now_is_due_and_the_one_equal_to_since_is_not() -> None:
    schedule = parse_schedule("0 * * * *")
    assert latest_fire(schedule, at("2026-03-01 10:00"), at("2026-03-01 11:00")) == at(
        "2026-03-01 11:00"
    )
    assert latest_fire(schedule, at("2026-03-01 11:00"), at("2026-03-01 11:00:30")) is None


def test_missed_fire_times_collapse_into_the_latest() -> None:
    schedule = parse_schedule("*/15 * * * *")
    assert latest_fire(schedule, at("2026-03-01 08:00"), at("2026-03-01 10:20")) == at(
        "2026-03-01 10:15"
    )


def test_the_latest_fire_can_be_days_back() -> None:
    schedule = parse_schedule("0 6 * * mon")
    # Sunday 2026-03-08; the last Monday 06:00 was 2026-03-02.
    assert latest_fire(schedule, at("2026-03-01 00:00"), at("2026-03-08 12:00")) == at(
        "2026-03-02 06:00"
    )
    assert latest_fire(schedule, at("2026-03-02 06:00"), at("2026-03-08 12:00")) is None


def test_the_latest_feb_29_is_found_years_back() -> None:
    schedule = parse_schedule("0 0 29 2 *")
    assert latest_fire(schedule, at("2020-01-01 00:00"), at("2027-06-01 00:00")) == at(
        "2024-02-29 00:00"
    )


def test_every_is_due_on_its_grid_from_the_anchor() -> None:
    schedule = parse_schedule("@every 5s")
    since = at("2026-03-01 10:00:00")
    assert latest_fire(schedule, since, at("2026-03-01 10:00:04.9")) is None
    assert latest_fire(schedule, since, at("2026-03-01 10:00:05")) == at("2026-03-01 10:00:05")
    assert latest_fire(schedule, since, at("2026-03-01 10:00:17")) == at("2026-03-01 10:00:15")


def test_nothing_is_due_when_now_is_not_after_since() -> None:
    schedule = parse_schedule("* * * * *")
    moment = at("2026-03-01 10:00")
    assert latest_fire(schedule, moment, moment) is None
    assert latest_fire(schedule, moment, moment - timedelta(minutes=5)) is None


# --- time zones -----------------------------------------------------------------------------------


def test_a_daily_time_in_a_time_zone_keeps_its_wall_clock_time_across_summer_time() -> None:
    # Europe/Berlin is UTC+1 in winter and UTC+2 from 2026-03-29 (clocks go forward at 02:00).
    assert fires_after("0 9 * * *", "2026-03-27 12:00", 3, zone="Europe/Berlin") == [
        "2026-03-28 08:00",
        "2026-03-29 07:00",
        "2026-03-30 07:00",
    ]


def test_a_time_skipped_when_clocks_go_forward_fires_once_as_much_later() -> None:
    # 02:30 does not exist in Berlin on 2026-03-29: it fires at 03:30 local (01:30 UTC).
    assert fires_after("30 2 * * *", "2026-03-28 12:00", 2, zone="Europe/Berlin") == [
        "2026-03-29 01:30",
        "2026-03-30 00:30",
    ]


def test_a_skipped_time_and_the_real_time_it_lands_on_fire_once() -> None:
    # 02:30 (skipped) lands on 03:30, which is also in the schedule: one fire, not two.
    assert fires_after("30 2,3 * * *", "2026-03-28 23:00", 2, zone="Europe/Berlin") == [
        "2026-03-29 01:30",
        "2026-03-30 00:30",
    ]


def test_a_time_that_occurs_twice_when_clocks_go_back_fires_at_its_first_occurrence() -> None:
    # New York falls back from 02:00 EDT to 01:00 EST on 2026-11-01: 01:30 happens twice
    # (05:30 and 06:30 UTC); it fires once, at 05:30 UTC.
    assert fires_after("30 1 * * *", "2026-10-31 12:00", 2, zone="America/New_York") == [
        "2026-11-01 05:30",
        "2026-11-02 06:30",
    ]


def test_an_hourly_schedule_in_a_zone_fires_every_wall_clock_hour_once() -> None:
    fires = fires_after("0 * * * *", "2026-11-01 03:30", 4, zone="America/New_York")
    # 00:00 EDT = 04:00 UTC, 01:00 EDT = 05:00 UTC, (01:00 EST repeated: skipped), 02:00 EST...
    assert fires == ["2026-11-01 04:00", "2026-11-01 05:00", "2026-11-01 07:00", "2026-11-01 08:00"]


def test_the_latest_fire_in_a_zone_is_the_last_wall_clock_match_before_now() -> None:
    schedule = parse_schedule("0 9 * * *", "Europe/Berlin")
    assert latest_fire(schedule, at("2026-03-28 00:00"), at("2026-03-30 12:00")) == at(
        "2026-03-30 07:00"
    )
    assert latest_fire(schedule, at("2026-03-30 07:00"), at("2026-03-30 12:00")) is None
    skipped = parse_schedule("30 2 * * *", "Europe/Berlin")
    assert latest_fire(skipped, at("2026-03-29 00:00"), at("2026-03-29 02:00")) == at(
        "2026-03-29 01:30"
    )


def test_an_unknown_time_zone_is_rejected_with_its_name() -> None:
    with pytest.raises(CronError, match="unknown time zone 'Europe/Berln'"):
        parse_schedule("0 3 * * *", "Europe/Berln")


def test_every_ignores_the_time_zone() -> None:
    schedule = parse_schedule("@every 1h", "Asia/Kolkata")
    assert next_fire(schedule, at("2026-01-01 00:00"), since=at("2026-01-01 00:00")) == at(
        "2026-01-01 01:00"
    )
