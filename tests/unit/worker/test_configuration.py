"""The worker's one settings object: flags beat environment beat defaults, bad values are
named, and docs/worker.md documents every option."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
from pathlib import Path

import pytest
from scrapeq_worker.errors import BadInput
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.settings import (
    OPTIONS,
    SettingsError,
    add_arguments,
    describe,
    settings_from,
)
from scrapeq_worker.structured_logs import JsonFormatter

DOCS = Path(__file__).resolve().parents[3] / "docs" / "worker.md"


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(flags))


def test_defaults_apply_when_nothing_is_given() -> None:
    settings = settings_from(parse(), environ={})
    assert settings.concurrency == 8
    assert settings.queues == ("default",)
    assert settings.allow_networks == ()
    assert settings.burst is False


def test_the_environment_fills_what_flags_leave_unset() -> None:
    settings = settings_from(
        parse("--concurrency", "8"),
        environ={
            "SCRAPEQ_CONCURRENCY": "2",
            "SCRAPEQ_QUEUES": "fast, slow",
            "SCRAPEQ_ALLOW_NETWORKS": "127.0.0.0/8",
            "SCRAPEQ_BURST": "true",
            "DATABASE_URL": "postgresql://db/scrapeq",
        },
    )
    assert settings.concurrency == 8
    assert settings.queues == ("fast", "slow")
    assert settings.allow_networks == (ipaddress.ip_network("127.0.0.0/8"),)
    assert settings.burst is True
    assert settings.database_url == "postgresql://db/scrapeq"


def test_repeated_queue_flags_add_up() -> None:
    assert settings_from(parse("--queue", "a", "--queue", "b"), environ={}).queues == ("a", "b")


def test_a_queue_named_twice_is_served_once() -> None:
    flags = parse("--queue", "a", "--queue", "b,a")
    assert settings_from(flags, environ={}).queues == ("a", "b")
    assert settings_from(parse(), environ={"SCRAPEQ_QUEUES": "b, a, b"}).queues == ("b", "a")


def test_a_bad_value_names_where_it_came_from() -> None:
    with pytest.raises(SettingsError, match="SCRAPEQ_CONCURRENCY"):
        settings_from(parse(), environ={"SCRAPEQ_CONCURRENCY": "0"})
    with pytest.raises(SettingsError, match="--allow-networks"):
        settings_from(parse("--allow-networks", "not-a-network"), environ={})


def test_every_option_is_documented() -> None:
    text = DOCS.read_text()
    missing = [
        option.flag for option in OPTIONS if option.flag not in text or option.env not in text
    ]
    assert missing == []


def test_a_payload_becomes_typed_options_with_the_worker_defaults() -> None:
    options = options_from_payload(
        {"render": False, "waitFor": "h1", "extract": {"t": "h1"}, "follow": {"selector": "a"}},
        default_timeout_seconds=30,
    )
    assert options.render is False
    assert options.wait_for == "h1"
    assert options.timeout_seconds == 30
    assert [field.name for field in options.fields] == ["t"]
    assert options.follow is not None
    assert options.follow.max_depth == 1


def test_the_pool_blocks_the_resource_kinds_its_flag_or_environment_names() -> None:
    assert settings_from(parse(), environ={}).block_resources == ()
    from_environment = settings_from(parse(), environ={"SCRAPEQ_BLOCK_RESOURCES": "image, font"})
    assert from_environment.block_resources == ("image", "font")
    from_flag = settings_from(parse("--block-resources", "media"), environ={})
    assert from_flag.block_resources == ("media",)


def test_an_unknown_resource_kind_for_the_pool_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(SettingsError, match=r"SCRAPEQ_BLOCK_RESOURCES.*image, font, media"):
        settings_from(parse(), environ={"SCRAPEQ_BLOCK_RESOURCES": "image,script"})


def test_a_jobs_block_resources_replace_the_pools_whole() -> None:
    pool = ("image", "font")
    inherited = options_from_payload({}, default_timeout_seconds=30, default_block_resources=pool)
    assert inherited.block_resources == {"image", "font"}
    own = options_from_payload(
        {"blockResources": ["media"]}, default_timeout_seconds=30, default_block_resources=pool
    )
    assert own.block_resources == {"media"}
    none = options_from_payload(
        {"blockResources": []}, default_timeout_seconds=30, default_block_resources=pool
    )
    assert none.block_resources == frozenset()


def test_an_invalid_payload_is_bad_input_listing_every_problem() -> None:
    with pytest.raises(BadInput) as bad:
        options_from_payload({"render": "yes", "colour": "red"}, default_timeout_seconds=30)
    assert bad.value.reason == "invalid_payload"
    assert "render must be true or false" in bad.value.message
    assert "colour" in bad.value.message


def test_json_log_lines_carry_the_job_context() -> None:
    record = logging.LogRecord(
        "scrapeq_worker.worker", logging.INFO, "", 0, "completed %s", ("http://a.test/",), None
    )
    record.job_id = 42
    record.owner = "shop/laptops"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "completed http://a.test/"
    assert line["job_id"] == 42
    assert line["owner"] == "shop/laptops"
    assert line["level"] == "info"


def test_the_user_agent_names_scrapeq_and_the_pools_contact_url() -> None:
    default = settings_from(parse(), environ={})
    assert default.user_agent.startswith("Mozilla/5.0 (compatible; scrapeq/")
    assert "+" not in default.user_agent
    pool = settings_from(parse(), environ={"SCRAPEQ_USER_AGENT_CONTACT": "https://ops.test/bot"})
    assert pool.user_agent.endswith("; +https://ops.test/bot)")


@pytest.mark.parametrize(
    "contact",
    ["ops.test/bot", "ftp://ops.test/", "https://", "https://ops.test/a b", "https://x/)"],
)
def test_a_contact_that_is_not_a_plain_http_url_is_refused(contact: str) -> None:
    with pytest.raises(SettingsError, match="--user-agent-contact"):
        settings_from(parse("--user-agent-contact", contact), environ={})


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-concurrent-per-site", "0", "from 1 to 1000"),
        ("--max-concurrent-per-site", "1001", "from 1 to 1000"),
        ("--max-concurrent-per-site", "2.5", "from 1 to 1000"),
        ("--site-delay-seconds", "-1", "from 0 to 3600"),
        ("--site-delay-seconds", "3601", "from 0 to 3600"),
    ],
)
def test_a_site_s_limit_and_delay_have_the_bounds_a_row_has(
    flag: str, value: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=f"{flag}.*{message}"):
        settings_from(parse(flag, value), environ={})


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--max-concurrent-per-host", "--max-concurrent-per-site"),
        ("--host-delay-seconds", "--site-delay-seconds"),
    ],
)
def test_a_site_flag_under_its_name_before_0_1_0_is_refused_with_its_name_now(
    old: str, new: str
) -> None:
    with pytest.raises(SettingsError, match=f"^{old} is now {new}$"):
        settings_from(parse(old, "3"), environ={})


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("SCRAPEQ_MAX_CONCURRENT_PER_HOST", "SCRAPEQ_MAX_CONCURRENT_PER_SITE"),
        ("SCRAPEQ_HOST_DELAY_SECONDS", "SCRAPEQ_SITE_DELAY_SECONDS"),
    ],
)
def test_a_site_variable_under_its_name_before_0_1_0_is_refused_with_its_name_now(
    old: str, new: str
) -> None:
    """A variable left over in a pod spec is not silently ignored: the worker does not start."""
    with pytest.raises(SettingsError, match=f"^{old} is now {new}$"):
        settings_from(parse(), environ={old: "3"})


def test_pooled_mode_and_the_listen_url_come_from_flags_or_the_environment() -> None:
    default = settings_from(parse(), environ={"DATABASE_URL": "postgresql://db/x"})
    assert default.database_pooled is False
    assert default.database_listen_url is None
    pooled = settings_from(
        parse("--database-listen-url", "postgresql://listener:secret@db:5432/x"),
        environ={"DATABASE_URL": "postgresql://pooler:6432/x", "DATABASE_POOLED": "true"},
    )
    assert pooled.database_pooled is True
    assert pooled.database_listen_url == "postgresql://listener:secret@db:5432/x"
    assert "secret" not in json.dumps(describe(pooled))
