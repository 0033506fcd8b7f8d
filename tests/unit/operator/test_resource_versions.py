"""Resource versions of one object, compared (KEP-5504), and how the status sync tells whether
the watch already shows its last patch of a job."""

from __future__ import annotations

import pytest
from scrapeq_operator.status_sync import JobRef, _Patched, compare_resource_versions, job_ref

from tests.unit.operator.test_job_directory import BODY


@pytest.mark.parametrize(
    ("first", "second", "order"),
    [
        ("41", "42", -1),
        ("42", "42", 0),
        ("100", "99", 1),
        ("99", "100", -1),
        ("123456789012345678901234567890", "123456789012345678901234567889", 1),
    ],
)
def test_resource_versions_compare_as_integers_of_any_length(
    first: str, second: str, order: int
) -> None:
    assert compare_resource_versions(first, second) == order


@pytest.mark.parametrize("odd", ["", "0", "042", "4a", "-4", " 4", "\uff14\uff12"])
def test_a_resource_version_that_is_not_a_plain_positive_integer_does_not_compare(
    odd: str,
) -> None:
    assert compare_resource_versions(odd, "42") is None
    assert compare_resource_versions("42", odd) is None


def ref_at(version: str) -> JobRef:
    return job_ref({**BODY, "metadata": {**BODY["metadata"], "resourceVersion": version}})


def test_a_patch_is_shown_from_its_own_version_on_not_before() -> None:
    patched = _Patched(from_version="40", to_version="45")
    assert not patched.shown_in(job_ref(BODY))  # 42: another writer's change (kopf's mark)
    assert not patched.shown_in(ref_at("40"))
    assert patched.shown_in(ref_at("45"))
    assert patched.shown_in(ref_at("46"))


def test_versions_that_do_not_compare_count_any_newer_copy_as_showing_the_patch() -> None:
    patched = _Patched(from_version="a", to_version="c")
    assert not patched.shown_in(ref_at("a"))
    assert patched.shown_in(ref_at("b"))
    assert patched.shown_in(ref_at("c"))
    # No version from the patch's answer: only the one patched from is known.
    assert not _Patched(from_version="42", to_version=None).shown_in(job_ref(BODY))
    assert _Patched(from_version="41", to_version=None).shown_in(job_ref(BODY))
