"""The parsers installed in this worker's image: loading them, choosing one for a row, running it.

Parsers come only from the image: Python packages register callables under the entry-point
group `scrapeq.parsers` (parser_api.ENTRY_POINT_GROUP), read once when the worker starts. A
parser that cannot be imported, is not callable or has a name outside PARSER_NAME is logged
and left out; the worker runs with the rest. A row never carries code, only a name.

Which parser a row gets (`ParserRegistry.choose`, docs/parsers.md "Selection"): the payload's
`parser` when it names one (not registered here: `unknown_parser`); else the row's
`parser_type` when a parser is registered under it; else none, and the declarative payload
decides. `default` (DECLARATIVE_PARSER) is that declarative extraction's own name. Any other
`parser_type` is a producer's label: counted (`scrapeq_worker_unregistered_parser_types_total`)
and logged once per name, or, on a pool that requires registered parsers, `unknown_parser`.

Running (`ParserRunner.run`): an `async def` parser on the event loop, any other in a thread of
the runner's own pool (as many threads as the worker runs pages, so a parser cannot take the
threads other work uses); either bounded by the job's timeoutSeconds. A thread cannot be
stopped: a sync parser past its time fails its row (`parser_timeout`) and keeps its thread
until it returns. An exception is `parser_error` (permanent: the same page and the same code
fail the same way) unless it is parser_api.RetryPage (`parser_retry`, retried) or the worker's
own error raised through `page.actions` (a step that failed: its own reason); a result that is
not a JSON object or is larger than the result limit is `parser_result_invalid`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Final

from scrapeq_queue.payload import DECLARATIVE_PARSER, PARSER_NAME_PATTERN

from .errors import PermanentFailure, RetryLater, WorkerError
from .extraction import PageOutcome
from .parser_api import (
    ENTRY_POINT_GROUP,
    FollowRequest,
    Page,
    PageActions,
    Parser,
    ParserResult,
    RetryPage,
)

logger = logging.getLogger(__name__)

PARSER_NAME: Final = re.compile(PARSER_NAME_PATTERN)
# Names listed in an unknown_parser message: enough to spot a typo, short enough for last_error.
MAX_LISTED_NAMES: Final = 20
# Follow requests read from one parser's result: as many links as a page may yield.
MAX_FOLLOW_REQUESTS: Final = 500
# Characters of a parser's exception message kept in last_error.
MAX_ERROR_CHARS: Final = 1000


class ParserRegistry:
    """The parsers of this worker, by name (immutable once built)."""

    def __init__(self, parsers: Mapping[str, Parser] | None = None) -> None:
        self._parsers: dict[str, Parser] = dict(parsers or {})

    @classmethod
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP) -> ParserRegistry:
        """Load every parser registered under `group` in the installed distributions; a broken
        one is logged (with its distribution) and left out, never raised."""
        loaded: dict[str, Parser] = {}
        seen: dict[str, int] = {}
        for entry in metadata.entry_points(group=group):
            seen[entry.name] = seen.get(entry.name, 0) + 1
            where = _distribution(entry)
            if entry.name == DECLARATIVE_PARSER or not PARSER_NAME.fullmatch(entry.name):
                logger.error(
                    "parser %r from %s left out: a parser's name matches %s and is not %r",
                    entry.name,
                    where,
                    PARSER_NAME_PATTERN,
                    DECLARATIVE_PARSER,
                )
                continue
            try:
                parser = entry.load()
            except Exception:
                logger.exception(
                    "parser %r from %s left out: it failed to import", entry.name, where
                )
                continue
            if not callable(parser):
                logger.error(
                    "parser %r from %s left out: %s is not callable", entry.name, where, entry.value
                )
                continue
            loaded[entry.name] = parser
        for name, count in seen.items():
            # Two packages claiming one name: which code runs would depend on install order.
            if count > 1 and loaded.pop(name, None) is not None:
                logger.error("parser %r left out: %d packages register it", name, count)
        if loaded:
            logger.info("parsers loaded: %s", ", ".join(sorted(loaded)))
        return cls(loaded)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._parsers))

    def get(self, name: str) -> Parser | None:
        return self._parsers.get(name)

    def choose(
        self,
        *,
        payload_parser: str | None,
        parser_type: str,
        require_registered: bool,
        unregistered: Callable[[str], None],
    ) -> str | None:
        """The name of the parser a row runs, or None for the declarative payload alone.

        Raises PermanentFailure (`unknown_parser`, the registered names in its message) when
        the payload names a parser this worker lacks, and, with `require_registered`, when the
        row's parser_type names none. `unregistered(parser_type)` hears of every other
        parser_type that is neither registered nor `default`.
        """
        if payload_parser is not None and payload_parser != DECLARATIVE_PARSER:
            if payload_parser in self._parsers:
                return payload_parser
            raise self.unknown(f"the payload's parser {payload_parser!r}")
        if payload_parser == DECLARATIVE_PARSER or parser_type == DECLARATIVE_PARSER:
            return None
        if parser_type in self._parsers:
            return parser_type
        unregistered(parser_type)
        if require_registered:
            raise self.unknown(f"the row's parser_type {parser_type[:100]!r}")
        return None

    def unknown(self, what: str) -> PermanentFailure:
        """The `unknown_parser` failure for `what`, naming the parsers this worker has."""
        names = self.names
        listed = ", ".join(names[:MAX_LISTED_NAMES]) or "none"
        if len(names) > MAX_LISTED_NAMES:
            listed += f" and {len(names) - MAX_LISTED_NAMES} more"
        return PermanentFailure(
            f"{what} is not a parser of this worker (registered parsers: {listed})",
            reason="unknown_parser",
        )


def _distribution(entry: metadata.EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else entry.value


@dataclass(frozen=True)
class ParsedPage:
    """A parser's checked output: its data (a JSON object within the result limit) and the
    follow requests it made (at most MAX_FOLLOW_REQUESTS; `dropped` counts the rest)."""

    data: dict[str, Any]
    follow: tuple[FollowRequest, ...]
    dropped: int = 0


def page_for_parser(
    outcome: PageOutcome,
    *,
    engine: str,
    parser_type: str,
    payload: Mapping[str, Any],
    html_limit: int,
    actions: PageActions | None = None,
) -> Page:
    """The parser's view of `outcome` (parser_api.Page); `actions`: the live rendered page."""
    extracted = outcome.extracted
    return Page(
        url=outcome.url,
        final_url=outcome.final_url,
        status=outcome.status,
        headers=dict(outcome.headers),
        content_type=outcome.content_type,
        engine=engine,
        html=outcome.html,
        html_truncated=outcome.html_truncated,
        html_limit=html_limit,
        title=extracted.title if extracted else None,
        fields=dict(extracted.fields) if extracted else {},
        links=tuple(extracted.links) if extracted else (),
        parser_type=parser_type,
        payload=dict(payload),
        actions=actions,
    )


