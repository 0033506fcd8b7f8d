"""Container images for a node, built from the project's Dockerfiles with podman, no registry.

`worker/Dockerfile` and `operator/Dockerfile` are what a user builds and pushes; they start
`FROM python:3.11-slim-bookworm`. Where no image registry can be reached, the public images
they and a node need are made here from Debian packages under the exact public names, so the
Dockerfiles stay unchanged:

- `debian:bookworm-slim`: an mmdebstrap minbase root filesystem with the official image's dpkg
  and apt settings (tools/images/debian), `podman import`ed;
- `python:3.11-slim-bookworm`: tools/images/python/Dockerfile, Debian's Python 3.11;
- `postgres:15-bookworm`: tools/images/postgres/Dockerfile, for the chart's bundled database;
- `registry.k8s.io/pause:3.10`: the pod sandbox image, compiled from the Kubernetes module's
  `build/pause/linux/pause.c` (tools/images/pause/Dockerfile).

Every image carries a label with the digest of its inputs (recipe, Dockerfile, the files it
copies, the ids of its base images); an image whose label matches is not built again.
`load_images` copies images into a containerd (`k8s.io` namespace, the one the kubelet's CRI
uses), skipping those containerd already holds with the same id.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import fnmatch
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from scrapeq.local.controlplane import REPOSITORY_ROOT
from scrapeq.local.processes import LocalPartError

IMAGES_DIR = REPOSITORY_ROOT / "tools" / "images"
# Build logs, one per image, inside the checkout (ignored by git).
LOG_DIR = REPOSITORY_ROOT / ".scrapeq" / "images"

# Global flags podman needs on these machines: there is no systemd, so cgroups are managed
# through cgroupfs and events go to a file instead of the journal.
PODMAN = ("podman", "--cgroup-manager", "cgroupfs", "--events-backend", "file")

# The label that records what an image was built from.
INPUTS_LABEL = "io.scrapeq.image.inputs"
# Part of every inputs digest: bump it when the way images are built changes, so every image
# is built again once.
BUILDER_REVISION = "1"

# What a pod's `scrapeq/worker` resolves to (the chart's default repositories); podman itself
# would file an unqualified name under `localhost/`, which a pod spec never names.
DEFAULT_REGISTRY = "docker.io/scrapeq"
# The sandbox image Kubernetes 1.33 expects (kubeadm's default for this release).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PAUSE_CFLAGS = ("-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-scrapeq-local")

# The host's certificate bundle, bind-mounted read-only over the image's own while a project
# image builds: pip fetches from PyPI over HTTPS, and on some machines that traffic is
# re-signed by a certificate authority only the host trusts. A mount never lands in a layer.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

# A registry prefix: host[:port] followed by lower-case path components.
_REGISTRY_PATTERN = re.compile(
    r"[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
# Progress lines while a step runs: at least this often, so no minute is silent.
PROGRESS_INTERVAL_SECONDS = 15.0


class ImageBuildError(LocalPartError):
    """An image could not be built or loaded; the message says which and where the log is."""


@dataclass(frozen=True)
class BuiltImage:
    """An image in podman's storage: its reference, id (sha256:…) and size in bytes."""

    reference: str
    id: str
    size: int


class RecipeKind(enum.Enum):
    ROOTFS = "rootfs"  # a Debian root filesystem from mmdebstrap, imported
    DOCKERFILE = "dockerfile"  # podman build of a Dockerfile and its context
    PAUSE = "pause"  # pause.c compiled with gcc into a Dockerfile's context


@dataclass(frozen=True)
class Recipe:
    """How one image is made; `first_run_seconds` is what a first build takes on 2 cores."""

    name: str
    reference: str
    kind: RecipeKind
    first_run_seconds: int
    dockerfile: Path | None = None
    context: Path | None = None
    # Mount the host's CA bundle while building (pip over HTTPS).
    host_ca_bundle: bool = False
    # --build-arg values (an image built FROM one of the project's names it so).
    build_args: tuple[tuple[str, str], ...] = ()


