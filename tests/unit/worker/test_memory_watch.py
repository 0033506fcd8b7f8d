"""The renderer memory watch against real processes: it kills the renderer over its ceiling, or
the largest while the browser is over its limit, leaves the rest alone, and explains the crash
that follows.

The "browser" is a shell with Python children that hold a given amount of memory and carry
`--type=renderer` on their command line, as Chromium's renderers do.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrapeq_worker.browser_settings import BrowserSettings
from scrapeq_worker.memory_watch import MemoryWatch, descendants, private_mb

pytestmark = [pytest.mark.timeout(60)]

HOLD = "import sys, time; block = bytearray(int(sys.argv[1]) * 1024 * 1024); time.sleep(60)"


def holder(mb: int, *, renderer: bool = True) -> str:
    flag = " --type=renderer" if renderer else ""
    return f"{sys.executable} -c '{HOLD}' {mb}{flag}"


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    """A process tree: a shell (the browser) with one child per size in the test's marker."""
    sizes: list[tuple[int, bool]] = request.param
    script = " & ".join(holder(mb, renderer=renderer) for mb, renderer in sizes) + " & wait"
    shell = subprocess.Popen(["sh", "-c", script])
    try:
        deadline = time.monotonic() + 20
        while True:
            children = descendants(shell.pid)[1:]
            sized = [private_mb(pid) or 0 for pid in children]
            if len(children) == len(sizes) and all(
                mb >= want * 0.9 for mb, (want, _) in zip(sorted(sized), sorted(sizes), strict=True)
            ):
                break
            assert time.monotonic() < deadline, "the holders did not start"
            time.sleep(0.05)
        yield shell
    finally:
        for pid in descendants(shell.pid)[1:]:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        shell.kill()
        shell.wait()


def alive_children(shell: subprocess.Popen[bytes]) -> int:
    return sum(1 for pid in descendants(shell.pid)[1:] if private_mb(pid) is not None)


def wait_for_children(shell: subprocess.Popen[bytes], count: int) -> None:
    deadline = time.monotonic() + 10
    while alive_children(shell) != count:
        assert time.monotonic() < deadline, f"expected {count} live children"
        time.sleep(0.05)


@pytest.mark.parametrize("browser", [[(120, True), (20, True), (120, False)]], indirect=True)
def test_a_renderer_over_its_ceiling_is_killed_and_explains_the_crash(
    browser: subprocess.Popen[bytes],
) -> None:
    watch = MemoryWatch(BrowserSettings(renderer_max_memory_mb=80, max_memory_mb=10_000))

    kills = watch.look([browser.pid])

    # The 120 MB holder (at least 90 % of it is resident once the fixture lets the test run).
    assert [(kill.reason, kill.mb >= 120 * 0.9) for kill in kills] == [("renderer_limit", True)]
    # The small renderer and the large process that is no renderer live on.
    wait_for_children(browser, 2)
    verdict = watch.explains_crash()
    assert verdict is not None
    assert verdict[0] == "page_memory"
    assert "80 MB" in verdict[1]


@pytest.mark.parametrize("browser", [[(60, True), (40, True), (10, True)]], indirect=True)
def test_over_the_browser_limit_the_largest_renderer_is_killed(
    browser: subprocess.Popen[bytes],
) -> None:
    watch = MemoryWatch(BrowserSettings(renderer_max_memory_mb=1000, max_memory_mb=100))

    kills = watch.look([browser.pid])

    # The 60 MB holder, the largest.
    assert [(kill.reason, kill.mb >= 60 * 0.9) for kill in kills] == [("browser_limit", True)]
    wait_for_children(browser, 2)
    verdict = watch.explains_crash()
    assert verdict is not None
    assert verdict[0] == "browser_memory"
    # Back under the limit: the next look kills nothing.
    assert watch.look([browser.pid]) == []


@pytest.mark.parametrize("browser", [[(30, True), (30, True)]], indirect=True)
def test_renderers_within_their_limits_are_left_alone_and_explain_no_crash(
    browser: subprocess.Popen[bytes],
) -> None:
    watch = MemoryWatch(BrowserSettings(renderer_max_memory_mb=100, max_memory_mb=1000))

    assert watch.look([browser.pid]) == []
    assert alive_children(browser) == 2
    assert watch.explains_crash() is None


@pytest.mark.parametrize("browser", [[(60, True)]], indirect=True)
def test_a_large_renderer_that_vanished_by_itself_is_taken_for_a_heap_limit(
    browser: subprocess.Popen[bytes],
) -> None:
    watch = MemoryWatch(BrowserSettings(renderer_max_memory_mb=100, max_memory_mb=1000))
    assert watch.look([browser.pid]) == []
    (renderer,) = descendants(browser.pid)[1:]

    subprocess.run(["kill", "-9", str(renderer)], check=True)
    wait_for_children(browser, 0)

    verdict = watch.explains_crash()
    assert verdict is not None
    assert verdict[0] == "page_memory"
    assert "ran out of memory" in verdict[1]


def test_an_out_of_memory_report_in_the_browsers_log_explains_the_next_crash_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stderr.log"
    log.write_bytes(b"DevTools listening on ws://127.0.0.1:1/devtools/browser/x\n")
    watch = MemoryWatch(BrowserSettings(renderer_max_memory_mb=384, js_heap_mb=512))
    assert watch.explains_crash(log) is None

    with log.open("ab") as append:
        append.write(
            b"[1203/143243.196801:ERROR:v8_oom.cc(49)] V8 javascript OOM (Reached heap limit).\n"
        )

    verdict = watch.explains_crash(log)
    assert verdict is not None
    assert verdict[0] == "page_memory"
    assert "512 MB of it JavaScript heap" in verdict[1]
    # The report is read once: a later crash needs a report of its own.
    assert watch.explains_crash(log) is None
