"""The operator image's Dockerfile promises: the agreed base, a non-root user, `scrapeq operator`.

No container daemon (and no registry) is reachable where the tests run, so this reads the
Dockerfile; the image is built with `docker build -f operator/Dockerfile .`.
"""

from __future__ import annotations

import json
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[3] / "operator" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
    found = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_the_image_is_built_on_python_3_11_slim_bookworm() -> None:
    bases = [rest.split()[0] for keyword, rest in _instructions() if keyword == "FROM"]
    assert bases
    assert all(base == "python:3.11-slim-bookworm" for base in bases)


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [rest for keyword, rest in _instructions() if keyword == "USER"]
    assert users
    user = users[-1].split(":")[0]
    assert user.isdigit()
    assert int(user) != 0


def test_the_image_starts_the_operator() -> None:
    (entrypoint,) = [rest for keyword, rest in _instructions() if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["scrapeq", "operator"]
