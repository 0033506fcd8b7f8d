"""The renderer memory watch: no page may grow a renderer, or the browser, past its ceiling.

A page's memory is its renderer process's (with its frames and workers). V8's heap limit
(`--js-flags=--max-old-space-size`, chromium_process.py) stops a JavaScript heap at once (the
renderer crashes and says so on the browser's stderr), but
it does not see array buffers, images, canvases or the DOM, and a renderer close to it spends
its time collecting garbage instead of failing. So the pool also looks at every renderer every
`memory_watch_seconds` and kills (SIGKILL) the one over `renderer_max_memory_mb`, and, while
the browser's processes together are over `max_memory_mb`, its largest renderer: the page that
costs most pays, the browser and the other pages carry on. Chromium reports the kill as a crash
of that page's tab, and its job fails `page_memory` (tab_pool.py asks `explains_crash`).

What is measured is a process's private memory, `RssAnon + RssShmem` of /proc/PID/status: a
constant-time read (a PSS walk of a 3 GB renderer takes milliseconds, every look), and the
memory a page can make grow (the shared libraries it maps are the browser's anyway).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .browser_settings import BrowserSettings

logger = logging.getLogger(__name__)

# A crash of a tab this soon after the watch killed a renderer is that kill.
_KILL_EXPLAINS_SECONDS: Final = 5.0
# What Chromium writes to its stderr when a renderer runs out of memory (Blink's V8 OOM handler,
# PartitionAlloc's).
_OUT_OF_MEMORY_REPORTS: Final = (b"javascript OOM", b"process OOM", b"Out of memory")
# The most of a browser's log read at one crash: a log that grows faster is not the browser's.
_STDERR_READ_LIMIT: Final = 1024 * 1024
# A renderer that vanished by itself (V8 stopping a heap that outran the watch between two
# looks) counts as a memory death when it was last seen at this share of its ceiling or more.
_VANISHED_SHARE: Final = 0.5


@dataclass(frozen=True)
class MemoryKill:
    """One renderer the watch killed: its process, its size and why (`renderer_limit` or
    `browser_limit`)."""

    pid: int
    mb: float
    reason: str
    at: float

    def verdict(self, settings: BrowserSettings) -> tuple[str, str]:
        """The job's failure reason and what happened, in words."""
        if self.reason == "renderer_limit":
            return "page_memory", (
                f"its renderer used {self.mb:.0f} MB, over the "
                f"{settings.renderer_max_memory_mb} MB a page may use; it was killed"
            )
        return "browser_memory", (
            f"its renderer was the largest ({self.mb:.0f} MB) while the browser was over its "
            f"{settings.max_memory_mb} MB; it was killed"
        )


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(root: int) -> list[int]:
    """`root` and every process below it (through /proc/PID/task/TID/children: a few small
    reads instead of a scan of /proc)."""
    found = [root]
    index = 0
    while index < len(found):
        found.extend(_children(found[index]))
        index += 1
    return found


def private_mb(pid: int) -> float | None:
    """`RssAnon + RssShmem` of `pid` in MiB, or None when it is gone (or a zombie, which
    has no memory left and no Rss lines)."""
    total_kb = 0
    found = False
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total_kb += int(line.split()[1])
                    found = True
    except (OSError, ValueError, IndexError):
        return None
    return total_kb / 1024 if found else None


