"""The output benchmark still runs end to end (tiny sizes, its own PostgreSQL and S3 server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.timeout(150)]

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]


def test_the_output_benchmark_puts_every_row_in_a_batch_and_prints_lag_and_bytes() -> None:
    completed = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.output_delivery",
            "--rows", "300", "--rate", "100", "--trickle-rows", "20", "--trickle-rate", "10",
        ],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=140, check=False,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    steady, trickle, sizes = (json.loads(line) for line in lines[:3])
    assert (steady["scenario"], steady["rows_in_batches"]) == ("steady", 300)
    assert (trickle["scenario"], trickle["rows_in_batches"]) == ("trickle", 20)
    assert steady["lag_p99_s"] >= steady["lag_p50_s"] >= 0
    assert sizes["completed_rows"] == 320
    assert sizes["bytes_per_row_total"] > 0
    assert any(line.startswith("steady ") for line in lines[3:]), "the table is missing"
