"""A worker that cannot work claims nothing, says why (/readyz, gauges, log) and resumes by
itself once the cause is gone: an unwritable temporary directory, a browser that cannot start,
a database schema behind the code."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
import scrapeq_queue as queue
from prometheus_client.parser import text_string_to_metric_families
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.processes import free_port
from tests.waiting import eventually

from .conftest import Connection, job_row
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

# Short enough that recovery shows within a test, long enough to see the worker wait.
RECHECK_SECONDS = 0.5


@contextlib.contextmanager
def unwritable_directory(path: Path) -> Iterator[Path]:
    """A directory no one can create files in; made writable again on exit.

    Root writes through permission bits, so as root the directory is also made immutable."""
    path.mkdir()
    path.chmod(0o555)
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        with pytest.raises(PermissionError):
            tempfile.mkdtemp(dir=path)
        yield path
    finally:
        make_writable(path)


def make_writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o755)


def fake_chromium(path: Path, *, version_works: bool) -> str:
    """An executable that fails like a Chromium that cannot start (at `--version` too, or
    only when launched for real)."""
    version = 'if [ "$1" = --version ]; then echo "Chromium 1.0"; exit 0; fi\n'
    path.write_text(
        "#!/bin/sh\n"
        + (version if version_works else "")
        + 'echo "FATAL: No usable sandbox (fake)" >&2\nexit 1\n'
    )
    path.chmod(0o755)
    return str(path)


@dataclasses.dataclass
class RunningWorker:
    worker: Worker
    base: str

    async def readyz(self) -> tuple[int, str]:
        async with aiohttp.ClientSession() as http, http.get(f"{self.base}/readyz") as response:
            return response.status, await response.text()

    def gauges(self) -> dict[tuple[str, str], float]:
        values: dict[tuple[str, str], float] = {}
        text = self.worker.metrics.render().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in ("scrapeq_worker_ready", "scrapeq_worker_not_ready"):
                    values[(sample.name, sample.labels.get("reason", ""))] = sample.value
        return values


@contextlib.asynccontextmanager
async def running_worker(settings: WorkerSettings) -> AsyncIterator[RunningWorker]:
    worker = Worker(
        dataclasses.replace(
            settings, burst=False, metrics_host="127.0.0.1", metrics_port=free_port()
        ),
        install_signal_handlers=False,
        recheck_seconds=RECHECK_SECONDS,
    )
    run = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: (
                run.done()
                or (worker.metrics_server is not None and bool(worker.metrics_server.port))
            ),
            within=30,
            what="the worker's metrics server",
        )
        assert worker.metrics_server is not None
        assert not run.done()
        yield RunningWorker(worker, f"http://127.0.0.1:{worker.metrics_server.port}")
    finally:
        worker.request_stop()
        assert await asyncio.wait_for(run, 30) == 0


async def wait_for_readyz(
    running: RunningWorker, check: Callable[[int, str], bool], *, what: str
) -> tuple[int, str]:
    return await eventually(
        running.readyz, until=lambda answer: check(*answer), within=30, what=f"/readyz {what}"
    )


async def enqueue_pages(connection: Connection, site: HostileSite, count: int) -> list[int]:
    ids = []
    for n in range(count):
        job_id = await queue.enqueue(
            connection, site.url(f"/js/{n}"), dedup_key=f"ready{n}", payload={"waitFor": "h1.name"}
        )
        assert job_id is not None
        ids.append(job_id)
    return ids


async def assert_untouched(connection: Connection, ids: list[int]) -> None:
    for job_id in ids:
        row = await job_row(connection, job_id)
        assert (row.status, row.retry_count, row.attempts) == ("pending", 0, [])


async def completed_all(connection: Connection, ids: list[int]) -> bool:
    rows = [await job_row(connection, job_id) for job_id in ids]
    return all(row.status == "completed" for row in rows)


async def ready_again_and_completes(
    running: RunningWorker, connection: Connection, ids: list[int]
) -> None:
    """The cause is gone: the worker becomes ready by itself and does the jobs."""
    await wait_for_readyz(running, lambda status, _: status == 200, what="ready again")
    await eventually(lambda: completed_all(connection, ids), within=60, what="every job completed")


def repair_browser(chromium: Path, real: str) -> None:
    chromium.unlink(missing_ok=True)
    chromium.symlink_to(real)


async def checked_again(running: RunningWorker, *, rounds: int) -> None:
    """Wait until the worker has run `rounds` more readiness rounds."""
    target = running.worker.readiness_rounds + rounds
    await eventually(
        lambda: running.worker.readiness_rounds >= target,
        within=RECHECK_SECONDS * rounds + 30,
        what=f"{rounds} more readiness rounds",
    )


async def not_ready_for(
    running: RunningWorker, connection: Connection, ids: list[int], reason: str, words: str
) -> None:
    """/readyz, the gauges and the log agree that the worker is not ready for `reason`, and
    a few recheck rounds later no row has been touched."""
    status, text = await wait_for_readyz(
        running, lambda status, text: f"{reason}:" in text, what=f"not ready ({reason})"
    )
    assert status == 503
    assert words in text
    gauges = running.gauges()
    assert gauges[("scrapeq_worker_ready", "")] == 0
    assert gauges[("scrapeq_worker_not_ready", reason)] == 1
    # It keeps checking (several rounds) and still claims nothing.
    await checked_again(running, rounds=3)
    assert running.worker.metrics.jobs_claimed.labels("default")._value.get() == 0
    await assert_untouched(connection, ids)


async def test_a_worker_without_a_writable_temp_dir_claims_nothing_until_it_has_one(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = await enqueue_pages(connection, site, 3)
    with unwritable_directory(tmp_path / "read-only") as directory:
        monkeypatch.setenv("TMPDIR", str(directory))
        async with running_worker(worker_settings) as running:
            await not_ready_for(running, connection, ids, "temp_dir", "no writable temporary")
            assert any(
                "not ready, claiming nothing (temp_dir)" in record.getMessage()
                for record in caplog.records
            )
            make_writable(directory)
            await ready_again_and_completes(running, connection, ids)
            assert running.gauges()[("scrapeq_worker_not_ready", "temp_dir")] == 0


@pytest.mark.parametrize("broken", ["missing", "exits-at-once"])
async def test_a_worker_whose_browser_cannot_start_claims_nothing_until_it_can(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    chromium_executable: str,
    tmp_path: Path,
    broken: str,
) -> None:
    ids = await enqueue_pages(connection, site, 3)
    chromium = tmp_path / "chromium"
    if broken == "exits-at-once":
        fake_chromium(chromium, version_works=False)
    settings = dataclasses.replace(worker_settings, chromium=str(chromium))
    async with running_worker(settings) as running:
        words = "not an executable file" if broken == "missing" else "No usable sandbox"
        await not_ready_for(running, connection, ids, "browser", words)
        repair_browser(chromium, chromium_executable)
        await ready_again_and_completes(running, connection, ids)


async def test_a_browser_that_fails_to_launch_at_work_hands_its_jobs_back_unspent(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    chromium_executable: str,
    tmp_path: Path,
) -> None:
    # `--version` answers, so the browser only fails once a job launches it.
    ids = await enqueue_pages(connection, site, 3)
    chromium = tmp_path / "chromium"
    settings = dataclasses.replace(
        worker_settings,
        chromium=fake_chromium(chromium, version_works=True),
        # The three pages are on the one test site: all of them must be claimed at once.
        max_concurrent_per_site=3,
    )
    async with running_worker(settings) as running:
        status, text = await wait_for_readyz(
            running, lambda status, text: "browser:" in text, what="not ready (browser)"
        )
        assert status == 503
        assert "No usable sandbox" in text

        async def handed_back() -> bool:
            rows = [await job_row(connection, job_id) for job_id in ids]
            return all(row.status == "pending" and row.attempts for row in rows)

        await eventually(handed_back, within=30, what="every job handed back")
        for job_id in ids:
            row = await job_row(connection, job_id)
            assert row.retry_count == 0
            assert {attempt.outcome for attempt in row.attempts} == {"released"}
        claimed = running.worker.metrics.jobs_claimed.labels("default")._value.get()
        await checked_again(running, rounds=3)
        assert running.worker.metrics.jobs_claimed.labels("default")._value.get() == claimed

        repair_browser(chromium, chromium_executable)
        await ready_again_and_completes(running, connection, ids)


async def test_a_worker_against_a_schema_behind_claims_nothing_until_it_is_migrated(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    ids = await enqueue_pages(connection, site, 3)
    latest = queue.SCHEMA_VERSION
    await connection.execute("DELETE FROM scrapeq_schema_migrations WHERE version = %s", (latest,))
    async with running_worker(worker_settings) as running:
        await not_ready_for(running, connection, ids, "schema", "scrapeq migrate")
        await connection.execute(
            "INSERT INTO scrapeq_schema_migrations (version) VALUES (%s)", (latest,)
        )
        await ready_again_and_completes(running, connection, ids)


async def test_a_burst_worker_that_cannot_work_exits_1_without_touching_a_row(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection, tmp_path: Path
) -> None:
    ids = await enqueue_pages(connection, site, 3)
    worker = Worker(
        dataclasses.replace(worker_settings, chromium=str(tmp_path / "no-such-chromium")),
        install_signal_handlers=False,
    )
    assert await asyncio.wait_for(worker.run(), 30) == 1
    await assert_untouched(connection, ids)
