"""`make demo` in --once mode: every example ScrapeJob reaches its expected phase and the
extracted values match the demo shop."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scrapeq.demo.site import PRODUCTS

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.chromium]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_the_demo_runs_every_example_to_its_expected_phase_and_leaves_nothing_running() -> None:
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    environment.pop("SCRAPEQ_USE_EXISTING_CLUSTER", None)
    result = subprocess.run(
        [sys.executable, "-m", "scrapeq", "demo", "--once", "--timeout", "300"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "every example ScrapeJob ended as expected." in output
    final_table = output.rsplit("kubectl get scrapejobs", 1)[1]
    assert re.search(r"demo-product\s+Succeeded\s+1/1\s+0", final_table), final_table
    assert re.search(r"demo-phones\s+Succeeded\s+4/4\s+0", final_table), final_table
    assert re.search(r"demo-broken\s+Failed\s+1/1\s+1", final_table), final_table
    # The extracted values are the shop's own: the script-inserted name and price.
    product = PRODUCTS[1]
    assert f'{{"name": "{product.name}", "price": "{product.price}"}}' in output
    assert "stopped." in output
    leftovers = subprocess.run(
        ["pgrep", "-f", "worker-id demo-worker-"],
        capture_output=True,
        text=True,
        check=False,
    )
    # pgrep exits 1 when nothing matches.
    assert leftovers.returncode == 1, leftovers.stdout
