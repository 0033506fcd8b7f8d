"""The page steps a payload may ask for (`steps`), and their validation.

Steps are a fixed vocabulary of things a visitor does on a rendered page before it is read —
click, scroll, load more, type, select, hover, press a key, wait — never code: a step names
elements by CSS selector and carries literal values, so a tenant can do no more than this list
allows. Every step is bounded: how many there are, the characters they hold, the rounds of a
scroll or a "load more", and each step's own timeout, which the job's `timeoutSeconds` bounds
too (docs/queue.md, "Steps"; docs/worker.md, "Steps").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

STEP_ACTIONS: Final = (
    "click",
    "scroll",
    "loadMore",
    "type",
    "fill",
    "select",
    "hover",
    "press",
    "waitFor",
    "waitForResponse",
    "waitForNetworkIdle",
)
# Keys every step may have, then the keys of each action besides them.
_COMMON_KEYS: Final = frozenset({"action", "timeoutSeconds"})
STEP_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "click": frozenset({"selector", "waitForNavigation", "waitFor"}),
    "scroll": frozenset({"selector", "count", "maxRounds", "settleSeconds"}),
    "loadMore": frozenset({"selector", "maxClicks", "settleSeconds"}),
    "type": frozenset({"selector", "value", "sealedValue"}),
    "fill": frozenset({"selector", "value", "sealedValue"}),
    "select": frozenset({"selector", "value"}),
    "hover": frozenset({"selector"}),
    "press": frozenset({"key", "selector"}),
    "waitFor": frozenset({"selector", "state"}),
    "waitForResponse": frozenset({"urlPattern"}),
    "waitForNetworkIdle": frozenset({"idleSeconds"}),
}
# Actions that act on an element and so must name one.
_SELECTOR_REQUIRED: Final = frozenset(
    {"click", "loadMore", "type", "fill", "select", "hover", "waitFor"}
)
WAIT_FOR_STATES: Final = ("visible", "hidden")
# A page needs a handful of steps; fifty is a whole user journey, not a page visit.
MAX_STEPS: Final = 50
MAX_STEP_SELECTOR_CHARS: Final = 1024
# A typed or filled value: a search term, a form field, a long comment at most.
MAX_STEP_VALUE_CHARS: Final = 4096
# The name of a value sealed by the operator: a Secret's name and one of its keys.
MAX_SEALED_VALUE_NAME_CHARS: Final = 253 + 1 + 253
# The characters of every selector, value and pattern of all steps together.
MAX_STEPS_CHARS: Final = 32 * 1024
# A step's own time when it names none, and the most it may name (the job's deadline bounds
# every step as well, whatever it says).
DEFAULT_STEP_TIMEOUT_SECONDS: Final = 10.0
MAX_STEP_TIMEOUT_SECONDS: Final = 600.0
# Rounds of a scroll and clicks of a "load more" when the step names none, and the most it may
# name: an endless list ends at the cap with `stopped: max_rounds` / `max_clicks`.
DEFAULT_SCROLL_ROUNDS: Final = 50
DEFAULT_LOAD_MORE_CLICKS: Final = 50
MAX_STEP_ROUNDS: Final = 1000
MAX_SCROLL_COUNT: Final = 100_000
# How long a scroll round or a click of "load more" waits for the page to grow before the list
# is taken to have ended; a page that fetches its next items slowly needs more.
DEFAULT_SETTLE_SECONDS: Final = 1.0
MAX_SETTLE_SECONDS: Final = 30.0
# How long the network must be quiet for waitForNetworkIdle (puppeteer's networkidle0 says
# 500 ms), and the most a step may ask.
DEFAULT_IDLE_SECONDS: Final = 0.5
MAX_IDLE_SECONDS: Final = 10.0
MAX_URL_PATTERN_CHARS: Final = 1024
# The keys `press` knows by name; any single character is a key too.
NAMED_KEYS: Final = frozenset(
    {
        "Enter",
        "Tab",
        "Escape",
        "Backspace",
        "Delete",
        "Space",
        "ArrowUp",
        "ArrowDown",
        "ArrowLeft",
        "ArrowRight",
        "Home",
        "End",
        "PageUp",
        "PageDown",
    }
)


def _number_in(value: object, low: float, high: float, *, low_open: bool) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    above = value > low if low_open else value >= low
    return bool(above and value <= high)


def _integer_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_steps(
    value: object,
    *,
    name: str = "steps",
    job_timeout_seconds: object = None,
    check_pattern: Callable[[str], str | None] | None = None,
) -> list[str]:
    """Every problem with a `steps` list; an empty list means a worker may run it.

    `job_timeout_seconds`: the payload's timeoutSeconds, when it gives one (a step may not ask
    for more time than its whole job); `check_pattern(pattern)` returns the problem with a
    waitForResponse pattern, or None (the payload's RE2 compiler).
    """
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        return [f"{name} must be a list of 1-{MAX_STEPS} steps"]
    job_limit = MAX_STEP_TIMEOUT_SECONDS
    if isinstance(job_timeout_seconds, int | float) and _number_in(
        job_timeout_seconds, 0, MAX_STEP_TIMEOUT_SECONDS, low_open=True
    ):
        job_limit = float(job_timeout_seconds)
    problems: list[str] = []
    chars = 0
    for position, step in enumerate(value):
        where = f"{name}[{position}]"
        if not isinstance(step, Mapping):
            problems.append(f'{where} must be an object {{"action": ..., ...}}')
            continue
        action = step.get("action")
        if action not in STEP_KEYS:
            problems.append(f"{where}.action must be one of {', '.join(STEP_ACTIONS)}")
            continue
        assert isinstance(action, str)
        unknown = sorted(set(step) - _COMMON_KEYS - STEP_KEYS[action])
        if unknown:
            shown = ", ".join(repr(key)[:60] for key in unknown[:5])
            problems.append(f"{where} ({action}) has unknown keys: {shown}")
        if "timeoutSeconds" in step and not _number_in(
            step["timeoutSeconds"], 0, job_limit, low_open=True
        ):
            problems.append(
                f"{where}.timeoutSeconds must be a number above 0 and at most {job_limit:g}"
                + (" (the job's timeoutSeconds)" if job_timeout_seconds is not None else "")
            )
        for key in ("selector", "waitFor"):
            if key not in step:
                if key == "selector" and action in _SELECTOR_REQUIRED:
                    problems.append(f"{where} ({action}) needs a selector")
                continue
            selector = step[key]
            if (
                not isinstance(selector, str)
                or not selector.strip()
                or len(selector) > MAX_STEP_SELECTOR_CHARS
            ):
                problems.append(
                    f"{where}.{key} must be a CSS selector of 1-{MAX_STEP_SELECTOR_CHARS} "
                    "characters"
                )
            else:
                chars += len(selector)
        if action in ("type", "fill") and "sealedValue" in step:
            sealed_name = step["sealedValue"]
            if "value" in step:
                problems.append(f"{where} ({action}) has a value or a sealedValue, not both")
            elif (
                not isinstance(sealed_name, str)
                or not sealed_name
                or len(sealed_name) > MAX_SEALED_VALUE_NAME_CHARS
            ):
                problems.append(
                    f"{where}.sealedValue must name a sealed value (secret/key) of 1-"
                    f"{MAX_SEALED_VALUE_NAME_CHARS} characters"
                )
        elif action in ("type", "fill", "select"):
            literal = step.get("value")
            if not isinstance(literal, str) or len(literal) > MAX_STEP_VALUE_CHARS:
                problems.append(
                    f"{where} ({action}) needs a value: a string of at most "
                    f"{MAX_STEP_VALUE_CHARS} characters"
                )
            else:
                chars += len(literal)
        problems.extend(_action_problems(where, action, step, check_pattern))
        pattern = step.get("urlPattern")
        if isinstance(pattern, str):
            chars += len(pattern)
    if chars > MAX_STEPS_CHARS:
        problems.append(
            f"{name} hold {chars} characters of selectors, values and patterns; at most "
            f"{MAX_STEPS_CHARS} are allowed"
        )
    return problems


def _action_problems(
    where: str,
    action: str,
    step: Mapping[str, object],
    check_pattern: Callable[[str], str | None] | None,
) -> list[str]:
    """The problems of the keys only one action has."""
    problems: list[str] = []
    if action == "click":
        if "waitForNavigation" in step and not isinstance(step["waitForNavigation"], bool):
            problems.append(f"{where}.waitForNavigation must be true or false")
        if step.get("waitForNavigation") is True and "waitFor" in step:
            problems.append(f"{where} (click) waits for a navigation or a selector, not both")
    if (
        action in ("scroll", "loadMore")
        and "settleSeconds" in step
        and not _number_in(step["settleSeconds"], 0, MAX_SETTLE_SECONDS, low_open=True)
    ):
        problems.append(
            f"{where}.settleSeconds must be a number above 0 and at most {MAX_SETTLE_SECONDS:g}"
        )
    for key in ("maxRounds", "maxClicks"):
        if key in step and not _integer_in(step[key], 1, MAX_STEP_ROUNDS):
            problems.append(f"{where}.{key} must be an integer from 1 to {MAX_STEP_ROUNDS}")
    if action == "scroll" and "count" in step:
        if not _integer_in(step["count"], 1, MAX_SCROLL_COUNT):
            problems.append(f"{where}.count must be an integer from 1 to {MAX_SCROLL_COUNT}")
        elif "selector" not in step:
            problems.append(f"{where} (scroll) counts the elements of a selector: name one")
    if action == "press":
        pressed = step.get("key")
        if not isinstance(pressed, str) or not (
            pressed in NAMED_KEYS or (len(pressed) == 1 and pressed.isprintable())
        ):
            problems.append(
                f"{where}.key must be one character or one of {', '.join(sorted(NAMED_KEYS))}"
            )
    if action == "waitFor" and "state" in step and step["state"] not in WAIT_FOR_STATES:
        problems.append(f"{where}.state must be one of {', '.join(WAIT_FOR_STATES)}")
    if action == "waitForResponse":
        pattern = step.get("urlPattern")
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_URL_PATTERN_CHARS:
            problems.append(
                f"{where}.urlPattern must be a regular expression of 1-{MAX_URL_PATTERN_CHARS} "
                "characters"
            )
        elif check_pattern is not None and (problem := check_pattern(pattern)):
            problems.append(f"{where}.urlPattern {pattern!r}"[:200] + f" {problem}")
    if (
        action == "waitForNetworkIdle"
        and "idleSeconds" in step
        and not _number_in(step["idleSeconds"], 0, MAX_IDLE_SECONDS, low_open=True)
    ):
        problems.append(
            f"{where}.idleSeconds must be a number above 0 and at most {MAX_IDLE_SECONDS:g}"
        )
    return problems


SESSION_KEYS: Final = frozenset({"login"})
LOGIN_KEYS: Final = frozenset({"url", "steps", "successSelector"})


def check_session(
    value: object,
    *,
    job_timeout_seconds: object = None,
    check_pattern: Callable[[str], str | None] | None = None,
    check_url: Callable[[str], str | None] | None = None,
) -> list[str]:
    """Every problem with a `session` option: `{"login": {"url", "steps", "successSelector"}}`.

    `check_url(url)` returns the problem with the login page's URL, or None.
    """
    shape = 'session must be an object {"login": {"url": ..., "steps": [...]}}'
    if not isinstance(value, Mapping) or set(value) != SESSION_KEYS:
        return [shape]
    login = value["login"]
    if not isinstance(login, Mapping):
        return [shape]
    problems: list[str] = []
    unknown = sorted(set(login) - LOGIN_KEYS)
    if unknown:
        shown = ", ".join(repr(key)[:60] for key in unknown[:5])
        problems.append(f"session.login has unknown keys: {shown}")
    url = login.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        problems.append("session.login.url must be an http:// or https:// URL")
    elif check_url is not None and (problem := check_url(url)):
        problems.append(f"session.login.url: {problem}")
    problems.extend(
        check_steps(
            login.get("steps"),
            name="session.login.steps",
            job_timeout_seconds=job_timeout_seconds,
            check_pattern=check_pattern,
        )
    )
    if "successSelector" in login:
        selector = login["successSelector"]
        if (
            not isinstance(selector, str)
            or not selector.strip()
            or len(selector) > MAX_STEP_SELECTOR_CHARS
        ):
            problems.append(
                f"session.login.successSelector must be a CSS selector of 1-"
                f"{MAX_STEP_SELECTOR_CHARS} characters"
            )
    return problems
