"""The page steps a payload may ask for (`steps`): a fixed vocabulary, every value bounded, and
every problem named (scrapeq_queue.page_steps)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapeq_queue import validate_payload
from scrapeq_queue.page_steps import MAX_STEP_ROUNDS, MAX_STEPS, STEP_ACTIONS

EVERY_ACTION: list[dict[str, Any]] = [
    {"action": "click", "selector": "a.next", "waitForNavigation": True, "timeoutSeconds": 5},
    {"action": "click", "selector": "button.reveal", "waitFor": ".price"},
    {"action": "scroll", "maxRounds": 20},
    {"action": "scroll", "selector": "li.item", "count": 100, "settleSeconds": 2},
    {"action": "loadMore", "selector": "button.more", "maxClicks": 10},
    {"action": "type", "selector": "input[name=q]", "value": "laptop"},
    {"action": "fill", "selector": "input[name=q]", "value": ""},
    {"action": "select", "selector": "select#size", "value": "xl"},
    {"action": "hover", "selector": "nav .menu"},
    {"action": "press", "key": "Enter", "selector": "input[name=q]"},
    {"action": "press", "key": "a"},
    {"action": "waitFor", "selector": ".spinner", "state": "hidden"},
    {"action": "waitForResponse", "urlPattern": r"/api/items\?page=\d+"},
    {"action": "waitForNetworkIdle", "idleSeconds": 1},
]


def test_every_action_is_accepted_with_its_options() -> None:
    assert {step["action"] for step in EVERY_ACTION} == set(STEP_ACTIONS)
    assert validate_payload({"steps": EVERY_ACTION}) == []


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"action": "evaluate", "script": "fetch('/')"}, "steps[0].action must be one of click"),
        ({"action": "click", "selector": "a", "script": "x()"}, "has unknown keys: 'script'"),
        ({"action": "click"}, "steps[0] (click) needs a selector"),
        ({"action": "click", "selector": " "}, "steps[0].selector must be a CSS selector"),
        (
            {"action": "click", "selector": "a", "waitForNavigation": True, "waitFor": "h1"},
            "waits for a navigation or a selector, not both",
        ),
        ({"action": "type", "selector": "input"}, "steps[0] (type) needs a value"),
        ({"action": "type", "selector": "input", "value": "x" * 5000}, "at most 4096 characters"),
        ({"action": "scroll", "count": 10}, "counts the elements of a selector"),
        ({"action": "scroll", "maxRounds": MAX_STEP_ROUNDS + 1}, "maxRounds must be an integer"),
        ({"action": "loadMore", "selector": "b", "maxClicks": 0}, "maxClicks must be an integer"),
        ({"action": "scroll", "settleSeconds": 0}, "settleSeconds must be a number above 0"),
        ({"action": "press", "key": "Hyper"}, "steps[0].key must be one character or one of"),
        ({"action": "waitFor", "selector": "a", "state": "gone"}, "state must be one of"),
        ({"action": "waitForResponse", "urlPattern": "(a)\\1"}, "is not a valid regular"),
        ({"action": "waitForNetworkIdle", "idleSeconds": 60}, "idleSeconds must be a number"),
        ({"action": "hover", "selector": "a", "timeoutSeconds": 0}, "timeoutSeconds must be"),
        ("click", "steps[0] must be an object"),
    ],
)
def test_a_bad_step_is_reported_by_its_position_and_what_is_wrong(
    step: object, expected: str
) -> None:
    problems = validate_payload({"steps": [step]})
    assert any(expected in problem for problem in problems), problems


def test_steps_are_bounded_in_number() -> None:
    steps = [{"action": "hover", "selector": "a"}] * (MAX_STEPS + 1)
    assert validate_payload({"steps": steps}) == [f"steps must be a list of 1-{MAX_STEPS} steps"]
    assert validate_payload({"steps": []}) == [f"steps must be a list of 1-{MAX_STEPS} steps"]


def test_steps_are_bounded_in_characters_all_together() -> None:
    steps = [{"action": "type", "selector": "input", "value": "v" * 4000}] * 10
    (problem,) = validate_payload({"steps": steps})
    assert "at most 32768 are allowed" in problem


def test_a_step_may_not_ask_for_more_time_than_its_whole_job() -> None:
    step = {"action": "waitFor", "selector": ".late", "timeoutSeconds": 40}
    assert validate_payload({"timeoutSeconds": 60, "steps": [step]}) == []
    (problem,) = validate_payload({"timeoutSeconds": 30, "steps": [step]})
    assert problem == (
        "steps[0].timeoutSeconds must be a number above 0 and at most 30 (the job's timeoutSeconds)"
    )


def test_steps_on_a_page_fetched_without_a_browser_are_refused() -> None:
    payload = {"render": False, "steps": [{"action": "scroll"}]}
    assert validate_payload(payload) == [
        "steps run on rendered pages only: remove them or set render to true"
    ]


def test_every_bad_step_is_reported_not_only_the_first() -> None:
    problems = validate_payload(
        {"steps": [{"action": "click"}, {"action": "dance"}, {"action": "press", "key": ""}]}
    )
    assert [problem.split(" ")[0].split(".")[0] for problem in problems] == [
        "steps[0]",
        "steps[1]",
        "steps[2]",
    ]


def test_type_and_fill_may_name_a_sealed_value_instead_of_a_literal() -> None:
    sealed = {"action": "type", "selector": "#password", "sealedValue": "shop-login/password"}
    assert validate_payload({"steps": [sealed]}) == []
    both = {**sealed, "value": "hunter2"}
    assert validate_payload({"steps": [both]}) == [
        "steps[0] (type) has a value or a sealedValue, not both"
    ]
    on_select = {"action": "select", "selector": "#size", "sealedValue": "shop/size"}
    assert "steps[0] (select) has unknown keys: 'sealedValue'" in validate_payload(
        {"steps": [on_select]}
    )


LOGIN = {
    "url": "https://shop.example/login",
    "steps": [
        {"action": "fill", "selector": "#user", "value": "ada"},
        {"action": "type", "selector": "#password", "sealedValue": "shop-login/password"},
        {"action": "click", "selector": "button", "waitForNavigation": True},
    ],
    "successSelector": ".welcome",
}


def test_a_login_session_is_a_url_steps_and_an_optional_success_selector() -> None:
    assert validate_payload({"session": {"login": LOGIN}}) == []


@pytest.mark.parametrize(
    ("session", "expected"),
    [
        ({"login": {**LOGIN, "url": "file:///etc/passwd"}}, "session.login.url must be an http"),
        ({"login": {**LOGIN, "url": "https://shop.example:0/"}}, "session.login.url: the URL"),
        ({"login": {**LOGIN, "steps": []}}, "session.login.steps must be a list of 1-50 steps"),
        (
            {"login": {**LOGIN, "steps": [{"action": "evaluate"}]}},
            "session.login.steps[0].action must be one of",
        ),
        ({"login": {**LOGIN, "script": "x"}}, "session.login has unknown keys: 'script'"),
        ({"login": {**LOGIN, "successSelector": ""}}, "session.login.successSelector must be"),
        ({"logout": {}}, "session must be an object"),
    ],
)
def test_a_bad_login_session_is_reported_by_what_is_wrong(session: object, expected: str) -> None:
    problems = validate_payload({"session": session})
    assert any(expected in problem for problem in problems), problems


def test_a_login_session_needs_a_rendered_page_and_steps_within_the_jobs_time() -> None:
    slow = {**LOGIN, "steps": [{"action": "hover", "selector": "a", "timeoutSeconds": 50}]}
    assert validate_payload(
        {"render": False, "timeoutSeconds": 30, "session": {"login": slow}}
    ) == [
        "session.login.steps[0].timeoutSeconds must be a number above 0 and at most 30 (the "
        "job's timeoutSeconds)",
        "session logs in on rendered pages only: remove it or set render to true",
    ]
