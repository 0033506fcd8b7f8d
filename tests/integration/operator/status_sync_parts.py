"""Stand-ins for the Kubernetes side of the status sync (the kopf index of ScrapeJobs, the
status PATCH), shared by the tests that run the sync against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import scrapeq_queue as queue
from scrapeq_operator.status_sync import JobRef
from scrapeq_operator.vocabulary import HANDLED_ANNOTATION

Connection = psycopg.AsyncConnection[Any]
UID = "0b5d2c1e-0000-4000-8000-000000000001"


class Directory:
    """The index of ScrapeJobs as the watch fills it; `show` stands for a watch event."""

    def __init__(self, *refs: JobRef) -> None:
        self.refs = {ref.uid: ref for ref in refs}

    def show(self, ref: JobRef) -> None:
        self.refs[ref.uid] = ref

    def get(self, uid: str) -> JobRef | None:
        return self.refs.get(uid)

    def all(self) -> Iterator[JobRef]:
        return iter(list(self.refs.values()))


@dataclass
class StatusApi:
    """Records status patches; fails the first `failures` of them (an operator stopped
    before its patch) and holds those of the jobs named in `held` until released. Each
    applied patch gives the object the next resourceVersion from `next_version`."""

    failures: int = 0
    next_version: int = 100
    patched: list[Mapping[str, Any]] = field(default_factory=list)
    # (name, resourceVersion precondition or None) of each applied patch, in order.
    calls: list[tuple[str, str | None]] = field(default_factory=list)
    held: dict[str, asyncio.Event] = field(default_factory=dict)

    async def patch_scrapejob_status(self, namespace: str, name: str, **kwargs: Any) -> str:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the operator stopped before its status patch")
        if name in self.held:
            await self.held[name].wait()
        self.patched.append(kwargs["status"])
        self.calls.append((name, kwargs["resource_version"]))
        self.next_version += 1
        return str(self.next_version)

    async def announce(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None


def scrapejob_body(
    webhooks: list[dict[str, Any]] | None = None,
    *,
    handled: bool = True,
    uid: str = UID,
    name: str = "laptops",
    resource_version: str = "1",
) -> dict[str, Any]:
    """A ScrapeJob as the index holds it; `handled`: kopf has marked it handled."""
    return {
        "metadata": {
            "uid": uid,
            "namespace": "team",
            "name": name,
            "resourceVersion": resource_version,
            "generation": 1,
            "creationTimestamp": "2026-12-03T19:00:00Z",
            "annotations": {HANDLED_ANNOTATION: "{}"} if handled else {},
        },
        "spec": {"urls": ["https://shop.example.com/1"], "webhooks": webhooks or []},
        "status": {"phase": "Running", "observedGeneration": 1},
    }


async def finished_rows(connection: Connection, uid: str = UID, name: str = "laptops") -> None:
    """One row of the job, claimed and completed."""
    owner = queue.Owner(uid, "team", name)
    await queue.enqueue_for_owner(connection, owner, [f"https://shop.example.com/{name}"])
    (job,) = await queue.claim_jobs(
        connection,
        worker_id="w",
        queues=["default"],
        limit=1,
        lease_seconds=60,
        politeness=queue.NO_SITE_LIMIT,
    )
    await queue.complete_job(connection, job.id, job.attempt, result={}, duration_seconds=0.1)
