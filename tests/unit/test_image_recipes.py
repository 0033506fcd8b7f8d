"""What the image builder builds, names and counts as an image's inputs (no podman needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scrapeq.local import images
from scrapeq.local.images import (
    PAUSE_IMAGE,
    ImageBuildError,
    node_recipes,
    normalize_registry,
    project_recipes,
    project_version,
)

ROOT = Path(__file__).resolve().parents[2]


def test_project_images_are_named_as_a_pod_spec_resolves_the_charts_repositories() -> None:
    version = project_version()
    references = [recipe.reference for recipe in project_recipes()]
    assert references == [
        f"docker.io/scrapeq/worker:{version}",
        f"docker.io/scrapeq/operator:{version}",
    ]
    values = (ROOT / "charts" / "scrapeq" / "values.yaml").read_text()
    assert "repository: scrapeq/worker" in values
    assert "repository: scrapeq/operator" in values


def test_a_registry_prefix_names_the_project_images_for_a_push() -> None:
    references = [recipe.reference for recipe in project_recipes("registry.example.com:5000/team/")]
    assert references[0] == f"registry.example.com:5000/team/worker:{project_version()}"


@pytest.mark.parametrize(
    "registry", ["", "Registry.Example.com", "registry.example.com/scrapeq:1.0", "a b", "-x"]
)
def test_a_malformed_registry_prefix_is_refused_with_an_example(registry: str) -> None:
    with pytest.raises(ValueError, match=r"registry\.example\.com/scrapeq"):
        normalize_registry(registry)


def test_the_node_images_keep_the_public_names_the_chart_and_kubelet_use() -> None:
    references = {recipe.name: recipe.reference for recipe in node_recipes()}
    assert references == {
        "postgres": "docker.io/library/postgres:15-bookworm",
        "pause": PAUSE_IMAGE,
    }
    values = (ROOT / "charts" / "scrapeq" / "values.yaml").read_text()
    assert 'tag: "15-bookworm"' in values


def test_the_version_comes_from_pyproject() -> None:
    assert f'version = "{project_version()}"' in (ROOT / "pyproject.toml").read_text()


def test_bases_are_the_from_images_other_than_scratch_and_earlier_stages() -> None:
    dockerfile = (
        "FROM python:3.11-slim-bookworm AS build\n"
        "RUN true\n"
        "FROM --platform=linux/amd64 build AS again\n"
        "FROM scratch\n"
        "FROM debian:bookworm-slim\n"
    )
    assert images._base_images(dockerfile) == ["python:3.11-slim-bookworm", "debian:bookworm-slim"]


def test_copied_files_follow_copy_sources_and_leave_out_what_dockerignore_names(
    tmp_path: Path,
) -> None:
    (tmp_path / "package" / "__pycache__").mkdir(parents=True)
    (tmp_path / "package" / "module.py").write_text("")
    (tmp_path / "package" / "__pycache__" / "module.pyc").write_text("")
    (tmp_path / "top.txt").write_text("")
    (tmp_path / "unused.txt").write_text("")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".dockerignore").write_text("# comment\n.venv\n**/__pycache__\n")
    dockerfile = (
        "COPY --chown=1:1 top.txt \\\n    package /dest/\n"
        'COPY ["package/module.py", "/x"]\n'
        "COPY --from=build /opt /opt\n"
    )
    assert images._copied_files(dockerfile, tmp_path) == [
        tmp_path / "package" / "module.py",
        tmp_path / "top.txt",
    ]


def test_a_missing_copy_source_is_reported_by_name(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match=r"'absent\.txt'"):
        images._copied_files("COPY absent.txt /x\n", tmp_path)


def test_the_repository_dockerignore_keeps_local_state_out_of_the_project_images() -> None:
    copied = {
        path.relative_to(ROOT).as_posix()
        for path in images._copied_files((ROOT / "worker" / "Dockerfile").read_text(), ROOT)
    }
    assert "pyproject.toml" in copied
    assert "scrapeq/local/images.py" in copied
    assert not any("__pycache__" in path or ".egg-info" in path for path in copied)


def test_the_base_image_inputs_do_not_depend_on_where_the_checkout_lies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone elsewhere (CI's fresh one) finds the base built from another clone, so the
    images above it are not all built again."""
    debian = images.base_recipes()[0]
    assert debian.kind is images.RecipeKind.ROOTFS
    here = images._inputs_digest(debian)

    elsewhere = tmp_path / "another-clone" / "tools" / "images"
    shutil.copytree(images.IMAGES_DIR, elsewhere)
    monkeypatch.setattr(images, "IMAGES_DIR", elsewhere)
    assert images._inputs_digest(debian) == here

    # The files the command names are inputs by content.
    slim = elsewhere / "debian" / "slim.sh"
    slim.write_text(slim.read_text() + "\n# changed\n")
    assert images._inputs_digest(debian) != here
