"""spec.dependsOn: whether a ScrapeJob may start, must keep waiting, or can never run.

The create/resume handler asks before queueing anything. A job starts once every dependency
(and a urlsFrom.scrapeJob source) has Succeeded; until then it is Blocked and checked again
every few seconds. A dependency that ended Failed or Cancelled fails the job or keeps it
waiting, as spec.onDependencyFailure says. A cycle through the job can never resolve (specs
are immutable), so it fails the job with the cycle spelled out. An admission webhook could
reject a cycle at `kubectl apply`, but only by reading other objects; the API server's own
validation (CEL) sees one object, and rejects a job naming itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapeq_operator.job_spec import dependency_names

logger = logging.getLogger(__name__)

# The most ScrapeJobs read while looking for a cycle: deeper pipelines are not followed further
# (a cycle beyond it shows up as a dependency that never succeeds).
MAX_GRAPH_JOBS = 200
SUCCEEDED = "Succeeded"
FAILED_PHASES = frozenset({"Failed", "Cancelled"})

ReadScrapeJob = Callable[[str], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True)
class Dependency:
    """One ScrapeJob this job waits for, as it stands now."""

    name: str
    # "" when the ScrapeJob does not exist (yet), "Pending" when it has no phase yet.
    phase: str
    uid: str | None

    @property
    def describe(self) -> str:
        return f"{self.name} ({self.phase or 'not found'})"


@dataclass(frozen=True)
class DependencyCheck:
    """Where a job's dependencies stand: all Succeeded, some still running, failed, a cycle."""

    dependencies: tuple[Dependency, ...]
    # The names around a cycle through the job itself, first and last the job; None if none.
    cycle: tuple[str, ...] | None = None

    @property
    def failed(self) -> list[Dependency]:
        return [dependency for dependency in self.dependencies if dependency.phase in FAILED_PHASES]

    @property
    def waiting(self) -> list[Dependency]:
        return [
            dependency
            for dependency in self.dependencies
            if dependency.phase != SUCCEEDED and dependency.phase not in FAILED_PHASES
        ]

    @property
    def satisfied(self) -> bool:
        return self.cycle is None and all(
            dependency.phase == SUCCEEDED for dependency in self.dependencies
        )

    def uid_of(self, name: str) -> str | None:
        for dependency in self.dependencies:
            if dependency.name == name:
                return dependency.uid
        return None


async def check_dependencies(
    name: str, spec: Mapping[str, Any], read: ReadScrapeJob
) -> DependencyCheck:
    """Read the job's dependencies (through `read`, a name -> ScrapeJob lookup in the job's
    namespace) and look for a cycle leading back to the job."""
    bodies: dict[str, Mapping[str, Any] | None] = {}

    async def body_of(job: str) -> Mapping[str, Any] | None:
        if job not in bodies:
            bodies[job] = await read(job)
        return bodies[job]

    dependencies = []
    for dependency in dependency_names(spec):
        body = await body_of(dependency)
        if body is None:
            dependencies.append(Dependency(dependency, "", None))
            continue
        phase = str((body.get("status") or {}).get("phase") or "Pending")
        uid = str((body.get("metadata") or {}).get("uid") or "") or None
        dependencies.append(Dependency(dependency, phase, uid))
    cycle = await _cycle_through(name, spec, body_of)
    return DependencyCheck(tuple(dependencies), cycle)


async def _cycle_through(
    name: str,
    spec: Mapping[str, Any],
    body_of: Callable[[str], Awaitable[Mapping[str, Any] | None]],
) -> tuple[str, ...] | None:
    """A path name -> ... -> name along dependsOn edges, or None (depth-first search)."""
    visited: set[str] = set()
    # Each entry: a path from the job, and the dependencies of its last node still to try.
    stack: list[tuple[tuple[str, ...], list[str]]] = [((name,), dependency_names(spec))]
    while stack:
        path, remaining = stack[-1]
        if not remaining:
            stack.pop()
            continue
        current = remaining.pop(0)
        if current == name:
            return (*path, name)
        if current in visited:
            continue
        visited.add(current)
        if len(visited) > MAX_GRAPH_JOBS:
            logger.info(
                "dependency graph of %s exceeds %d jobs; not searched further", name, MAX_GRAPH_JOBS
            )
            return None
        body = await body_of(current)
        if body is None:
            continue
        stack.append(((*path, current), dependency_names(body.get("spec") or {})))
    return None
