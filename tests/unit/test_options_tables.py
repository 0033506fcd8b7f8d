"""The worker's and the operator's options are declared once, as fields of their settings
classes; the tables in docs/worker.md and docs/operator.md are generated from them
(`make generate`), and the flags and variables they list are the ones the programs read."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from scrapeq_queue.options import (
    add_arguments,
    markdown_table,
    option,
    options_of,
    parse_bool,
    parse_int,
    read_settings,
)

from scripts.generate import DOCUMENTED_SETTINGS, documented_options


@pytest.mark.parametrize("page", sorted(DOCUMENTED_SETTINGS), ids=lambda page: page.name)
def test_the_options_table_of_each_page_matches_its_settings_class(page: Path) -> None:
    assert page.read_text() == documented_options(page), "run `make generate`"


@dataclass(frozen=True)
class Inner:
    limit: int = option(3, env="T_LIMIT", parse=parse_int, help="A nested limit.")


@dataclass(frozen=True)
class Example:
    url: str = option(
        "", flag="--url", env="T_URL", fallback_env=("URL",), parse=str, help="Where."
    )
    enabled: bool = option(
        True,
        flag="--enabled",
        negative_flag="--disabled",
        env="T_ENABLED",
        parse=parse_bool,
        help="On or off.",
        switch=True,
    )
    inner: Inner = field(default_factory=Inner)


def read(*flags: str, environ: dict[str, str] | None = None) -> Example:
    parser = argparse.ArgumentParser()
    add_arguments(parser, Example)
    return read_settings(Example, parser.parse_args(list(flags)), environ or {}, error=ValueError)


def test_a_flag_beats_the_variable_which_beats_the_fallback_variable_and_the_default() -> None:
    assert read().url == ""
    assert read(environ={"URL": "b"}).url == "b"
    assert read(environ={"URL": "b", "T_URL": "a"}).url == "a"
    assert read("--url", "c", environ={"T_URL": "a"}).url == "c"


def test_an_empty_variable_defers_to_its_fallback() -> None:
    assert read(environ={"T_URL": "", "URL": "b"}).url == "b"


def test_a_switch_has_a_flag_for_each_way_and_nested_options_are_read_too() -> None:
    assert read("--disabled").enabled is False
    assert read("--enabled", environ={"T_ENABLED": "false"}).enabled is True
    assert read(environ={"T_LIMIT": "7"}).inner == Inner(limit=7)
    with pytest.raises(SystemExit):
        read("--enabled", "--disabled")


def test_a_bad_value_is_reported_with_its_variable() -> None:
    with pytest.raises(ValueError, match="T_LIMIT: 'x' is not an integer"):
        read(environ={"T_LIMIT": "x"})


def test_the_table_lists_every_option_with_its_flags_variables_and_default() -> None:
    assert [declared.name for declared in options_of(Example)] == ["url", "enabled", "limit"]
    assert markdown_table(Example).splitlines()[2:] == [
        "| `--url` | `T_URL`, `URL` | — | Where. |",
        "| `--enabled`, `--disabled` | `T_ENABLED` | on | On or off. |",
        "| — | `T_LIMIT` | 3 | A nested limit. |",
    ]
