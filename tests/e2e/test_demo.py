"""`make demo` with local processes (`--processes`, what it falls back to where the node cannot
run) in --once mode: every example ScrapeJob reaches its expected phase and the extracted values
match the demo shop; Ctrl-C stops an interactive demo. The demo on real Pods is tested in
tests/e2e/node/test_demo_on_pods.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
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
        [sys.executable, "-m", "scrapeq", "demo", "--processes", "--once", "--timeout", "300"],
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
    # The category page and the four product pages it links to.
    assert re.search(r"demo-crawl\s+Succeeded\s+5/5\s+0", final_table), final_table
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


def wait_for_text(path: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> str:
    """Poll the demo's output file until `text` appears; fail if the demo exits first."""
    deadline = time.monotonic() + timeout
    while True:
        output = path.read_text(errors="replace")
        if text in output:
            return output
        assert process.poll() is None, f"the demo exited early:\n{output[-4000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{output[-4000:]}"
        time.sleep(0.5)


def still_running(pattern: str) -> str:
    result = subprocess.run(
        ["pgrep", "-af", pattern], capture_output=True, text=True, timeout=10, check=False
    )
    return result.stdout.strip()


@pytest.mark.timeout(600)
def test_ctrl_c_stops_an_interactive_demo_and_everything_it_started(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    environment.pop("SCRAPEQ_USE_EXISTING_CLUSTER", None)
    environment.pop("DEMO_ONCE", None)
    output_file = tmp_path / "demo.out"
    with output_file.open("wb") as output:
        demo = subprocess.Popen(
            [sys.executable, "-m", "scrapeq", "demo", "--processes", "--timeout", "300"],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        text = wait_for_text(output_file, "the system keeps running", demo, timeout=400)
    except BaseException:
        demo.kill()
        demo.wait()
        raise
    apiserver_port = re.search(r"kube-apiserver is ready at https://127\.0\.0\.1:(\d+)", text)
    postgres_port = re.search(r"PostgreSQL is up: postgresql://\S+@127\.0\.0\.1:(\d+)/", text)
    prometheus_port = re.search(r"Prometheus at http://127\.0\.0\.1:(\d+)", text)
    assert apiserver_port, text[-3000:]
    assert postgres_port, text[-3000:]
    assert prometheus_port, text[-3000:]
    demo.send_signal(signal.SIGINT)
    assert demo.wait(timeout=120) == 0
    final = output_file.read_text(errors="replace")
    assert "Ctrl-C" in final
    assert final.rstrip().endswith("stopped.")
    for pattern in (
        f"--secure-port={apiserver_port.group(1)}",
        f"port={postgres_port.group(1)}",
        f"127.0.0.1:{prometheus_port.group(1)}",
        "worker-id demo-worker-",
    ):
        assert still_running(pattern) == "", f"left running: {pattern}"
