"""The fleet benchmark still runs end to end (a handful of pods, both modes, its own
PostgreSQL and PgBouncer)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]


def test_the_fleet_benchmark_reports_both_modes_with_their_server_connections(
    pgbouncer: object,
) -> None:
    # `pgbouncer`: the benchmark needs the binary; a machine without it skips (fails in CI).
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fleet",
            "--pods",
            "6",
            "--processes",
            "1",
            "--seconds",
            "4",
            "--warmup",
            "1",
            "--page-seconds",
            "0.2",
            "--pool-size",
            "2",
        ],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    direct, pooled = (json.loads(line) for line in lines[:2])
    assert (direct["mode"], pooled["mode"]) == ("direct", "pgbouncer")
    for result in (direct, pooled):
        assert result["rows_per_second"] > 0
        assert result["claim_p50_ms"] > 0
        assert result["errors"] == 0
    # Each pod holds 3 connections directly; through the pooler only its LISTEN session
    # reaches PostgreSQL, and the pooler's 2 server connections carry the rest.
    assert direct["server_connections_max"] == 6 * 3
    assert pooled["server_connections_max"] <= 6 + 2
    assert any("rows/s" in line for line in lines[2:]), "the table is missing"
