"""`scrapeq operator` on the command line: flags win over the environment."""

from __future__ import annotations

import pytest
from scrapeq_operator.commands import run_operator, settings_from_args

from scrapeq.cli import build_parser


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-env/db")
    monkeypatch.setenv("SCRAPEQ_OPERATOR_METRICS_PORT", "9999")
    args = build_parser().parse_args(
        [
            "operator",
            "--database-url",
            "postgresql://from-flag/db",
            "--namespace",
            "shop",
            "--namespace",
            "news",
            "--no-migrate",
            "--liveness-port",
            "0",
            "--no-autoscaler",
        ]
    )
    settings = settings_from_args(args)
    assert settings.database_url == "postgresql://from-flag/db"
    assert settings.namespaces == ("shop", "news")
    assert settings.migrate is False
    assert settings.liveness_port == 0
    assert settings.metrics_port == 9999
    assert settings.autoscaler_enabled is False


def test_without_flags_the_operator_migrates_and_watches_every_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-env/db")
    settings = settings_from_args(build_parser().parse_args(["operator"]))
    assert settings.migrate is True
    assert settings.clusterwide
    assert settings.autoscaler_enabled is True


def test_a_missing_database_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("SCRAPEQ_OPERATOR_DATABASE_URL", raising=False)
    assert run_operator(build_parser().parse_args(["operator"])) == 2
    assert "DATABASE_URL" in capsys.readouterr().err
