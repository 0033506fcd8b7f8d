"""Cron schedules for scheduled ScrapeJobs (`spec.schedule`): parsing and fire times.

Pure functions, no I/O and no clock: callers pass the moments. The syntax is Vixie cron's five
fields (minute hour day-of-month month day-of-week) with `*`, lists, ranges, steps (`*/n`,
`a-b/n`), month and weekday names, and 0 or 7 for Sunday; the macros @yearly, @annually,
@monthly, @weekly, @daily, @midnight and @hourly; and, as a scrapeq extension (Kubernetes
CronJobs have none), `@every <duration>` such as `@every 30s` or `@every 1h30m`.

Vixie cron's day rule is kept: when both day-of-month and day-of-week are restricted (neither
field starts with `*`), a day matching either one fires; otherwise both must match.

Cron fields are read in the schedule's time zone (`spec.timeZone`, an IANA name; UTC by
default), so `0 3 * * *` in Europe/Berlin fires at 03:00 Berlin time in winter and in summer.
Daylight saving time, as cronie treats fixed times: a wall-clock time skipped when clocks go
forward fires once, as much later as the clocks jumped (02:30 -> 03:30); a wall-clock time that
occurs twice when clocks go back fires once, at its first occurrence. Both follow from reading
a local time with fold=0 (PEP 495). The time zone database comes from the system or, where the
image has none, from the `tzdata` package.

Hand-written rather than croniter: the rules above (Vixie's day rule with `*/n` counted as
`*`, never-firing days refused at parse time, `@every` anchored on the last run, one fire per
wall-clock time across DST changes) are each a few lines here and unit-tested.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scrapeq_operator.errors import OperatorError

# `@every` may not fire more often than this: each run is a ScrapeJob object and rows, and the
# operator checks schedules every few seconds (SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS).
MIN_EVERY_INTERVAL: Final = timedelta(seconds=5)

# Looking for the next (or latest) matching day never needs to go further than this: the
# rarest schedule that fires at all is Feb 29 on one weekday, and between two leap days lie at
# most 8 years (2096 -> 2104). A schedule that never fires is rejected when parsed.
SEARCH_DAYS: Final = 366 * 9

# A clock change moves wall-clock time by at most this much (one hour almost everywhere, two
# in a few historical zones): candidates are searched this far around the wanted moment.
DST_MARGIN: Final = timedelta(hours=3)

MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES: Final = {
    name: number
    for number, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}
WEEKDAY_NAMES: Final = {
    name: number for number, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])
}

_DURATION: Final = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class CronError(OperatorError):
    """A schedule that cannot be parsed or never fires; the message names the bad field."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS: Final = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, MONTH_NAMES),
    # 7 is accepted as Sunday and folded to 0 after parsing.
    _Field("day-of-week", 0, 7, WEEKDAY_NAMES),
)


@dataclass(frozen=True)
class CronSchedule:
    """Five cron fields as sets of allowed values (day-of-week 0-6, Sunday 0)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    # A field starting with `*` (including `*/n`) is unrestricted, as in Vixie cron.
    day_of_month_restricted: bool
    day_of_week_restricted: bool
    # The time zone the fields are read in.
    zone: tzinfo = field(default=UTC)

    def matches_day(self, day: date) -> bool:
        """Whether the schedule fires on some minute of `day`."""
        if day.month not in self.months:
            return False
        by_month_day = day.day in self.days_of_month
        # date.weekday() is Monday 0; cron's Sunday is 0.
        by_weekday = (day.weekday() + 1) % 7 in self.days_of_week
        if self.day_of_month_restricted and self.day_of_week_restricted:
            return by_month_day or by_weekday
        return by_month_day and by_weekday


@dataclass(frozen=True)
class EverySchedule:
    """`@every <duration>`: fires every `interval`, counted from an anchor (the last run)."""

    interval: timedelta


Schedule = CronSchedule | EverySchedule


def load_time_zone(name: str) -> tzinfo:
    """An IANA time zone by name (`UTC` included); CronError when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise CronError(
            f"timeZone: unknown time zone {name!r} (an IANA name such as Europe/Berlin, "
            f"America/New_York or UTC)"
        ) from error


