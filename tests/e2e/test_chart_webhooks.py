"""The chart's operator.webhooks values reach the operator's settings, its defaults match the
operator's own, and the schema refuses what the operator could not use (docs/webhooks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapeq_operator.settings import OperatorSettings

from tests.e2e.helm_chart import STABLE_PASSWORD, find, render, render_error

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]


def operator_environment(helm_binary: Path, values: dict[str, Any]) -> dict[str, str]:
    manifests = render(helm_binary, {**STABLE_PASSWORD, **values})
    deployment = find(manifests, "Deployment", "scrapeq-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item.get("value") for item in container["env"] if "value" in item}


def test_the_webhook_values_become_the_operators_webhook_settings(helm_binary: Path) -> None:
    values = {
        "operator": {
            "webhooks": {
                "allowNetworks": ["10.0.0.0/8", "fd00::/8"],
                "timeoutSeconds": 4,
                "maxAgeSeconds": 600,
            }
        }
    }

    environment = operator_environment(helm_binary, values)
    settings = OperatorSettings.from_environment(environment, validate=False)

    assert [str(network) for network in settings.webhook_allow_networks] == [
        "10.0.0.0/8",
        "fd00::/8",
    ]
    assert settings.webhook_timeout_seconds == 4
    assert settings.webhook_max_age_seconds == 600


def test_by_default_the_chart_allows_no_private_network_and_keeps_the_operators_defaults(
    helm_binary: Path,
) -> None:
    settings = OperatorSettings.from_environment(
        operator_environment(helm_binary, {}), validate=False
    )

    assert settings.webhook_allow_networks == ()
    defaults = OperatorSettings(database_url="postgresql://db/x")
    assert settings.webhook_timeout_seconds == defaults.webhook_timeout_seconds
    assert settings.webhook_max_age_seconds == defaults.webhook_max_age_seconds


@pytest.mark.parametrize(
    "webhooks",
    [{"timeoutSeconds": 0}, {"maxAgeSeconds": -1}, {"allowNetworks": "10.0.0.0/8"}, {"x": 1}],
    ids=["zero timeout", "negative age", "networks not a list", "unknown key"],
)
def test_the_schema_refuses_webhook_values_the_operator_cannot_use(
    helm_binary: Path, webhooks: dict[str, Any]
) -> None:
    error = render_error(helm_binary, {**STABLE_PASSWORD, "operator": {"webhooks": webhooks}})

    assert "values don't meet the specifications of the schema" in error
