"""The release version is written once, in pyproject.toml; every other place that shows it is
generated from there (`make generate`) or read from the installed package, and CHANGELOG.md's
newest release names it."""

from __future__ import annotations

import re

import yaml

import scrapeq
from scripts.generate import CHART, ROOT, chart_metadata, project_version


def test_the_chart_is_versioned_with_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (project_version(), project_version()), (
        "run `make generate`"
    )


def test_generating_the_chart_metadata_changes_only_its_version_lines() -> None:
    written = (CHART / "Chart.yaml").read_text().splitlines()
    generated = chart_metadata().splitlines()
    changed = [old for old, new in zip(written, generated, strict=True) if old != new]
    assert all(re.match(r"(version|appVersion): ", line) for line in changed), changed


def test_the_package_reports_the_project_version() -> None:
    assert scrapeq.__version__ == project_version(), "reinstall: `make venv`"


def test_the_changelog_opens_with_unreleased_and_its_newest_release_is_the_project_version() -> (
    None
):
    headings = re.findall(r"(?m)^## \[([^\]]+)\](.*)$", (ROOT / "CHANGELOG.md").read_text())
    assert headings[:1] == [("Unreleased", "")], headings
    releases = headings[1:]
    assert all(re.fullmatch(r" - \d{4}-\d{2}-\d{2}", date) for _, date in releases), releases
    if releases:  # nothing released yet: the version in pyproject.toml is under development
        assert releases[0][0] == project_version(), "a release sets pyproject.toml's version"
