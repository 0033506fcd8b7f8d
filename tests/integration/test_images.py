"""The image builder with the real podman and a throw-away containerd: an image is built once
and again only when what it copies changes, and it is imported into containerd once.

A tiny FROM-scratch image keeps these tests to seconds; `make images` does the heavy builds.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeq.local.images import (
    PODMAN,
    BuiltImage,
    Recipe,
    RecipeKind,
    build_recipes,
    inspect_image,
    load_images,
)
from scrapeq.local.processes import LocalPartError, terminate, wait_until
from tests.conftest import missing_part

pytestmark = [pytest.mark.images, pytest.mark.timeout(180)]


def _needs(command: str) -> None:
    if shutil.which(command) is None:
        missing_part(command, "not installed (scripts/ensure-system-packages.sh node)")


@pytest.fixture
def tiny_recipe(tmp_path: Path) -> Iterator[Recipe]:
    """A FROM-scratch Dockerfile copying one file, labelled per test; every image built from it
    is removed afterwards."""
    _needs("podman")
    test_label = f"io.scrapeq.test={uuid.uuid4().hex}"
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM scratch\nLABEL {test_label}\nCOPY greeting.txt /greeting.txt\n"
    )
    (context / "greeting.txt").write_text("hello\n")
    (context / ".dockerignore").write_text("**/__pycache__\n")
    yield Recipe(
        name="tiny",
        reference=f"localhost/scrapeq-test/tiny:{uuid.uuid4().hex[:12]}",
        kind=RecipeKind.DOCKERFILE,
        first_run_seconds=5,
        dockerfile=context / "Dockerfile",
        context=context,
    )
    built = subprocess.run(
        [*PODMAN, "images", "--quiet", "--filter", f"label={test_label}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout.split()
    if built:
        subprocess.run(
            [*PODMAN, "rmi", "--force", *set(built)], capture_output=True, check=False, timeout=60
        )


def _build(recipe: Recipe) -> BuiltImage:
    (image,) = build_recipes([recipe])
    return image


def test_an_unchanged_image_is_not_built_again_and_a_changed_copied_file_rebuilds_it(
    tiny_recipe: Recipe, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _build(tiny_recipe)
    assert first.id.startswith("sha256:")
    assert first.reference == tiny_recipe.reference

    assert tiny_recipe.context is not None
    ignored = tiny_recipe.context / "__pycache__"
    ignored.mkdir()
    (ignored / "noise.pyc").write_bytes(b"not copied into the image")
    capsys.readouterr()
    assert _build(tiny_recipe) == first
    assert "unchanged, not rebuilt" in capsys.readouterr().err

    (tiny_recipe.context / "greeting.txt").write_text("changed\n")
    rebuilt = _build(tiny_recipe)
    assert rebuilt.id != first.id
    assert "unchanged" not in capsys.readouterr().err


def test_inputs_that_come_back_give_back_the_final_image_never_a_build_stage(
    tiny_recipe: Recipe,
) -> None:
    """The build stages of a multi-stage Dockerfile carry the inputs label too; when a file
    changes and changes back, the reference must name an image of the last stage again."""
    assert tiny_recipe.dockerfile is not None
    assert tiny_recipe.context is not None
    test_label = tiny_recipe.dockerfile.read_text().splitlines()[1]
    tiny_recipe.dockerfile.write_text(
        f"FROM scratch AS build\n{test_label}\nCOPY greeting.txt /greeting.txt\n"
        f"FROM scratch\n{test_label}\nLABEL io.scrapeq.test.stage=final\n"
        "COPY --from=build /greeting.txt /greeting.txt\n"
    )
    greeting = tiny_recipe.context / "greeting.txt"
    first = _build(tiny_recipe)
    greeting.write_text("changed\n")
    _build(tiny_recipe)
    greeting.write_text("hello\n")

    again = _build(tiny_recipe)

    described = inspect_image(again.reference)
    assert described is not None
    assert (described.get("Labels") or {}).get("io.scrapeq.test.stage") == "final", (
        f"{again.reference} names a build stage, not the image ({first.id} was)"
    )


@pytest.fixture
def containerd_address() -> Iterator[str]:
    """A containerd of the test's own: private root, state and socket; stopped afterwards."""
    _needs("containerd")
    _needs("ctr")
    # A short path: a unix socket's path must stay under 108 bytes.
    base = Path(tempfile.mkdtemp(prefix="scrapeq-ctrd-"))
    address = str(base / "containerd.sock")
    config = base / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{base}/root"\n'
        f'state = "{base}/state"\n'
        # Images only: no Kubernetes runtime service, so it touches no network or cgroup.
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{address}"\n'
        f'[ttrpc]\n  address = "{address}.ttrpc"\n'
        f'[debug]\n  address = "{base}/debug.sock"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{base}/opt"\n'
    )
    with (base / "containerd.log").open("wb") as log:
        process = subprocess.Popen(
            ["containerd", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def answers() -> bool:
        return (
            subprocess.run(
                ["ctr", "--address", address, "version"], capture_output=True, check=False
            ).returncode
            == 0
        )

    def exited() -> str | None:
        if process.poll() is None:
            return None
        return f"containerd exited {process.returncode}: {(base / 'containerd.log').read_text()}"

    try:
        wait_until(answers, timeout=30, what="containerd", interval=0.2, failed=exited)
    except LocalPartError as error:
        terminate(process)
        shutil.rmtree(base, ignore_errors=True)
        missing_part("containerd", str(error))
    try:
        yield address
    finally:
        terminate(process)
        shutil.rmtree(base, ignore_errors=True)


def test_an_image_is_imported_into_containerd_once_under_its_reference(
    tiny_recipe: Recipe, containerd_address: str
) -> None:
    image = _build(tiny_recipe)

    assert load_images([image], containerd_address) == [image]
    listed = subprocess.run(
        ["ctr", "--address", containerd_address, "-n", "k8s.io", "images", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert image.reference in listed

    assert load_images([image], containerd_address) == []
