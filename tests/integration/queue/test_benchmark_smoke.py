"""The queue benchmark still runs end to end (tiny sizes, scrapeq only, its own PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]


def test_the_benchmark_prints_one_json_line_per_measure_then_a_table() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.queue_throughput",
            "--systems",
            "scrapeq",
            "--jobs",
            "500",
            "--workers",
            "2",
            "--latency-jobs",
            "10",
            "--backlog-finished",
            "2000",
            "--backlog-pending",
            "200",
            "--claim-samples",
            "20",
            "--rounds",
            "1",
        ],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    records = [json.loads(line) for line in lines[:4]]
    assert [(r["system"], r["measure"]) for r in records] == [
        ("scrapeq", "throughput"),
        ("scrapeq", "latency"),
        ("scrapeq", "backlog"),
        ("scrapeq", "stale"),
    ]
    assert records[0]["jobs_per_s"] > 0
    assert records[1]["p50_ms"] > 0
    assert records[2]["ratio_p50"] > 0
    assert records[3]["stale_p50_ms"] > 0
    assert records[3]["analyzed_p50_ms"] > 0
    assert any(line.startswith("scrapeq ") for line in lines[4:]), "the table is missing"
    assert any(line.startswith("claim of one job, scrapeq:") for line in lines[4:])


def test_the_politeness_modes_measure_throughput_against_the_claim_before_politeness() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.queue_throughput",
            "--systems", "scrapeq-before,scrapeq,scrapeq-hot-host", "--measures", "throughput",
            "--jobs", "1000", "--workers", "2", "--rounds", "1",
        ],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in completed.stdout.splitlines()[:3]]
    assert [record["system"] for record in records] == [
        "scrapeq-before",
        "scrapeq",
        "scrapeq-hot-host",
    ]
    assert all(record["jobs_per_s"] > 0 for record in records), records
    # The other hosts' rows, as many as --jobs: a tenth of the ten times as many enqueued.
    assert records[2]["jobs"] == 1000
    # The figures the goals are stated in, computed by the benchmark itself.
    ratios = [line for line in completed.stdout.splitlines() if " of the median rounds" in line]
    assert [line.split(":")[0] for line in ratios] == [
        "politeness on",
        "hot host, other sites' rows",
    ], completed.stdout
    # The claim before politeness walks no sites; the politeness claim visits one site per row
    # or two (2 per site, or a site passed over).
    assert records[0]["host_visits_per_row"] == 0
    assert 0.4 < records[1]["host_visits_per_row"] < 2, records[1]


def test_the_finished_signal_modes_measure_throughput_with_and_without_its_trigger() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.queue_throughput",
            "--systems", "scrapeq-no-signal,scrapeq,scrapeq-signal", "--measures", "throughput",
            "--jobs", "1000", "--workers", "2", "--rounds", "1",
        ],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in completed.stdout.splitlines()[:3]]
    assert [record["system"] for record in records] == [
        "scrapeq-no-signal",
        "scrapeq",
        "scrapeq-signal",
    ]
    assert all(record["jobs_per_s"] > 0 for record in records), records
    ratios = [line for line in completed.stdout.splitlines() if " of the median rounds" in line]
    assert [line.split(":")[0] for line in ratios] == [
        "finished signal, no row opted in",
        "finished signal, every row opted in",
    ], completed.stdout


def test_throughput_jobs_may_carry_a_scrapejobs_payload_and_the_servers_cpu_is_reported() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.queue_throughput",
            "--systems", "scrapeq-before,scrapeq", "--measures", "throughput",
            "--jobs", "1000", "--workers", "2", "--rounds", "1", "--payload", "steps",
        ],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in completed.stdout.splitlines()[:2]]
    assert [record["system"] for record in records] == ["scrapeq-before", "scrapeq"]
    for record in records:
        assert record["payload"] == "steps"
        assert record["jobs"] == 1000
        assert record["enqueue_seconds"] > 0
        # Claims and completions of 1,000 rows cost the server at least some CPU.
        assert record["server_cpu_ms_per_1000_jobs"] > 0, record
    assert "throughput jobs' payload: steps (--payload)" in completed.stdout
