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
    records = [json.loads(line) for line in lines[:3]]
    assert [(r["system"], r["measure"]) for r in records] == [
        ("scrapeq", "throughput"),
        ("scrapeq", "latency"),
        ("scrapeq", "backlog"),
    ]
    assert records[0]["jobs_per_s"] > 0
    assert records[1]["p50_ms"] > 0
    assert records[2]["ratio_p50"] > 0
    assert any(line.startswith("scrapeq ") for line in lines[3:]), "the table is missing"
