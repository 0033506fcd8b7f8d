"""scrapeq's Prometheus alerts, checked and unit-tested by the real promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import missing_part

pytestmark = pytest.mark.prometheus

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        missing_part("promtool", "install the Debian package `prometheus`")
    assert binary is not None
    return subprocess.run(
        [binary, *arguments],
        cwd=RULES_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_alert_rules_are_valid() -> None:
    result = promtool("check", "rules", "scrapeq-alerts.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_say() -> None:
    result = promtool("test", "rules", "scrapeq-alerts.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test() -> None:
    rules = yaml.safe_load((RULES_DIR / "scrapeq-alerts.yaml").read_text())
    tests = yaml.safe_load((RULES_DIR / "scrapeq-alerts.test.yaml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tested = {
        case["alertname"] for test in tests["tests"] for case in test.get("alert_rule_test", [])
    }
    assert alerts == tested