def project_version() -> str:
    """The one version the project's images are tagged with (pyproject.toml's)."""
    with (REPOSITORY_ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def normalize_registry(registry: str | None) -> str:
    """Return the registry prefix for the project's images, or raise ValueError if malformed."""
    if registry is None:
        return DEFAULT_REGISTRY
    cleaned = registry.strip().rstrip("/")
    if not _REGISTRY_PATTERN.fullmatch(cleaned):
        raise ValueError(
            f"registry {registry!r} is not a registry prefix: expected host[:port][/path] in "
            "lower case, for example registry.example.com/scrapeq"
        )
    return cleaned


def base_recipes() -> list[Recipe]:
    """The stand-ins for public base images, in build order."""
    return [
        Recipe(
            name="debian",
            reference="docker.io/library/debian:bookworm-slim",
            kind=RecipeKind.ROOTFS,
            first_run_seconds=120,
        ),
        Recipe(
            name="python",
            reference="docker.io/library/python:3.11-slim-bookworm",
            kind=RecipeKind.DOCKERFILE,
            first_run_seconds=40,
            dockerfile=IMAGES_DIR / "python" / "Dockerfile",
            context=IMAGES_DIR / "python",
        ),
    ]


def project_recipes(registry: str | None = None) -> list[Recipe]:
    """The images built from the project's own Dockerfiles, tagged with the project version."""
    prefix = normalize_registry(registry)
    version = project_version()
    return [
        Recipe(
            name=component,
            reference=f"{prefix}/{component}:{version}",
            kind=RecipeKind.DOCKERFILE,
            first_run_seconds=seconds,
            dockerfile=REPOSITORY_ROOT / component / "Dockerfile",
            context=REPOSITORY_ROOT,
            host_ca_bundle=True,
        )
        for component, seconds in (("worker", 180), ("operator", 120))
    ]


def derived_worker_recipe(
    name: str, containerfile: Path, reference: str, *, registry: str | None = None
) -> Recipe:
    """An image a team builds FROM the project's worker image (its own parsers installed): the
    Containerfile takes the worker image's reference as the build argument SCRAPEQ_WORKER, as
    examples/parser-package/Containerfile does. Build it after the worker image."""
    [worker] = [recipe for recipe in project_recipes(registry) if recipe.name == "worker"]
    return Recipe(
        name=name,
        reference=reference,
        kind=RecipeKind.DOCKERFILE,
        first_run_seconds=60,
        dockerfile=containerfile,
        context=containerfile.parent,
        host_ca_bundle=True,
        build_args=(("SCRAPEQ_WORKER", worker.reference),),
    )


def node_recipes() -> list[Recipe]:
    """Images a local node needs besides the project's: the bundled database, the sandbox."""
    return [
        Recipe(
            name="postgres",
            reference="docker.io/library/postgres:15-bookworm",
            kind=RecipeKind.DOCKERFILE,
            first_run_seconds=60,
            dockerfile=IMAGES_DIR / "postgres" / "Dockerfile",
            context=IMAGES_DIR / "postgres",
        ),
        Recipe(
            name="pause",
            reference=PAUSE_IMAGE,
            kind=RecipeKind.PAUSE,
            first_run_seconds=10,
            dockerfile=IMAGES_DIR / "pause" / "Dockerfile",
        ),
    ]


def build_images(
    registry: str | None = None, *, node_images: bool = True, pull_bases: bool = False
) -> list[BuiltImage]:
    """Build the worker and operator images (and, with `node_images`, postgres and pause).

    The public base images are made locally first (stand-ins), or with `pull_bases` pulled
    from their registries. Returns the images in that order (bases are not listed). Progress
    goes to stderr. Raises ImageBuildError with the log's tail on failure.
    """
    wanted = project_recipes(registry) + (node_recipes() if node_images else [])
    with _build_lock():
        if pull_bases:
            _pull_bases(wanted)
            built = build_recipes(wanted)
        else:
            built = build_recipes(base_recipes() + wanted)
    wanted_references = {recipe.reference for recipe in wanted}
    return [image for image in built if image.reference in wanted_references]


def _pull_bases(recipes: Sequence[Recipe]) -> None:
    """Pull every image the recipes' Dockerfiles start FROM (the official images)."""
    _require_command("podman", "podman")
    bases: list[str] = []
    for recipe in recipes:
        if recipe.kind is RecipeKind.DOCKERFILE and recipe.dockerfile is not None:
            bases += [b for b in _base_images(recipe.dockerfile.read_text()) if b not in bases]
    for index, base in enumerate(bases, start=1):
        with _step(index, len(bases), f"pulling {base}", 60) as log:
            _run([*PODMAN, "pull", base], log)


def build_recipes(recipes: Sequence[Recipe]) -> list[BuiltImage]:
    """Build each recipe in order unless an image with the same inputs exists; bases first."""
    _require_tools(recipes)
    built: list[BuiltImage] = []
    for index, recipe in enumerate(recipes, start=1):
        built.append(_build_one(recipe, index=index, total=len(recipes)))
    return built


def load_images(
    images: Sequence[BuiltImage], containerd_address: str | Path, *, namespace: str = "k8s.io"
) -> list[BuiltImage]:
    """Import images into the containerd at `containerd_address`; return those imported.

    An image containerd already holds under the same reference with the same id is skipped.
    """
    _require_command("ctr", "containerd")
    address = str(containerd_address)
    present = _containerd_image_ids(address, namespace)
    imported: list[BuiltImage] = []
    pending = [image for image in images if present.get(image.reference) != image.id]
    for skipped in (image for image in images if image not in pending):
        print(f">> {skipped.reference} is already in containerd ({namespace})", file=sys.stderr)
    for index, image in enumerate(pending, start=1):
        what = f"loading {image.reference} ({image.size / 1e6:.0f} MB) into containerd"
        expected = max(5, int(image.size / 15e6))  # save + import: ~15 MB/s on 2 busy cores
        with (
            _step(index, len(pending), what, expected) as log,
            tempfile.TemporaryDirectory(prefix="scrapeq-image-") as scratch,
        ):
            archive = Path(scratch) / "image.tar"
            _run(
                [
                    *PODMAN,
                    "save",
                    "--format",
                    "docker-archive",
                    "-o",
                    str(archive),
                    image.reference,
                ],
                log,
            )
            _run(
                ["ctr", "--address", address, "-n", namespace, "images", "import", str(archive)],
                log,
            )
        if _containerd_image_ids(address, namespace).get(image.reference) != image.id:
            raise ImageBuildError(
                f"containerd at {address} does not hold {image.reference} with id {image.id} "
                "after the import"
            )
        imported.append(image)
    return imported


def inspect_image(reference: str) -> dict[str, Any] | None:
    """podman's description of a local image, or None when there is no such image."""
    result = subprocess.run(
        [*PODMAN, "image", "inspect", reference],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if result.returncode != 0:
        return None
    described: list[dict[str, Any]] = json.loads(result.stdout)
    return described[0]


# --- building one image -------------------------------------------------------------------------


def _build_one(recipe: Recipe, *, index: int, total: int) -> BuiltImage:
    digest = _inputs_digest(recipe)
    existing = _image_with_inputs(recipe.reference, digest)
    if existing is not None:
        print(f">> [{index}/{total}] {recipe.name}: unchanged, not rebuilt", file=sys.stderr)
        return existing
    previous = inspect_image(recipe.reference)
    what = f"building {recipe.reference}"
    with _step(index, total, what, recipe.first_run_seconds) as log:
        match recipe.kind:
            case RecipeKind.ROOTFS:
                _import_debian_rootfs(recipe, digest, log)
            case RecipeKind.DOCKERFILE:
                assert recipe.context is not None
                _podman_build(recipe, recipe.context, digest, log)
            case RecipeKind.PAUSE:
                with tempfile.TemporaryDirectory(prefix="scrapeq-pause-") as context:
                    _compile_pause(Path(context) / "pause", log)
                    _podman_build(recipe, Path(context), digest, log)
    image = _described(recipe.reference)
    print(f"   {recipe.reference}: {image.size / 1e6:.0f} MB, {image.id[:19]}", file=sys.stderr)
    replaced = inspect_image(str(previous["Id"])) if previous is not None else None
    if (
        replaced is not None
        and replaced["Id"] != image.id.removeprefix("sha256:")
        and not (replaced.get("RepoTags"))
    ):
        # The image this one replaced, now without a name; podman refuses while another image
        # or a container still uses it, which is fine.
        subprocess.run(
            [*PODMAN, "rmi", str(replaced["Id"])], capture_output=True, check=False, timeout=120
        )
    return image


def _image_with_inputs(reference: str, digest: str) -> BuiltImage | None:
    """The image under `reference` if it was built from `digest`; else tag an image that was
    (the same inputs under another registry prefix) and return it; else None."""
    described = inspect_image(reference)
    if described is not None and (described.get("Labels") or {}).get(INPUTS_LABEL) == digest:
        return _built(reference, described)
    # Only a named image: the build stages of a multi-stage Dockerfile carry the label too,
    # and one of them under the reference would start a container that is not the image.
    listed = [
        image
        for image in _podman_json("images", "--filter", f"label={INPUTS_LABEL}={digest}")
        if image.get("Names")
    ]
    if not listed:
        return None
    subprocess.run(
        [*PODMAN, "tag", listed[0]["Id"], reference], check=True, capture_output=True, timeout=60
    )
    return _described(reference)


def _described(reference: str) -> BuiltImage:
    described = inspect_image(reference)
    if described is None:
        raise ImageBuildError(f"podman has no image {reference} after building it")
    return _built(reference, described)


def _built(reference: str, described: dict[str, Any]) -> BuiltImage:
    image_id = str(described["Id"])
    if not image_id.startswith("sha256:"):
        image_id = "sha256:" + image_id
    return BuiltImage(reference=reference, id=image_id, size=int(described["Size"]))


def _import_debian_rootfs(recipe: Recipe, digest: str, log: IO[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="scrapeq-rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        _run([*_mmdebstrap_command(), str(rootfs)], log)
        _run(
            [
                *PODMAN,
                "import",
                "--change",
                'CMD ["bash"]',
                "--change",
                f"LABEL {INPUTS_LABEL}={digest}",
                "--message",
                "debian bookworm minbase from Debian packages (scrapeq local stand-in)",
                str(rootfs),
                recipe.reference,
            ],
            log,
        )


def _mmdebstrap_command() -> list[str]:
    """minbase (Essential + apt) with the official slim image's dpkg and apt settings; merged
    /usr by a hook rather than the usrmerge package, which would pull in perl."""
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        f"--dpkgopt={IMAGES_DIR / 'debian' / 'dpkg-slim.cfg'}",
        f"--aptopt={IMAGES_DIR / 'debian' / 'apt-docker.conf'}",
        f"--customize-hook={IMAGES_DIR / 'debian' / 'slim.sh'}",
        "bookworm",
    ]


def _podman_build(recipe: Recipe, context: Path, digest: str, log: IO[str]) -> None:
    assert recipe.dockerfile is not None
    command = [
        *PODMAN,
        "build",
        # The bases are the local stand-ins: never look for them in a registry.
        "--pull=never",
        # podman's default build network creates a bridge on 10.88.0.0/16, which collides with
        # a local node's pod network and cuts its pods off.
        "--network=host",
        # Docker's format keeps the image id when `podman save --format docker-archive` hands
        # the image to containerd, so loads can be skipped by id.
        "--format=docker",
        "--layers",
        f"--label={INPUTS_LABEL}={digest}",
        f"--file={recipe.dockerfile}",
        f"--tag={recipe.reference}",
    ]
    if recipe.host_ca_bundle and HOST_CA_BUNDLE.exists():
        command.append(f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro")
    command += [f"--build-arg={name}={value}" for name, value in recipe.build_args]
    _run([*command, str(context)], log)


def _compile_pause(output: Path, log: IO[str]) -> None:
    _run(["gcc", *PAUSE_CFLAGS, "-o", str(output), str(_pause_source())], log)


def _pause_source() -> Path:
    """build/pause/linux/pause.c of the Kubernetes module at tools/versions.env's version."""
    version = _kubernetes_version()
    with tempfile.TemporaryDirectory() as outside_any_module:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
            cwd=outside_any_module,
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
    if result.returncode != 0:
        raise ImageBuildError(
            f"go mod download k8s.io/kubernetes@{version} failed:\n{result.stdout}{result.stderr}"
        )
    source = Path(json.loads(result.stdout)["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    if not source.exists():
        raise ImageBuildError(f"{source} is missing from the Kubernetes module")
    return source


def _kubernetes_version() -> str:
    for line in (REPOSITORY_ROOT / "tools" / "versions.env").read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "KUBERNETES_VERSION":
            return value.strip()
    raise ImageBuildError("KUBERNETES_VERSION is missing from tools/versions.env")


# --- what an image is built from ----------------------------------------------------------------


def _inputs_digest(recipe: Recipe) -> str:
    """sha256 over everything that decides the image: recipe, Dockerfile, copied files, bases."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("builder", BUILDER_REVISION.encode())
    add("kind", recipe.kind.value.encode())
    add("ca", str(recipe.host_ca_bundle).encode())
    for name, value in recipe.build_args:
        add(f"build-arg {name}", value.encode())
    match recipe.kind:
        case RecipeKind.ROOTFS:
            # Where the checkout lies is no input: a clone elsewhere (CI's, a second worktree)
            # must find the same base, or every image above it is built again (~4.5 min).
            command = _mmdebstrap_command()
            add("command", shlex.join(command).replace(str(IMAGES_DIR), "tools/images").encode())
            for argument in command:
                _, _, value = argument.partition("=")
                if value.startswith(str(IMAGES_DIR)):
                    add(Path(value).relative_to(IMAGES_DIR).as_posix(), Path(value).read_bytes())
        case RecipeKind.DOCKERFILE | RecipeKind.PAUSE:
            assert recipe.dockerfile is not None
            text = recipe.dockerfile.read_text()
            add("Dockerfile", text.encode())
            for base in _base_images(text, dict(recipe.build_args)):
                described = inspect_image(base)
                if described is None:
                    raise ImageBuildError(
                        f"the base image {base} of {recipe.dockerfile} is missing"
                    )
                add(f"base {base}", str(described["Id"]).encode())
            if recipe.kind is RecipeKind.PAUSE:
                add("cflags", " ".join(PAUSE_CFLAGS).encode())
                add("pause.c", _pause_source().read_bytes())
            else:
                assert recipe.context is not None
                for path in _copied_files(text, recipe.context):
                    add(path.relative_to(recipe.context).as_posix(), path.read_bytes())
    return "sha256:" + digest.hexdigest()


def _instructions(dockerfile_text: str) -> Iterator[tuple[str, list[str]]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined."""
    logical = re.sub(r"\\\n", " ", dockerfile_text)
    for line in logical.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        rest = rest.strip()
        if rest.startswith("["):
            yield keyword.upper(), list(json.loads(rest))
        else:
            yield keyword.upper(), rest.split()


def _base_images(dockerfile_text: str, build_args: Mapping[str, str] | None = None) -> list[str]:
    """The images named by FROM, leaving out `scratch` and earlier stages; `${NAME}` in a FROM
    is the build argument NAME, else the default its ARG line gives."""
    stages: set[str] = set()
    bases: list[str] = []
    arguments_seen: dict[str, str] = {}
    for keyword, arguments in _instructions(dockerfile_text):
        if keyword == "ARG" and arguments:
            name, _, default = arguments[0].partition("=")
            arguments_seen[name] = (build_args or {}).get(name, default)
            continue
        if keyword != "FROM":
            continue
        words = [word for word in arguments if not word.startswith("--")]
        image = re.sub(
            r"\$\{(\w+)\}|\$(\w+)",
            lambda match: arguments_seen.get(match.group(1) or match.group(2), ""),
            words[0],
        )
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])
        if image != "scratch" and image not in stages and image not in bases:
            bases.append(image)
    return bases


def _copied_files(dockerfile_text: str, context: Path) -> list[Path]:
    """Every file of the context that a COPY or ADD (not from a stage) puts into the image,
    less what the context's .dockerignore leaves out; sorted."""
    ignored = _dockerignore_patterns(context)
    files: set[Path] = set()
    for keyword, arguments in _instructions(dockerfile_text):
        if keyword not in {"COPY", "ADD"}:
            continue
        if any(word.startswith("--from") for word in arguments):
            continue
        sources = [word for word in arguments if not word.startswith("--")][:-1]
        for source in sources:
            matches = glob.glob(source, root_dir=context)
            if not matches:
                raise ImageBuildError(f"COPY source {source!r} is missing from {context}")
            for match in matches:
                files.update(_files_under(context / match, context, ignored))
    return sorted(files)


def _files_under(path: Path, context: Path, ignored: list[str]) -> Iterator[Path]:
    candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for candidate in candidates:
        if not _is_ignored(PurePosixPath(candidate.relative_to(context).as_posix()), ignored):
            yield candidate


def _dockerignore_patterns(context: Path) -> list[str]:
    """The context's .dockerignore patterns. Supported: a path from the context root and
    `**/NAME` for a file or folder name at any depth (globs allowed); exceptions (`!`) are not."""
    ignore_file = context / ".dockerignore"
    if not ignore_file.exists():
        return []
    patterns = []
    for line in ignore_file.read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        if pattern.startswith("!"):
            raise ImageBuildError(f"{ignore_file}: exceptions ('{pattern}') are not supported")
        patterns.append(pattern.rstrip("/"))
    return patterns


def _is_ignored(relative: PurePosixPath, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatchcase(part, pattern[3:]) for part in relative.parts):
                return True
        else:
            depth = len(PurePosixPath(pattern).parts)
            if fnmatch.fnmatchcase("/".join(relative.parts[:depth]), pattern):
                return True
    return False


# --- containerd ---------------------------------------------------------------------------------


def _containerd_image_ids(address: str, namespace: str) -> dict[str, str]:
    """reference → image id (the digest of the image's config) of every image in containerd."""
    listed = _run_quiet(["ctr", "--address", address, "-n", namespace, "images", "ls", "-q"])
    ids: dict[str, str] = {}
    for reference in listed.split():
        manifest = _content(address, namespace, _manifest_digest(address, namespace, reference))
        ids[reference] = str(json.loads(manifest)["config"]["digest"])
    return ids


def _manifest_digest(address: str, namespace: str, reference: str) -> str:
    # `ctr images ls` columns: REF TYPE DIGEST SIZE PLATFORMS LABELS.
    for line in _run_quiet(
        ["ctr", "--address", address, "-n", namespace, "images", "ls"]
    ).splitlines():
        columns = line.split()
        if columns and columns[0] == reference:
            return columns[2]
    raise ImageBuildError(f"containerd lists no image {reference}")


def _content(address: str, namespace: str, digest: str) -> str:
    return _run_quiet(["ctr", "--address", address, "-n", namespace, "content", "get", digest])


# --- running commands with progress -------------------------------------------------------------


@contextlib.contextmanager
def _step(index: int, total: int, what: str, expected_seconds: int) -> Iterator[IO[str]]:
    """Announce step `index` of `total`, report elapsed time every PROGRESS_INTERVAL_SECONDS
    while it runs, and yield the log file its commands write to."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / (re.sub(r"[^A-Za-z0-9.]+", "-", what).strip("-") + ".log")
    print(
        f">> [{index}/{total}] {what} (a first run takes ~{expected_seconds} s; log: {log_path})",
        file=sys.stderr,
    )
    started = time.monotonic()
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(PROGRESS_INTERVAL_SECONDS):
            elapsed = time.monotonic() - started
            print(f"   … {what}: {elapsed:.0f} s elapsed", file=sys.stderr)

    reporter = threading.Thread(target=report, name="image-progress", daemon=True)
    reporter.start()
    try:
        with log_path.open("w") as log:
            try:
                yield log
            except subprocess.CalledProcessError as error:
                log.flush()
                tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
                raise ImageBuildError(
                    f"{what} failed: {shlex.join(map(str, error.cmd))} exited {error.returncode}"
                    f"\n--- last lines of {log_path} ---\n{tail}"
                ) from error
    finally:
        finished.set()
        reporter.join()
    print(f"   {what}: done in {time.monotonic() - started:.0f} s", file=sys.stderr)


def _run(command: Sequence[str], log: IO[str]) -> None:
    log.write(f"$ {shlex.join(command)}\n")
    log.flush()
    subprocess.run(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True
    )


def _run_quiet(command: Sequence[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise ImageBuildError(f"{shlex.join(command)} failed: {result.stderr.strip()}")
    return result.stdout


def _podman_json(*arguments: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        _run_quiet([*PODMAN, *arguments, "--format", "json"]) or "[]"
    )
    return listed


def _require_tools(recipes: Sequence[Recipe]) -> None:
    _require_command("podman", "podman")
    kinds = {recipe.kind for recipe in recipes}
    if RecipeKind.ROOTFS in kinds:
        _require_command("mmdebstrap", "mmdebstrap")
        if os.geteuid() != 0:
            raise ImageBuildError(
                "building the base images needs root (mmdebstrap and podman's system storage)"
            )
    if RecipeKind.PAUSE in kinds:
        _require_command("gcc", "gcc libc6-dev")
        _require_command("go", "a Go toolchain (for the Kubernetes module's pause.c)")


def _require_command(command: str, package: str) -> None:
    if not any(
        os.access(Path(directory) / command, os.X_OK)
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory
    ):
        raise ImageBuildError(
            f"{command} is not installed; run `scripts/ensure-system-packages.sh node` "
            f"(Debian: {package})"
        )


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One image build per machine at a time: podman's storage and the names are global."""
    cache = Path(
        os.environ.get("SCRAPEQ_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scrapeq"
    )
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "images.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(">> waiting for another image build on this machine …", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
