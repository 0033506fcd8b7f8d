"""Static extraction in child processes: off the event loop, within the job's time, and gone
when it overruns.

Parsing hostile HTML is CPU work without a useful bound: lexbor takes seconds on a 252 KB page
of 63,000 nested lists, and `:has()` selectors or `all` over deeply nested text multiply it. On
the event loop that stalls every other page, the heartbeats and /healthz. A thread would not
do: lexbor releases the GIL while it parses, but the selector engine and the text walks run
with it held, and a thread cannot be stopped, so an overrun would keep burning a core after its
job ended. A child process can be killed: each extraction goes to an idle child, and one that
has not answered when the job's time runs out is killed (and replaced on the next request), so
the job ends with `timeout` and nothing of it keeps running.

Each child serves one extraction at a time over a pipe; the parent waits for its answer in a
thread of this pool's own (one per child), never in the loop's default executor, which DNS
lookups share. Children are started on first use, with the `spawn` method (the worker holds
threads and an event loop; a fork would copy them half-way), and each is capped at
`memory_limit_bytes` of address space, so a page that needs more fails alone
(`response_too_large`) instead of pushing the pod over its memory limit; a child left big by a
page is retired after answering (RETIRE_ABOVE_BYTES).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import resource
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from .errors import BadInput, PermanentFailure, RetryLater
from .extraction import (
    MAX_EXTRACTED_CHARACTERS,
    ExtractedPage,
    FieldSpec,
    ItemsSpec,
    check_selector,
    extract_static,
)
from .structured_data import StructuredData, read_structured_data
from .transforms import transform_page

logger = logging.getLogger(__name__)

# Two children: a 2-core pod parses two pages at once and keeps its event loop's core.
DEFAULT_PROCESSES: Final = 2
# A 10 MiB page (the default --max-response-bytes) of 1.3 million elements peaks at 0.7 GB in a
# child, so 1 GiB of address space leaves it room and a page that needs more fails alone. Two
# such pages at once beside a browser can pass the chart's default pod limit (1.5 GiB).
DEFAULT_MEMORY_LIMIT_BYTES: Final = 1024 * 1024 * 1024
# A child left holding more than this after an answer (the allocator keeps what a big page
# needed) is retired and its memory returned; an idle child holds 26 MB (16 MB PSS).
RETIRE_ABOVE_BYTES: Final = 256 * 1024 * 1024


@dataclass(frozen=True)
class _Request:
    html: str
    fields: tuple[FieldSpec, ...]
    base_url: str
    follow_selector: str | None
    max_links: int
    wait_for: str | None
    max_characters: int
    text_sample: bool
    items: ItemsSpec | None
    structured_data: tuple[str, ...]
    next_selector: str | None
    text_chars: int = 0


@dataclass(frozen=True)
class _TransformRequest:
    page: ExtractedPage
    fields: tuple[FieldSpec, ...]
    items: ItemsSpec | None


@dataclass(frozen=True)
class _StructuredDataRequest:
    html: str
    base_url: str
    syntaxes: tuple[str, ...]


@dataclass(frozen=True)
class _SelectorCheck:
    selectors: tuple[str, ...]


def _serve(connection: multiprocessing.connection.Connection, memory_limit_bytes: int) -> None:
    """A child's life: answer requests until the parent closes the pipe."""
    # The parent handles interrupts and termination; a terminal's Ctrl-C is not for the child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit stays
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        answer: tuple[str, Any, str]
        try:
            if isinstance(request, _SelectorCheck):
                for selector in request.selectors:
                    check_selector(selector)
                answer = ("ok", None, "")
            elif isinstance(request, _TransformRequest):
                transform_page(request.page, request.fields, request.items)
                answer = ("ok", request.page, "")
            elif isinstance(request, _StructuredDataRequest):
                found = read_structured_data(request.html, request.base_url, request.syntaxes)
                answer = ("ok", found, "")
            else:
                page = extract_static(
                    request.html,
                    request.fields,
                    base_url=request.base_url,
                    follow_selector=request.follow_selector,
                    max_links=request.max_links,
                    wait_for=request.wait_for,
                    max_characters=request.max_characters,
                    text_sample=request.text_sample,
                    items=request.items,
                    structured_data=request.structured_data,
                    next_selector=request.next_selector,
                    text_chars=request.text_chars,
                )
                answer = ("ok", page, "")
        except BadInput as error:
            answer = ("bad_input", error.message, error.reason)
        except PermanentFailure as error:
            answer = ("permanent", error.message, error.reason)
        except MemoryError:
            answer = ("memory", "", "")
        except Exception as error:  # answered, never raised: the parent decides what it means
            answer = ("error", f"{type(error).__name__}: {error}", "")
        try:
            connection.send((*answer, _resident_bytes()))
        except (OSError, ValueError):
            return


