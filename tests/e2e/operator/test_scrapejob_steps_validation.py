"""The API server refuses ScrapeJob steps that cannot run and accepts the documented ones
(spec.steps; real kube-apiserver with the CRD from crds/, no operator)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.operator.operator_parts import Kubectl, scrapejob

pytestmark = pytest.mark.controlplane

URL = "https://shop.example.com/"
LOGIN_URL = "https://shop.example.com/login"
LOGIN_STEPS = [
    {"action": "fill", "selector": "#user", "value": "ada"},
    {
        "action": "type",
        "selector": "#password",
        "valueFrom": {"secretKeyRef": {"name": "login", "key": "password"}},
    },
    {"action": "click", "selector": "button[type=submit]", "waitForNavigation": True},
]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"steps": [{"action": "evaluate"}]}, "spec.steps[0].action: Unsupported value"),
        ({"steps": [{"action": "click", "script": "x()"}]}, 'unknown field "spec.steps[0].script"'),
        ({"steps": [{"action": "click"}]}, "this action needs a selector"),
        (
            {"steps": [{"action": "type", "selector": "input"}]},
            "type, fill and select need a value",
        ),
        ({"steps": [{"action": "press", "key": "Hyper"}]}, "spec.steps[0].key"),
        ({"steps": [{"action": "waitForResponse"}]}, "waitForResponse needs a urlPattern"),
        (
            {
                "steps": [
                    {"action": "click", "selector": "a", "waitForNavigation": True, "waitFor": "h1"}
                ]
            },
            "a click waits for a navigation or a selector, not both",
        ),
        ({"steps": [{"action": "hover", "selector": "a", "maxRounds": 3}]}, "belong to scroll"),
        ({"steps": [{"action": "scroll", "count": 5}]}, "counts the elements of its selector"),
        ({"steps": [{"action": "scroll", "maxRounds": 5000}]}, "spec.steps[0].maxRounds"),
        ({"render": False, "steps": [{"action": "scroll"}]}, "run on rendered pages only"),
        (
            {"timeoutSeconds": 20, "steps": [{"action": "scroll", "timeoutSeconds": 25}]},
            "may not exceed the job's timeoutSeconds",
        ),
        ({"steps": [{"action": "scroll"}] * 51}, "spec.steps: Too many"),
        (
            {"session": {"login": {"url": "ftp://shop.example.com/", "steps": LOGIN_STEPS}}},
            "session.login.url must be an http:// or https:// URL",
        ),
        ({"session": {"login": {"url": LOGIN_URL}}}, "spec.session.login.steps: Required value"),
        (
            {"session": {"login": {"url": LOGIN_URL, "steps": [{"action": "click"}]}}},
            "this action needs a selector",
        ),
        (
            {"render": False, "session": {"login": {"url": LOGIN_URL, "steps": LOGIN_STEPS}}},
            "spec.session logs in on rendered pages only",
        ),
    ],
)
def test_a_scrapejob_with_a_step_that_cannot_run_is_rejected_with_a_readable_message(
    kubectl: Kubectl, namespace: str, spec: dict[str, Any], message: str
) -> None:
    result = kubectl.create(
        {
            **scrapejob("steps", url=URL, **spec),
            "metadata": {"name": "steps", "namespace": namespace},
        },
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert not kubectl.exists("scrapejob", "steps", namespace)


def test_every_documented_step_is_accepted(kubectl: Kubectl, namespace: str) -> None:
    steps = [
        {"action": "click", "selector": "a.next", "waitForNavigation": True, "timeoutSeconds": 5},
        {"action": "click", "selector": "#reveal", "waitFor": ".price"},
        {"action": "scroll", "selector": "li.item", "count": 100, "maxRounds": 20},
        {"action": "loadMore", "selector": "#more", "maxClicks": 10, "settleSeconds": 2},
        {"action": "fill", "selector": "input[name=q]", "value": "lap"},
        {"action": "type", "selector": "input[name=q]", "value": "top"},
        {
            "action": "type",
            "selector": "input[type=password]",
            "valueFrom": {"secretKeyRef": {"name": "login", "key": "password"}},
        },
        {"action": "select", "selector": "#size", "value": "xl"},
        {"action": "hover", "selector": "nav"},
        {"action": "press", "key": "Enter"},
        {"action": "press", "key": "a", "selector": "input"},
        {"action": "waitFor", "selector": ".spinner", "state": "hidden"},
        {"action": "waitForResponse", "urlPattern": "/api/items"},
        {"action": "waitForNetworkIdle", "idleSeconds": 0.5},
    ]
    kubectl.create(
        {
            **scrapejob("steps", url=URL, steps=steps),
            "metadata": {"name": "steps", "namespace": namespace},
        }
    )
    assert kubectl.get("scrapejob", "steps", namespace)["spec"]["steps"] == steps


def test_a_login_session_is_accepted(kubectl: Kubectl, namespace: str) -> None:
    session = {"login": {"url": LOGIN_URL, "steps": LOGIN_STEPS, "successSelector": ".welcome"}}
    kubectl.create(
        {
            **scrapejob("login", url=URL, session=session),
            "metadata": {"name": "login", "namespace": namespace},
        }
    )
    assert kubectl.get("scrapejob", "login", namespace)["spec"]["session"] == session
