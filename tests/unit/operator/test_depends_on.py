"""spec.dependsOn: reading where a job's dependencies stand and finding cycles.

The ScrapeJobs are plain dicts read through a lookup function, as the API server would return
them; the end-to-end behaviour on a real API server is in tests/e2e/operator/test_pipelines.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from scrapeq_operator.depends_on import MAX_GRAPH_JOBS, check_dependencies
from scrapeq_operator.job_spec import ScrapeJobField, dependency_names, url_source


def job(name: str, phase: str | None = None, depends_on: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"url": f"https://{name}.example/"},
    }
    if depends_on:
        body["spec"]["dependsOn"] = depends_on
    if phase:
        body["status"] = {"phase": phase}
    return body


def reader(*jobs: dict[str, Any]) -> Any:
    by_name = {body["metadata"]["name"]: body for body in jobs}
    reads: list[str] = []

    async def read(name: str) -> Mapping[str, Any] | None:
        reads.append(name)
        return by_name.get(name)

    read.reads = reads  # type: ignore[attr-defined]
    return read


def test_dependency_names_include_a_urls_from_source_once() -> None:
    spec = {"dependsOn": ["a", "b", "a"], "urlsFrom": {"scrapeJob": "b", "field": "links"}}
    assert dependency_names(spec) == ["a", "b"]
    assert url_source(spec) == ScrapeJobField(name="b", field="links")
    assert url_source({"urlsFrom": {"scrapeJob": "b"}}) == ScrapeJobField("b", "links")


async def test_a_job_whose_dependencies_all_succeeded_may_start() -> None:
    read = reader(job("a", "Succeeded"), job("b", "Succeeded"))
    check = await check_dependencies("c", {"dependsOn": ["a", "b"]}, read)
    assert check.satisfied
    assert check.uid_of("b") == "uid-b"


async def test_running_missing_and_failed_dependencies_are_told_apart() -> None:
    read = reader(job("a", "Running"), job("b", "Failed"), job("d"))
    check = await check_dependencies("c", {"dependsOn": ["a", "b", "missing", "d"]}, read)
    assert not check.satisfied
    assert [dependency.describe for dependency in check.waiting] == [
        "a (Running)",
        "missing (not found)",
        "d (Pending)",
    ]
    assert [dependency.describe for dependency in check.failed] == ["b (Failed)"]
    assert check.cycle is None


async def test_a_cycle_through_the_job_is_spelled_out() -> None:
    read = reader(job("a", depends_on=["b"]), job("b", depends_on=["c"]), job("c"))
    # c is being created with dependsOn [a]: c -> a -> b -> c.
    check = await check_dependencies("c", {"dependsOn": ["a"]}, read)
    assert check.cycle == ("c", "a", "b", "c")
    assert not check.satisfied


async def test_a_cycle_elsewhere_in_the_graph_is_not_this_jobs_cycle() -> None:
    read = reader(job("a", depends_on=["b"]), job("b", depends_on=["a"]))
    check = await check_dependencies("c", {"dependsOn": ["a"]}, read)
    assert check.cycle is None
    assert sorted(read.reads) == ["a", "b"], "each job is read once"


@pytest.mark.timeout(10)
async def test_a_huge_graph_is_searched_only_so_far() -> None:
    chain = [job(f"j{n}", depends_on=[f"j{n + 1}"]) for n in range(MAX_GRAPH_JOBS * 2)]
    read = reader(*chain)
    check = await check_dependencies("start", {"dependsOn": ["j0"]}, read)
    assert check.cycle is None
    assert len(read.reads) <= MAX_GRAPH_JOBS + 1