def _resident_bytes() -> int:
    """This process's resident memory now (0 when /proc cannot tell)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


class _Child:
    """One child process and the parent's end of its pipe."""

    def __init__(self, memory_limit_bytes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child_end = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child_end, memory_limit_bytes),
            name="scrapeq-extraction",
            daemon=True,
        )
        self.process.start()
        child_end.close()
        # The waiting thread's future while a request is out.
        self.pending: concurrent.futures.Future[Any] | None = None

    def ask(self, request: object) -> Any:
        """Send `request` and wait for the answer (blocking: runs in the pool's threads)."""
        self.connection.send(request)
        return self.connection.recv()

    def close(self) -> None:
        """Close the pipe (the child then ends by itself) and reap the child (blocking)."""
        with contextlib.suppress(OSError):
            self.connection.close()
        self.process.join(timeout=5)
        if self.process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self.process.kill()
            self.process.join(timeout=5)
        with contextlib.suppress(ValueError):
            self.process.close()


class ExtractionProcesses:
    """Up to `processes` children that run static extraction; use `async with` or close()."""

    def __init__(
        self,
        processes: int = DEFAULT_PROCESSES,
        *,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        retire_above_bytes: int = RETIRE_ABOVE_BYTES,
    ) -> None:
        self.processes = processes
        self.memory_limit_bytes = memory_limit_bytes
        self.retire_above_bytes = retire_above_bytes
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._slots = asyncio.Semaphore(processes)
        self._waiters = concurrent.futures.ThreadPoolExecutor(
            max_workers=processes, thread_name_prefix="scrapeq-extraction"
        )
        self._closed = False
        self._reapers: set[asyncio.Task[None]] = set()
        # Children killed for overrunning their job (for tests and logs).
        self.killed = 0

    async def __aenter__(self) -> ExtractionProcesses:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def pids(self) -> list[int]:
        """The children alive now."""
        return [
            child.process.pid
            for child in (*self._idle, *self._busy)
            if child.process.pid is not None and child.process.is_alive()
        ]

    async def extract(
        self,
        html: str,
        fields: Sequence[FieldSpec],
        *,
        url: str,
        base_url: str,
        follow_selector: str | None,
        max_links: int,
        wait_for: str | None = None,
        max_characters: int = MAX_EXTRACTED_CHARACTERS,
        deadline: float,
        text_sample: bool = False,
        items: ItemsSpec | None = None,
        structured_data: Sequence[str] = (),
        next_selector: str | None = None,
        text_chars: int = 0,
    ) -> ExtractedPage:
        """`extract_static` in a child, finished by `deadline` (time.monotonic()).

        Raises what `extract_static` raises (BadInput `bad_selector`, PermanentFailure
        `wait_for_timeout`), RetryLater(timeout) when the deadline passes first
        (the child is killed), PermanentFailure(response_too_large) when the page needs more
        than the child's memory, RetryLater(internal_error) when a child fails otherwise.
        """
        request = _Request(
            html,
            tuple(fields),
            base_url,
            follow_selector,
            max_links,
            wait_for,
            max_characters,
            text_sample,
            items,
            tuple(structured_data),
            next_selector,
            text_chars,
        )
        answer = await self._ask(request, url=url, deadline=deadline, doing="extracting from")
        page: ExtractedPage = answer
        return page

    async def transform(
        self,
        page: ExtractedPage,
        fields: Sequence[FieldSpec],
        items: ItemsSpec | None,
        *,
        url: str,
        deadline: float,
    ) -> ExtractedPage:
        """`page` with its fields' transforms applied (transforms.py) in a child by `deadline`:
        a page's values can be tens of thousands of short strings, each resolved or parsed
        (seconds of CPU at the result limit), so never on the event loop. The same errors as
        `extract`."""
        request = _TransformRequest(page, tuple(fields), items)
        transformed: ExtractedPage = await self._ask(
            request, url=url, deadline=deadline, doing="transforming the values of"
        )
        return transformed

    async def structured_data(
        self, html: str, syntaxes: Sequence[str], *, url: str, base_url: str, deadline: float
    ) -> StructuredData:
        """A rendered page's structured data (structured_data.py) read in a child by
        `deadline`; the same errors as `extract` (RetryLater `timeout` when it passes)."""
        request = _StructuredDataRequest(html, base_url, tuple(syntaxes))
        found: StructuredData = await self._ask(
            request, url=url, deadline=deadline, doing="reading the structured data of"
        )
        return found

    async def check_selectors(self, selectors: Sequence[str], *, url: str, deadline: float) -> None:
        """Raise BadInput(bad_selector) for the first selector lexbor cannot parse, checked in
        a child (many selectors take a while); the same errors as `extract` otherwise."""
        await self._ask(
            _SelectorCheck(tuple(selectors)), url=url, deadline=deadline, doing="checking"
        )

    async def close(self) -> None:
        """Stop every child (a busy one is killed: its request fails) and the waiting threads;
        return once every child is reaped."""
        self._closed = True
        busy, self._busy = list(self._busy), set()
        idle, self._idle = self._idle, []
        for child in busy:
            self.killed += 1
            with contextlib.suppress(OSError, ValueError):
                child.process.kill()
            self._reap(child, child.pending)
        for child in idle:
            self._reap(child, None)
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)
        self._waiters.shutdown(wait=False, cancel_futures=True)

    async def _ask(self, request: object, *, url: str, deadline: float, doing: str) -> Any:
        seconds = max(0.0, deadline - time.monotonic())
        try:
            async with asyncio.timeout(seconds), self._slots:
                child = await self._take()
                pending = child.pending = self._waiters.submit(child.ask, request)
                try:
                    kind, value, reason, resident = await asyncio.wrap_future(pending)
                except BaseException:
                    # Over time, cancelled, or the pipe broke: the child's work is unknown.
                    self._kill(child, pending)
                    raise
                self._give_back(child, retire=resident > self.retire_above_bytes)
        except TimeoutError as error:
            raise RetryLater(
                f"timed out {doing} {url}: the job's timeout ran out while the page was parsed",
                reason="timeout",
            ) from error
        except (EOFError, OSError) as error:
            raise RetryLater(
                f"the extraction process for {url} ended without an answer: {error!r}",
                reason="internal_error",
            ) from error
        if kind == "ok":
            return value
        if kind == "bad_input":
            raise BadInput(value, reason=reason)
        if kind == "permanent":
            raise PermanentFailure(value, reason=reason)
        if kind == "memory":
            raise PermanentFailure(
                f"{url} needs more than {self.memory_limit_bytes // (1024 * 1024)} MiB to parse",
                reason="response_too_large",
            )
        raise RetryLater(f"extraction failed for {url}: {value}", reason="internal_error")

    async def _take(self) -> _Child:
        """An idle child, or a new one (a slot is held, so there is room for it). A child is
        started in a thread (up to 0.1 s on a loaded machine; it imports lexbor on its own
        time); one whose caller stopped waiting is kept for the next request."""
        if self._closed:
            raise RetryLater("the worker is stopping", reason="internal_error")
        while self._idle:
            child = self._idle.pop()
            if child.process.is_alive():
                self._busy.add(child)
                return child
            self._reap(child, None)
        starting = asyncio.get_running_loop().run_in_executor(None, _Child, self.memory_limit_bytes)
        try:
            child = await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._adopt)
            raise
        self._busy.add(child)
        return child

    def _adopt(self, starting: asyncio.Future[_Child]) -> None:
        """A child started for a request that gave up waiting: idle, or reaped if closed."""
        if starting.cancelled() or starting.exception() is not None:
            return
        child = starting.result()
        if self._closed:
            self._reap(child, None)
        else:
            self._idle.append(child)

    def _give_back(self, child: _Child, *, retire: bool = False) -> None:
        if child not in self._busy:
            return  # closed meanwhile: close() reaps it
        self._busy.discard(child)
        child.pending = None
        if self._closed or retire:
            self._reap(child, None)
        else:
            self._idle.append(child)

    def _kill(self, child: _Child, pending: concurrent.futures.Future[Any]) -> None:
        """Kill `child` now; its waiting thread sees the pipe end and the child is reaped."""
        if child not in self._busy:
            return  # closed meanwhile: close() killed and reaps it
        self._busy.discard(child)
        self.killed += 1
        with contextlib.suppress(OSError, ValueError):
            child.process.kill()
        self._reap(child, pending)

    def _reap(self, child: _Child, pending: concurrent.futures.Future[Any] | None) -> None:
        async def reap() -> None:
            if pending is not None:
                # The thread still reading the pipe returns once the child is gone.
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(pending)
            await asyncio.to_thread(child.close)

        task = asyncio.get_running_loop().create_task(reap(), name="extraction-child-reaper")
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)


__all__ = [
    "DEFAULT_MEMORY_LIMIT_BYTES",
    "DEFAULT_PROCESSES",
    "RETIRE_ABOVE_BYTES",
    "ExtractionProcesses",
]