def parse_schedule(text: str, time_zone: str | None = None) -> Schedule:
    """Parse a schedule read in `time_zone` (UTC when None); CronError with a message naming
    the bad part when it is invalid."""
    zone = UTC if time_zone is None else load_time_zone(time_zone)
    stripped = " ".join(text.split())
    if not stripped:
        raise CronError("the schedule is empty")
    lowered = stripped.lower()
    if lowered.startswith(("tz=", "cron_tz=")):
        raise CronError(
            f"schedule {text!r}: a TZ= prefix is not supported; set spec.timeZone instead"
        )
    if lowered.startswith("@every"):
        return _parse_every(text, stripped[len("@every") :].strip())
    if lowered.startswith("@"):
        expanded = MACROS.get(lowered)
        if expanded is None:
            known = ", ".join([*MACROS, "@every <duration>"])
            raise CronError(f"schedule {text!r}: unknown macro {stripped!r} (known: {known})")
        stripped = expanded
    parts = stripped.split(" ")
    if len(parts) != len(_FIELDS):
        raise CronError(
            f"schedule {text!r}: expected 5 fields (minute hour day-of-month month "
            f"day-of-week), got {len(parts)}"
        )
    values = [_parse_field(part, field, text) for part, field in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(day % 7 for day in values[4])
    schedule = CronSchedule(
        minutes=values[0],
        hours=values[1],
        days_of_month=values[2],
        months=values[3],
        days_of_week=weekdays,
        day_of_month_restricted=not parts[2].startswith("*"),
        day_of_week_restricted=not parts[4].startswith("*"),
        zone=zone,
    )
    _require_some_day(schedule, text)
    return schedule


def _parse_every(text: str, duration: str) -> EverySchedule:
    match = _DURATION.match(duration.lower().replace(" ", ""))
    if not duration or match is None or not any(match.groups()):
        raise CronError(
            f"schedule {text!r}: @every needs a duration such as 30s, 5m or 1h30m "
            f"(whole hours h, minutes m, seconds s), got {duration!r}"
        )
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    interval = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if interval < MIN_EVERY_INTERVAL:
        raise CronError(
            f"schedule {text!r}: @every {duration} is shorter than the minimum of "
            f"{int(MIN_EVERY_INTERVAL.total_seconds())}s"
        )
    return EverySchedule(interval)


def _number(token: str, field: _Field, text: str) -> int:
    lowered = token.lower()
    if lowered in field.names:
        return field.names[lowered]
    if not token.isdigit():
        what = "a number"
        if field.names:
            names = list(field.names)
            what += f" or a name ({names[0]}-{names[-1]})"
        raise CronError(f"schedule {text!r}: {field.name}: {token!r} is not {what}")
    value = int(token)
    if not field.low <= value <= field.high:
        raise CronError(
            f"schedule {text!r}: {field.name}: {value} is out of range {field.low}-{field.high}"
        )
    return value


def _parse_field(part: str, field: _Field, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in part.split(","):
        if not item:
            raise CronError(f"schedule {text!r}: {field.name}: empty list item in {part!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(
                    f"schedule {text!r}: {field.name}: step {step_text!r} in {item!r} must be "
                    f"a positive number"
                )
            step = int(step_text)
        if base == "*":
            low, high = field.low, field.high
            if field.name == "day-of-week":
                # `*` is every day once: 7 would repeat Sunday (and shift `*/2`).
                high = 6
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _number(first, field, text), _number(last, field, text)
            if low > high:
                raise CronError(
                    f"schedule {text!r}: {field.name}: range {base!r} runs backwards "
                    f"({low} > {high})"
                )
        else:
            low = _number(base, field, text)
            # `a/n` means from a to the field's end in steps of n (as robfig/cron reads it).
            high = field.high if slash else low
        values.update(range(low, high + 1, step))
    return frozenset(values)


def _require_some_day(schedule: CronSchedule, text: str) -> None:
    """Reject day-of-month/month combinations that never exist (such as 30 February)."""
    if schedule.day_of_week_restricted and schedule.day_of_month_restricted:
        return  # any matching weekday fires
    longest = max(
        calendar.monthrange(2000, month)[1] for month in schedule.months
    )  # 2000 is a leap year: February has 29 days
    if min(schedule.days_of_month) > longest:
        raise CronError(
            f"schedule {text!r}: day-of-month: the schedule never fires (no month among "
            f"{sorted(schedule.months)} has day {min(schedule.days_of_month)})"
        )


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("cron times must be timezone-aware")
    return moment.astimezone(UTC)


def _wall_clock(moment: datetime, zone: tzinfo) -> datetime:
    """`moment` as a naive wall-clock time in `zone`, to the minute."""
    return moment.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)


def _instant(wall_clock: datetime, zone: tzinfo) -> datetime:
    """The UTC instant of a wall-clock time in `zone`: with fold=0 a skipped time lands as much
    later as the clocks jumped, and a repeated time on its first occurrence."""
    return wall_clock.replace(tzinfo=zone).astimezone(UTC)


def _margin(zone: tzinfo) -> timedelta:
    return timedelta(0) if zone is UTC else DST_MARGIN


def _forward(schedule: CronSchedule, start: datetime) -> Iterator[datetime]:
    """Matching wall-clock minutes from `start` (naive, inclusive) on, ascending."""
    day = start.date()
    for _ in range(SEARCH_DAYS):
        if schedule.matches_day(day):
            for hour in sorted(schedule.hours):
                for minute in sorted(schedule.minutes):
                    candidate = datetime(day.year, day.month, day.day, hour, minute)
                    if candidate >= start:
                        yield candidate
        day += timedelta(days=1)
    raise CronError(f"the schedule does not fire within {SEARCH_DAYS} days")  # pragma: no cover


def _backward(schedule: CronSchedule, end: datetime) -> Iterator[datetime]:
    """Matching wall-clock minutes up to `end` (naive, inclusive), descending."""
    day = end.date()
    for _ in range(SEARCH_DAYS):
        if schedule.matches_day(day):
            for hour in sorted(schedule.hours, reverse=True):
                for minute in sorted(schedule.minutes, reverse=True):
                    candidate = datetime(day.year, day.month, day.day, hour, minute)
                    if candidate <= end:
                        yield candidate
        day -= timedelta(days=1)


def next_fire(schedule: Schedule, after: datetime, *, since: datetime | None = None) -> datetime:
    """The first fire time strictly after `after` (in UTC).

    For `@every`, fire times are `since + k * interval` (k >= 1), `since` being the anchor (the
    last run, or the ScrapeJob's creation); without `since` the anchor is `after` itself. Cron
    schedules fire on whole minutes of their time zone and ignore `since`.
    """
    after = _utc(after)
    if isinstance(schedule, EverySchedule):
        anchor = after if since is None else _utc(since)
        if anchor > after:
            return anchor + schedule.interval
        steps = (after - anchor) // schedule.interval + 1
        return anchor + steps * schedule.interval
    zone, margin = schedule.zone, _margin(schedule.zone)
    best: tuple[datetime, datetime] | None = None  # (instant, wall clock)
    for wall_clock in _forward(schedule, _wall_clock(after, zone) - margin):
        if best is not None and wall_clock > best[1] + margin:
            break
        instant = _instant(wall_clock, zone)
        if instant > after and (best is None or instant < best[0]):
            best = (instant, wall_clock)
            if not margin:
                break
    assert best is not None  # _forward raises rather than end without a fire time
    return best[0]


def latest_fire(schedule: Schedule, since: datetime, now: datetime) -> datetime | None:
    """The latest fire time in (since, now], or None when nothing was due.

    Only the latest one: fire times missed while the operator was away collapse into one run,
    as a CronJob without startingDeadlineSeconds does. For `@every`, `since` is the anchor.
    """
    since, now = _utc(since), _utc(now)
    if now <= since:
        return None
    if isinstance(schedule, EverySchedule):
        steps = (now - since) // schedule.interval
        return since + steps * schedule.interval if steps >= 1 else None
    zone, margin = schedule.zone, _margin(schedule.zone)
    floor = _wall_clock(since, zone) - margin
    best: tuple[datetime, datetime] | None = None
    for wall_clock in _backward(schedule, _wall_clock(now, zone) + margin):
        if wall_clock < floor or (best is not None and wall_clock < best[1] - margin):
            break
        instant = _instant(wall_clock, zone)
        if since < instant <= now and (best is None or instant > best[0]):
            best = (instant, wall_clock)
            if not margin:
                break
        elif not margin and instant <= since:
            break
    return best[0] if best else None
