"""A ScrapeJob whose URL list of 1,000,000 lines is in the object store (a real S3 server,
versitygw), through the operator on the real kube-apiserver: the job is accepted and queues one
source row, the worker's expansion (`SourceExpansion`, in this process, reading the list from the
bucket) queues every URL once, `kubectl get scrapejobs` shows `n/N+` while it does and `n/N`
after, and the operator's RSS, sampled throughout, stays at most 300 MB. A second job from the
same list deleted mid-expansion (a quarter of it queued) stops its expansion at its next batch
and leaves no live row.

The expansion runs in this process instead of a worker process so that no page row gets
scraped meanwhile (there is no site); the worker's own tests run it inside `scrapeq worker`.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import scrapeq_queue
from scrapeq_queue.source_rows import (
    ExpandedBatch,
    ExpandedEntry,
    KeyedEntries,
    SourceProgress,
    enqueue_expanded,
    source_progress,
)
from scrapeq_worker.errors import RetryLater
from scrapeq_worker.http_engine import HttpEngine
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.network_guard import NetworkGuard
from scrapeq_worker.object_store import ObjectStore
from scrapeq_worker.url_sources import SourceExpansion

from scrapeq.local.s3_server import LocalS3Server
from tests.conftest import S3_BUCKET
from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    run_queue_call,
    scrapejob,
    wait_for_status,
)
from tests.waiting import eventually_blocking

pytestmark = [
    pytest.mark.controlplane,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.timeout(900),
]

URLS = 1_000_000
LIST_KEY = "lists/million.txt.gz"
PAGE_OPTIONS: dict[str, Any] = {"render": False, "timeoutSeconds": 30}
OPERATOR_RSS_LIMIT_KIB = 300 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


class RssSampler:
    """Samples a process's RSS every 0.2 s in a thread until stopped; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))
            self.samples += 1
            self._stop.wait(0.2)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)


class QueueRows:
    """The queue operations of an expansion (the worker's gateway makes the same calls), on
    one connection."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def source_progress(self, job: scrapeq_queue.ClaimedJob) -> SourceProgress | None:
        return await source_progress(self.connection, job)

    async def enqueue_expanded(
        self,
        job: scrapeq_queue.ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None:
        return await enqueue_expanded(
            self.connection, job, entries, entries_done=entries_done, skipped=skipped
        )


class Expansion:
    """The worker's expansion of one job's source row, in a thread with its own event loop."""

    def __init__(self, database_url: str, s3: LocalS3Server) -> None:
        self.database_url = database_url
        self.s3 = s3
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="expansion", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, seconds: float) -> None:
        self._thread.join(seconds)
        assert not self._thread.is_alive(), "the expansion did not end"

    def _run(self) -> None:
        try:
            self.result = asyncio.run(self._expand())
        except BaseException as error:  # the test reads it
            self.error = error

    async def _expand(self) -> Any:
        store = ObjectStore(self.s3.store_config(S3_BUCKET))
        async with (
            HttpEngine(NetworkGuard()) as http,
            await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn,
            await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as rows,
        ):
            (source,) = await scrapeq_queue.claim_jobs(
                conn,
                worker_id="expander",
                queues=["default"],
                limit=1,
                lease_seconds=600,
                politeness=scrapeq_queue.NO_SITE_LIMIT,
            )
            options = options_from_payload(PAGE_OPTIONS, default_timeout_seconds=30)
            scraped = await SourceExpansion(http, QueueRows(rows), object_store=store).expand(
                source, options
            )
            await scrapeq_queue.complete_job(
                conn, source.id, source.attempt, result=scraped.result, duration_seconds=1.0
            )
            return scraped.result


@pytest.fixture(scope="module")
def million_list(s3_server: LocalS3Server) -> str:
    lines = "".join(f"https://shop.test/product/{n}\n" for n in range(URLS))
    store = ObjectStore(s3_server.store_config(S3_BUCKET))
    asyncio.run(store.put(LIST_KEY, gzip.compress(lines.encode(), 1), content_type="text/plain"))
    return LIST_KEY


def apply_list_job(kubectl: Kubectl, namespace: str, name: str, key: str) -> str:
    manifest = scrapejob(name, urlsFrom={"object": {"key": key, "format": "lines"}}, **PAGE_OPTIONS)
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    return str(kubectl.get("scrapejob", name, namespace)["metadata"]["uid"])


def rows_and_distinct_urls(database_url: str, uid: str) -> tuple[int, int]:
    async def count(connection: Any) -> tuple[int, int]:
        cursor = await connection.execute(
            "SELECT count(*), count(DISTINCT url_to_scrape) FROM scraping_jobs"
            " WHERE owner_uid = %s AND NOT payload ? 'source'",
            (uid,),
        )
        row = await cursor.fetchone()
        return int(row[0]), int(row[1])

    return run_queue_call(database_url, count)


def test_a_million_url_list_is_queued_once_each_with_progress_and_a_bounded_operator(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
    million_list: str,
) -> None:
    operator = operator_factory(empty_database_url)
    assert operator.process is not None
    with RssSampler(operator.process.pid) as sampler:
        uid = apply_list_job(kubectl, namespace, "million", million_list)
        wait_for_status(
            kubectl,
            namespace,
            "million",
            lambda status: status.get("progress") == "0/1+",
            what="the job accepted with its one source row",
        )

        expansion = Expansion(empty_database_url, s3_server)
        expansion.start()
        during = wait_for_status(
            kubectl,
            namespace,
            "million",
            lambda status: (
                str(status.get("progress", "")).endswith("+")
                and 1 < int(status.get("total", 0)) < URLS + 1
            ),
            what="the rows so far while the list is read",
            timeout=300,
        )
        expansion.join(600)
        assert expansion.error is None, repr(expansion.error)
        after = wait_for_status(
            kubectl,
            namespace,
            "million",
            lambda status: status.get("progress") == f"1/{URLS + 1}",
            what="the job's size, known once the list is read",
            timeout=120,
        )

    assert expansion.result["source"]["enqueued"] == URLS
    assert rows_and_distinct_urls(empty_database_url, uid) == (URLS, URLS)
    assert "expanding" not in after
    assert during["phase"] in ("Pending", "Running")
    assert sampler.samples > 100
    assert sampler.peak_kib <= OPERATOR_RSS_LIMIT_KIB, f"operator peak RSS {sampler.peak_kib} KiB"
    print(
        f"operator peak RSS {sampler.peak_kib / 1024:.1f} MiB over {sampler.samples} samples;"
        f" seen during the expansion: {during['progress']}"
    )


def test_a_million_url_list_job_deleted_mid_expansion_stops_it_and_leaves_no_live_row(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    s3_server: LocalS3Server,
    million_list: str,
) -> None:
    operator_factory(empty_database_url)
    uid = apply_list_job(kubectl, namespace, "halfway", million_list)
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 1, within=30, what="source row"
    )
    expansion = Expansion(empty_database_url, s3_server)
    expansion.start()
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total,
        until=lambda total: total > URLS // 4,
        within=600,
        what="a quarter of the list queued",
    )

    kubectl.run("delete", "scrapejob", "halfway", "-n", namespace, "--wait=true")
    expansion.join(120)

    assert isinstance(expansion.error, RetryLater), repr(expansion.error)
    progress = owner_progress(empty_database_url, uid)
    assert progress.pending + progress.retrying + progress.processing == 0
    assert progress.cancelled == progress.total
    assert URLS // 4 < progress.total < URLS + 1
