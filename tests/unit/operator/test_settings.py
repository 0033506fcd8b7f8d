"""The operator's settings: environment variables, defaults and the errors for bad values."""

from __future__ import annotations

import pytest
from scrapeq_operator.errors import ConfigurationError
from scrapeq_operator.settings import OperatorSettings


def test_settings_come_from_the_environment() -> None:
    settings = OperatorSettings.from_environment(
        {
            "DATABASE_URL": "postgresql://db/scrapeq",
            "SCRAPEQ_OPERATOR_NAMESPACES": "shop, news",
            "SCRAPEQ_OPERATOR_MIGRATE": "false",
            "SCRAPEQ_OPERATOR_MAX_REPLICAS": "20",
        }
    )
    assert settings.database_url == "postgresql://db/scrapeq"
    assert settings.namespaces == ("shop", "news")
    assert not settings.clusterwide
    assert settings.migrate is False
    assert settings.autoscaler.max_replicas == 20


def test_schedules_are_checked_every_5_seconds_unless_told_otherwise() -> None:
    default = OperatorSettings.from_environment({"DATABASE_URL": "postgresql://db/x"})
    assert default.schedule_check_seconds == 5.0
    faster = OperatorSettings.from_environment(
        {"DATABASE_URL": "postgresql://db/x", "SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS": "1"}
    )
    assert faster.schedule_check_seconds == 1.0


def test_no_namespaces_means_cluster_wide() -> None:
    settings = OperatorSettings.from_environment({"DATABASE_URL": "postgresql://db/x"})
    assert settings.clusterwide


def test_a_missing_database_url_is_explained() -> None:
    with pytest.raises(ConfigurationError, match="DATABASE_URL"):
        OperatorSettings.from_environment({})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SCRAPEQ_OPERATOR_STATUS_SWEEP_SECONDS", "soon"),
        ("SCRAPEQ_OPERATOR_STATUS_BATCH_SIZE", "0"),
        ("SCRAPEQ_OPERATOR_MIGRATE", "perhaps"),
        ("SCRAPEQ_OPERATOR_MIN_REPLICAS", "11"),
        ("SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS", "0"),
        ("SCRAPEQ_OPERATOR_SCHEDULE_CHECK_SECONDS", "often"),
    ],
)
def test_a_bad_value_names_the_setting(name: str, value: str) -> None:
    environ = {"DATABASE_URL": "postgresql://db/x", name: value}
    with pytest.raises(ConfigurationError):
        OperatorSettings.from_environment(environ)


def test_a_database_url_flag_is_enough_without_any_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scrapeq_operator.commands import settings_from_args

    from scrapeq.cli import build_parser

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("SCRAPEQ_OPERATOR_DATABASE_URL", raising=False)
    args = build_parser().parse_args(["operator", "--database-url", "postgresql://db/scrapeq"])
    assert settings_from_args(args).database_url == "postgresql://db/scrapeq"


def test_pooled_mode_and_the_listen_url_fall_back_to_the_workers_variables() -> None:
    default = OperatorSettings.from_environment({"DATABASE_URL": "postgresql://db/x"})
    assert default.database_pooled is False
    assert default.database_listen_url == ""
    pooled = OperatorSettings.from_environment(
        {
            "DATABASE_URL": "postgresql://pooler:6432/x",
            "DATABASE_POOLED": "true",
            "DATABASE_LISTEN_URL": "postgresql://db:5432/x",
        }
    )
    assert pooled.database_pooled is True
    assert pooled.database_listen_url == "postgresql://db:5432/x"