class ParserRunner:
    """Runs the registry's parsers within a job's time, sync ones in a bounded thread pool."""

    def __init__(self, registry: ParserRegistry, *, threads: int, max_result_bytes: int) -> None:
        self.registry = registry
        self.max_result_bytes = max_result_bytes
        self._threads = threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the thread pool (threads still in a parser end when it returns)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def run(self, name: str, page: Page, *, timeout_seconds: float) -> ParsedPage:
        """Run the parser `name` on `page`; raise PermanentFailure (`parser_error`,
        `parser_timeout`, `parser_result_invalid`) or RetryLater (`parser_retry`)."""
        parser = self.registry.get(name)
        if parser is None:
            raise self.registry.unknown(f"the parser {name!r}")
        try:
            async with asyncio.timeout(timeout_seconds):
                output = await self._call(parser, page)
        except TimeoutError as error:
            raise PermanentFailure(
                f"parser {name!r} did not return within the job's {timeout_seconds:g}s",
                reason="parser_timeout",
            ) from error
        except _Raised as raised:
            cause = raised.error
            if isinstance(cause, WorkerError):
                # The worker's own verdict on the page, raised through page.actions (a step
                # that failed, a request the guard refused): the row fails as the step would.
                raise cause from None
            if isinstance(cause, RetryPage):
                raise RetryLater(
                    f"parser {name!r} asked to retry: {_message(cause)}",
                    reason="parser_retry",
                    delay_seconds=cause.delay_seconds,
                ) from cause
            raise PermanentFailure(
                f"parser {name!r} raised {type(cause).__name__}: {_message(cause)}",
                reason="parser_error",
            ) from cause
        return self._checked(name, output)

    async def _call(self, parser: Parser, page: Page) -> object:
        # BaseException on purpose: SystemExit or KeyboardInterrupt raised by a parser (or by
        # what it calls) belongs to its row, not to the worker. Only cancellation goes through.
        try:
            if inspect.iscoroutinefunction(parser):
                output: object = await parser(page)
            else:
                loop = asyncio.get_running_loop()
                output = await loop.run_in_executor(self._thread_pool(), parser, page)
                # An object whose __call__ is async hands back its coroutine: run it here.
                if inspect.isawaitable(output):
                    output = await output
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            raise _Raised(error) from error
        return output

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix="scrapeq-parser"
            )
        return self._pool

    def _checked(self, name: str, output: object) -> ParsedPage:
        if isinstance(output, ParserResult):
            data: object = output.data
            requests: Iterable[object] = output.follow
        else:
            data, requests = output, ()
        if not isinstance(data, Mapping):
            raise _invalid(
                name, f"returned {type(data).__name__}, not a JSON object or a ParserResult"
            )
        try:
            text = json.dumps(data, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as error:
            raise _invalid(name, f"returned a result that is not JSON ({error})") from error
        size = len(text.encode())
        if size > self.max_result_bytes:
            raise _invalid(
                name,
                f"returned {size} bytes of JSON, more than the {self.max_result_bytes}-byte "
                "result limit",
            )
        follow: list[FollowRequest] = []
        dropped = 0
        for request in requests:
            if not isinstance(request, FollowRequest) or not isinstance(request.url, str):
                raise _invalid(
                    name, f"returned a follow request that is not a FollowRequest: {request!r:.200}"
                )
            label = request.label
            if label is not None and (
                not isinstance(label, str) or not PARSER_NAME.fullmatch(label)
            ):
                raise _invalid(
                    name,
                    f"returned a follow label that is not a parser name ({PARSER_NAME_PATTERN}): "
                    f"{label!r:.100}",
                )
            if len(follow) < MAX_FOLLOW_REQUESTS:
                follow.append(request)
            else:
                dropped += 1
        return ParsedPage(json.loads(text), tuple(follow), dropped)


class _Raised(Exception):
    """Carries what a parser raised out of `_call` (BaseException included)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _message(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


def _invalid(name: str, what: str) -> PermanentFailure:
    return PermanentFailure(f"parser {name!r} {what}", reason="parser_result_invalid")


__all__ = [
    "MAX_FOLLOW_REQUESTS",
    "ParsedPage",
    "ParserRegistry",
    "ParserRunner",
    "page_for_parser",
]
