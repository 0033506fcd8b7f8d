"""Every Grafana panel's query (and every metric an alert reads) returns data from a real
Prometheus that scraped a real operator and real workers after they processed real jobs (the
demo's system, run in this process)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scrapeq.demo.run import DEMO_OPERATOR_ENVIRONMENT, Demo
from scrapeq.local.processes import LocalPartError
from scripts.dashboard import PANEL_VARIABLES, PANELS

pytestmark = [
    pytest.mark.controlplane,
    pytest.mark.postgres,
    pytest.mark.chromium,
    pytest.mark.prometheus,
]

# Queries that may rightly return nothing after a healthy run, and why.
MAY_BE_EMPTY = {
    # Counted per restart reason; a healthy run restarts no browser, so no series exists yet.
    "Browser restarts",
    # The demo's jobs use no session pool, crawl memory or webhooks, and no demo site blocks.
    "Blocked pages and sessions",
    "Sessions and proxies retired",
    "Recrawl outcomes",
    "Webhook deliveries",
}


ALERT_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "scrapeq-alerts.yaml"


def alert_metric_names() -> set[str]:
    """Every scrapeq metric an alert expression reads."""
    rules = yaml.safe_load(ALERT_RULES.read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    return {name for expression in expressions for name in re.findall(r"scrapeq_\w+", expression)}


def substitute(expression: str) -> str:
    for variable, value in PANEL_VARIABLES.items():
        expression = expression.replace(variable, value)
    return expression


@pytest.mark.timeout(600)
def test_every_dashboard_query_returns_data_after_a_real_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("SCRAPEQ_USE_EXISTING_CLUSTER", raising=False)
    empty: list[str] = []
    checked: list[str] = []

    def check_panels(demo: Demo) -> None:
        assert demo.prometheus is not None
        for panel in PANELS:
            for legend, expression in panel.queries:
                query = substitute(expression)
                if panel.title in MAY_BE_EMPTY:
                    demo.prometheus.query(query)  # still valid PromQL
                    continue
                try:
                    demo.prometheus.wait_for_sample(query, timeout=30)
                except LocalPartError:
                    empty.append(f"{panel.title} / {legend}: {query}")
                checked.append(query)
        # The alerts read metrics the panels may not: each must exist in a real scrape too.
        for name in sorted(alert_metric_names()):
            try:
                demo.prometheus.wait_for_sample(f'{{__name__="{name}"}}', timeout=30)
            except LocalPartError:
                empty.append(f"alert metric {name}")
            checked.append(name)

    # Keep the workers up while the panels are checked: no scale-down during the test.
    environment = {
        **DEMO_OPERATOR_ENVIRONMENT,
        "SCRAPEQ_OPERATOR_SCALE_DOWN_WINDOW_SECONDS": "600",
        "SCRAPEQ_OPERATOR_SCALE_TO_ZERO_COOLDOWN_SECONDS": "600",
    }
    demo = Demo(
        once=True,
        timeout_seconds=300,
        on_finished=check_panels,
        operator_environment=environment,
    )
    assert demo.run() == 0
    assert checked, "the demo finished without reaching the panel checks"
    assert not empty, "queries without data:\n" + "\n".join(empty)
