"""`make demo` with local processes (`--processes`, what it falls back to where the node cannot
run) in --once mode: every example ScrapeJob reaches its expected phase and the extracted values
match the demo shop; Ctrl-C, SIGTERM and a closed terminal (SIGHUP) stop the demo and every
process it started, however the demo was started. The demo on real Pods is tested in
tests/e2e/node/test_demo_on_pods.py."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scrapeq.demo.site import PRODUCTS
from tests.waiting import eventually_blocking

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
    # demo-product's screenshot and demo-phones' output are in the demo's S3 bucket, whose
    # files stay after the demo.
    assert re.search(r"S3: \d+ objects in bucket scrapeq-demo", output), output[-4000:]
    bucket = ROOT / ".scrapeq" / "demo-s3" / "root" / "scrapeq-demo"
    keys = [path.relative_to(bucket).as_posix() for path in bucket.rglob("*") if path.is_file()]
    assert [key for key in keys if key.endswith("/screenshot.png")], keys
    assert [key for key in keys if "/demo-phones/" in key and key.endswith(".jsonl")], keys
    assert [key for key in keys if "/demo-phones/" in key and key.endswith("manifest.json")], keys
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

    def output_so_far() -> str:
        output = path.read_text(errors="replace")
        assert text in output or process.poll() is None, f"the demo exited:\n{output[-4000:]}"
        return output

    return eventually_blocking(
        output_so_far,
        until=lambda output: text in output,
        within=timeout,
        what=f"{text!r} in the demo's output",
        every=0.5,
    )


def still_running(pattern: str) -> str:
    result = subprocess.run(
        ["pgrep", "-af", pattern], capture_output=True, text=True, timeout=10, check=False
    )
    return result.stdout.strip()


def _stat(pid: int) -> tuple[int, str] | None:
    """A live process's parent and start time (which tells it apart from a later one that
    reuses the pid), or None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root` (pid → start time). The demo's parts run in sessions of
    their own, so only the process tree, not a process group, shows what it started."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
            started[int(entry.name)] = stat[1]
    found: dict[int, str] = {}
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found[pid] = started[pid]
        pending.extend(children.get(pid, []))
    return found


def survivors(processes: dict[int, str]) -> list[str]:
    """The processes of `processes` still alive, with their command lines."""
    alive = []
    for pid, started in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == started:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            alive.append(f"{pid}: {command.decode(errors='replace')}")
    return alive


def demo_environment() -> dict[str, str]:
    """The environment of a demo that starts every part itself."""
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    for name in ("SCRAPEQ_USE_EXISTING_CLUSTER", "DEMO_ONCE", "DEMO_PROCESSES"):
        environment.pop(name, None)
    return environment


def with_sigint(disposition: signal.Handlers) -> Callable[[], None]:
    """What the demo's process does before it starts: SIGINT as a shell would leave it
    (default in the foreground, ignored for a background job), whatever pytest inherited."""

    def set_sigint() -> None:
        signal.signal(signal.SIGINT, disposition)

    return set_sigint


@contextmanager
def interactive_demo(
    output_file: Path, sigint: signal.Handlers
) -> Iterator[subprocess.Popen[bytes]]:
    """An interactive demo (local processes) writing to `output_file`; killed if the test fails
    before it stopped."""
    with output_file.open("wb") as output:
        demo = subprocess.Popen(
            [sys.executable, "-m", "scrapeq", "demo", "--processes", "--timeout", "300"],
            cwd=ROOT,
            env=demo_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=with_sigint(sigint),
        )
    try:
        yield demo
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def part_patterns(text: str) -> list[str]:
    """pgrep patterns for the parts the demo's output says it started, by their ports: PostgreSQL
    daemonises (pg_ctl) and leaves the demo's process tree. The operator and the workers are in
    the tree (see descendants); the workers are matched by name too, as they may start after
    the tree was read."""
    patterns = ["worker-id demo-worker-"]
    apiserver_port = re.search(r"kube-apiserver is ready at https://127\.0\.0\.1:(\d+)", text)
    postgres_port = re.search(r"PostgreSQL is up: postgresql://\S+@127\.0\.0\.1:(\d+)/", text)
    prometheus_port = re.search(r"Prometheus at http://127\.0\.0\.1:(\d+)", text)
    assert postgres_port, text[-3000:]
    patterns.append(f"port={postgres_port.group(1)}")
    if apiserver_port:
        patterns.append(f"--secure-port={apiserver_port.group(1)}")
    if prometheus_port:
        patterns.append(f"127.0.0.1:{prometheus_port.group(1)}")
    return patterns


def assert_nothing_left(started: dict[int, str], patterns: list[str]) -> None:
    assert survivors(started) == []
    for pattern in patterns:
        assert still_running(pattern) == "", f"left running: {pattern}"


@pytest.mark.timeout(600)
def test_ctrl_c_stops_an_interactive_demo_and_everything_it_started(tmp_path: Path) -> None:
    output_file = tmp_path / "demo.out"
    with interactive_demo(output_file, signal.SIG_DFL) as demo:
        text = wait_for_text(output_file, "the system keeps running", demo, timeout=400)
        patterns = part_patterns(text)
        assert len(patterns) == 4, text[-3000:]
        started = descendants(demo.pid)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=120) == 0
    final = output_file.read_text(errors="replace")
    assert "Ctrl-C" in final
    assert final.rstrip().endswith("stopped.")
    assert_nothing_left(started, patterns)


@pytest.mark.timeout(600)
def test_a_demo_started_as_a_background_job_with_sigint_ignored_still_stops_on_sigint(
    tmp_path: Path,
) -> None:
    output_file = tmp_path / "demo.out"
    with interactive_demo(output_file, signal.SIG_IGN) as demo:
        text = wait_for_text(output_file, "operator started", demo, timeout=400)
        started = descendants(demo.pid)
        demo.send_signal(signal.SIGINT)
        # The examples were cut short: the exit status says which signal did it.
        assert demo.wait(timeout=120) == 128 + signal.SIGINT
    final = output_file.read_text(errors="replace")
    assert "Ctrl-C" in final
    assert final.rstrip().endswith("stopped.")
    assert_nothing_left(started, part_patterns(text))


@pytest.mark.timeout(600)
def test_sigterm_while_the_workers_run_stops_the_demo_and_everything_it_started(
    tmp_path: Path,
) -> None:
    output_file = tmp_path / "demo.out"
    with interactive_demo(output_file, signal.SIG_DFL) as demo:
        text = wait_for_text(output_file, "started demo-worker-1", demo, timeout=400)
        patterns = part_patterns(text)
        assert len(patterns) == 4, text[-3000:]
        started = descendants(demo.pid)
        assert any("demo-worker-1" in line for line in survivors(started)), started
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=120) == 128 + signal.SIGTERM
    final = output_file.read_text(errors="replace")
    assert "SIGTERM" in final
    assert final.rstrip().endswith("stopped.")
    assert_nothing_left(started, patterns)


def _become_the_terminal_s_session() -> None:
    """In the demo's process: make the terminal on fd 0 its controlling terminal, as a login
    shell's session has, so that closing the terminal sends it SIGHUP."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.timeout(600)
def test_closing_the_demo_s_terminal_stops_the_demo_and_everything_it_started(
    tmp_path: Path,
) -> None:
    output_file = tmp_path / "demo.out"
    output_file.touch()
    terminal, terminal_side = os.openpty()
    closed = threading.Event()

    def copy_the_terminal_to_the_output_file() -> None:
        with output_file.open("wb") as output:
            while not closed.is_set():
                readable, _, _ = select.select([terminal], [], [], 0.2)
                if readable:
                    try:
                        output.write(os.read(terminal, 65536))
                    except OSError:
                        return
                    output.flush()

    demo = subprocess.Popen(
        [sys.executable, "-m", "scrapeq", "demo", "--processes", "--timeout", "300"],
        cwd=ROOT,
        env=demo_environment(),
        stdin=terminal_side,
        stdout=terminal_side,
        stderr=terminal_side,
        start_new_session=True,
        preexec_fn=_become_the_terminal_s_session,
    )
    os.close(terminal_side)
    # Started after the demo: a thread running while preexec_fn runs could hold a lock it needs.
    reader = threading.Thread(target=copy_the_terminal_to_the_output_file)
    reader.start()
    try:
        text = wait_for_text(output_file, "started demo-worker-1", demo, timeout=400)
        patterns = part_patterns(text)
        assert len(patterns) == 4, text[-3000:]
        started = descendants(demo.pid)
        closed.set()
        reader.join()
        os.close(terminal)
        # Whatever the demo writes from now on goes nowhere; its exit status and the process
        # table tell what it did.
        assert demo.wait(timeout=120) == 128 + signal.SIGHUP
    finally:
        closed.set()
        reader.join()
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert_nothing_left(started, patterns)