def _is_renderer(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"--type=renderer" in cmdline.read()
    except OSError:
        return False


class MemoryWatch:
    """Holds renderers and browsers under their ceilings; remembers what it killed and how big
    each renderer was at its last look (to explain a crash)."""

    def __init__(
        self, settings: BrowserSettings, *, on_kill: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self._on_kill = on_kill
        self._renderers: dict[int, bool] = {}
        # Renderer pid -> its private memory at the last look (MiB).
        self.last: dict[int, float] = {}
        self.kills: list[MemoryKill] = []
        # How far each browser's stderr log has been read for out-of-memory reports.
        self._stderr_offsets: dict[Path, int] = {}

    def look(self, browsers: Iterable[int]) -> list[MemoryKill]:
        """Measure the processes under each browser process in `browsers` and kill what is
        over a ceiling. Blocking (reads /proc): run it in a thread."""
        now = time.monotonic()
        self.kills = [kill for kill in self.kills if now - kill.at < _KILL_EXPLAINS_SECONDS]
        done: list[MemoryKill] = []
        seen: dict[int, float] = {}
        present: set[int] = set()
        for root in browsers:
            sizes: dict[int, float] = {}
            renderers: dict[int, float] = {}
            for pid in descendants(root):
                mb = private_mb(pid)
                if mb is None:
                    continue
                sizes[pid] = mb
                present.add(pid)
                is_renderer = self._renderers.get(pid)
                if is_renderer is None:
                    is_renderer = self._renderers[pid] = _is_renderer(pid)
                if is_renderer:
                    renderers[pid] = mb
            # A renderer killed moments ago may not have exited yet: it is not killed twice.
            killed = self._killed()
            for pid, mb in renderers.items():
                if mb > self.settings.renderer_max_memory_mb and pid not in killed:
                    done.append(self._kill(pid, mb, "renderer_limit", now))
            killed = self._killed()
            total = sum(mb for pid, mb in sizes.items() if pid not in killed)
            if total > self.settings.max_memory_mb:
                alive = {pid: mb for pid, mb in renderers.items() if pid not in killed}
                if alive:
                    pid = max(alive, key=alive.__getitem__)
                    done.append(self._kill(pid, alive[pid], "browser_limit", now))
            seen.update(renderers)
        # Forget processes that are gone (a pid may come back as something else).
        self._renderers = {pid: self._renderers[pid] for pid in self._renderers if pid in present}
        killed = self._killed()
        self.last = {pid: mb for pid, mb in seen.items() if pid not in killed}
        return done

    def _reports_out_of_memory(self, stderr: Path) -> bool:
        """Whether the browser's log has an out-of-memory report it did not have at the last
        call. A renderer writes it before it dies, so before its crash is reported. Reads only
        what was added since (the log is the browser's, a few kilobytes)."""
        offset = self._stderr_offsets.get(stderr, 0)
        try:
            with open(stderr, "rb") as log:
                log.seek(offset)
                added = log.read(_STDERR_READ_LIMIT)
                self._stderr_offsets[stderr] = log.tell()
        except OSError:
            return False
        return any(report in added for report in _OUT_OF_MEMORY_REPORTS)

    def _killed(self) -> set[int]:
        return {kill.pid for kill in self.kills}

    def _kill(self, pid: int, mb: float, reason: str, now: float) -> MemoryKill:
        kill = MemoryKill(pid, mb, reason, now)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        self.kills.append(kill)
        logger.warning("killed renderer %d (%.0f MB): %s", pid, mb, reason)
        if self._on_kill is not None:
            self._on_kill(reason)
        return kill

    def explains_crash(self, stderr: Path | None = None) -> tuple[str, str] | None:
        """Why a renderer that just crashed died, as (reason, words), when memory explains
        it: the watch killed one moments ago (`page_memory` or `browser_memory`), the
        browser's `stderr` log has a new out-of-memory report (V8 stopped a heap at its limit,
        or an allocation failed: `page_memory`), or a renderer that was large at the last look
        is gone. None when memory does not explain it."""
        now = time.monotonic()
        recent = [kill for kill in self.kills if now - kill.at < _KILL_EXPLAINS_SECONDS]
        if recent:
            return recent[-1].verdict(self.settings)
        if stderr is not None and self._reports_out_of_memory(stderr):
            return "page_memory", (
                f"its renderer ran out of memory (a page may use "
                f"{self.settings.renderer_max_memory_mb} MB, {self.settings.js_heap_mb} MB of "
                "it JavaScript heap)"
            )
        threshold = self.settings.renderer_max_memory_mb * _VANISHED_SHARE
        for pid, mb in list(self.last.items()):
            if mb >= threshold and private_mb(pid) is None:
                return "page_memory", (
                    f"its renderer ran out of memory (last seen at {mb:.0f} MB; a page may "
                    f"use {self.settings.renderer_max_memory_mb} MB, "
                    f"{self.settings.js_heap_mb} MB of it JavaScript heap)"
                )
        return None


__all__ = ["MemoryKill", "MemoryWatch", "descendants", "private_mb"]
