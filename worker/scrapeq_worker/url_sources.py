"""A source row (payload `source`) expanded into rows: its document streamed, read, enqueued.

The row's URL is a sitemap, a sitemap index or a robots.txt (decision record 13). It is fetched
by the plain-HTTP engine like any page (the guard, its redirects, the row's upstream proxies;
the claim already applied the site's politeness), read by sitemaps.SitemapReader as it
arrives, and its entries go to the queue in batches of BATCH_ENTRIES, each batch fenced by the
row's attempt and recording how far the expansion got. An attempt after a rescue skips the
entries an earlier one handled. A batch the queue refuses (the row was cancelled because its
ScrapeJob was deleted, or rescued by another worker) stops the expansion at once.

One batch's insert is in flight while the document goes on streaming and the next batch is
read and keyed, so the database and the reader work at the same time; the next batch is sent
only once the one before it is in, so the batches commit in document order and a refused
batch is the last one sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Protocol

from scrapeq_queue import ClaimedJob
from scrapeq_queue.source_rows import (
    ExpandedBatch,
    ExpandedEntry,
    KeyedEntries,
    SourceProgress,
    keyed_entries,
)

from .errors import PermanentFailure, RetryLater
from .http_engine import HttpEngine
from .http_status import check_status
from .job_options import JobOptions
from .object_store import ObjectStore
from .scraper import ScrapeResult
from .sitemaps import ListFormat, SitemapEntry, SitemapReader, parse_lastmod

logger = logging.getLogger(__name__)

# Entries per insert: a 50,000-URL sitemap takes ten statements, each a few MB of arrays.
BATCH_ENTRIES: Final = 5_000
# A source document may take this many times a page's timeout to stream (a 50 MB sitemap on
# a slow site, and its batches): 30 s pages give sources 10 minutes.
SOURCE_TIMEOUT_FACTOR: Final = 20
# A URL list is read from the object store in pieces of about this size.
OBJECT_CHUNK_BYTES: Final = 256 * 1024
# What a sitemap fetch asks for (servers that negotiate send XML, then anything).
SITEMAP_ACCEPT: Final = "application/xml,text/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5"


class SourceRows(Protocol):
    """The queue operations an expansion needs (QueueGateway's); None: stop, the row is no
    longer this attempt's or the database failed."""

    async def source_progress(self, job: ClaimedJob) -> SourceProgress | None: ...

    async def enqueue_expanded(
        self,
        job: ClaimedJob,
        entries: Sequence[ExpandedEntry] | KeyedEntries,
        *,
        entries_done: int,
        skipped: int,
    ) -> ExpandedBatch | None: ...


def is_source_row(payload: Mapping[str, Any]) -> bool:
    """True for a row whose payload names a source: it is expanded, not scraped."""
    return isinstance(payload.get("source"), Mapping)


def is_object_source(payload: Mapping[str, Any]) -> bool:
    """True for a source row whose URL list is in the pool's object store."""
    source = payload.get("source")
    return isinstance(source, Mapping) and source.get("kind") == "object"


class SourceExpansion:
    """Expands source rows through one HTTP engine into one queue."""

    def __init__(
        self,
        http: HttpEngine,
        rows: SourceRows,
        *,
        object_store: ObjectStore | None = None,
        batch_entries: int = BATCH_ENTRIES,
    ) -> None:
        """`object_store`: the pool's, where URL lists (source kind object) are read."""
        self._http = http
        self._rows = rows
        self._object_store = object_store
        self._batch_entries = batch_entries

    async def expand(self, job: ClaimedJob, options: JobOptions) -> ScrapeResult:
        """Stream the source row `job`'s document into rows; its result counts what it did.

        Raises RetryLater for what a later attempt may get past (a 5xx, a timeout, the row
        fenced out) and PermanentFailure for a document that is not a source (its reason
        says why: invalid_sitemap, http_4xx, blocked_address...).
        """
        source: Mapping[str, Any] = job.payload["source"]
        progress = await self._rows.source_progress(job)
        if progress is None:
            raise _stopped(job)
        lastmod_after = _lastmod_after(source)
        kind = source.get("kind")
        url_list: ListFormat | None = None
        if kind == "object":
            url_list = "jsonl" if source.get("format") == "jsonl" else "lines"
        reader = SitemapReader(
            robots=kind == "robots",
            url_list=url_list,
            lastmod_after=lastmod_after,
            start_after=progress.entries,
        )
        timeout = options.timeout_seconds * SOURCE_TIMEOUT_FACTOR
        # One thread for the reader, for the whole document: an lxml parser must only be used
        # in the thread that created it (its names live in a per-thread dictionary).
        parsing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sitemap-reader")
        batches = _Batches(job, self._rows, reader, self._batch_entries, parsing)
        try:
            return await self._expand(job, options, reader, batches, progress, timeout, parsing)
        except BaseException as error:
            # A failure lets the batch in flight land (its entries are good, and it records its
            # progress); a cancellation (the job's timeout, a drain) cancels it.
            await batches.abandon(cancelled=not isinstance(error, Exception))
            raise
        finally:
            # The parser is freed in its own thread too, after whatever chunk it still reads.
            parsing.submit(reader.release)
            parsing.shutdown(wait=False)

    async def _expand(
        self,
        job: ClaimedJob,
        options: JobOptions,
        reader: SitemapReader,
        batches: _Batches,
        progress: SourceProgress,
        stream_seconds: float,
        parsing: concurrent.futures.ThreadPoolExecutor,
    ) -> ScrapeResult:
        loop = asyncio.get_running_loop()
        if reader.kind in ("lines", "jsonl"):
            return await self._expand_object(job, reader, batches, progress, parsing)
        async with self._http.stream(
            job.url,
            timeout_seconds=stream_seconds,
            upstream_proxies=options.upstream_proxies,
            accept=SITEMAP_ACCEPT,
        ) as response:
            check_status(response.status, response.headers, url=response.url)
            content_type = response.headers.get("content-type", "none")
            try:
                async for chunk in response.chunks:
                    # Parsing is CPU work: off the event loop, a chunk at a time.
                    await batches.add(await loop.run_in_executor(parsing, reader.feed, chunk))
                    if reader.done:
                        break
                await batches.add(await loop.run_in_executor(parsing, reader.finish))
            except PermanentFailure as error:
                raise PermanentFailure(
                    f"{error.message} (from {response.url}, Content-Type {content_type[:100]})",
                    reason=error.reason,
                ) from error
            final_url = response.url
        await batches.flush()
        return self._result(job, final_url, reader, batches, progress)

    @staticmethod
    def _result(
        job: ClaimedJob,
        final_url: str,
        reader: SitemapReader,
        batches: _Batches,
        progress: SourceProgress,
    ) -> ScrapeResult:
        enqueued = progress.enqueued + batches.pages
        sitemaps = progress.sitemaps + batches.sitemaps
        logger.info(
            "source %s: %d entries, %d rows and %d sitemaps enqueued%s",
            job.url,
            reader.entries,
            enqueued,
            sitemaps,
            " (truncated at the protocol's bound)" if reader.truncated else "",
        )
        return ScrapeResult(
            result={
                "url": final_url,
                "source": {
                    "kind": reader.kind,
                    "entries": reader.entries,
                    "enqueued": enqueued,
                    "sitemaps": sitemaps,
                    "skipped": progress.skipped + batches.skipped,
                    "truncated": reader.truncated,
                    "resumedAfter": progress.entries,
                },
            },
            follow_urls=(),
        )

    async def _expand_object(
        self,
        job: ClaimedJob,
        reader: SitemapReader,
        batches: _Batches,
        progress: SourceProgress,
        parsing: concurrent.futures.ThreadPoolExecutor,
    ) -> ScrapeResult:
        """Stream a URL list from the pool's object store (source kind object)."""
        key = str(job.payload["source"].get("key", ""))
        if self._object_store is None:
            raise PermanentFailure(
                f"the URL list {key} is in object storage, and this worker pool has none "
                "(--object-store-bucket)",
                reason="source_needs_object_store",
            )
        loop = asyncio.get_running_loop()
        async with self._object_store.stream(key, chunk_bytes=OBJECT_CHUNK_BYTES) as chunks:
            async for chunk in chunks:
                await batches.add(await loop.run_in_executor(parsing, reader.feed, chunk))
            await batches.add(await loop.run_in_executor(parsing, reader.finish))
        await batches.flush()
        return self._result(job, job.url, reader, batches, progress)


class _Batches:
    """The entries waiting for the next insert, the insert in flight, and what the inserts did.

    At most one insert is in flight: `add` sends a full batch once the one before it is in, and
    returns while it is inserted, so that the caller reads on; `flush` sends the rest and waits
    for it. Memory: the batch in flight, the next one keyed and waiting for it, and the one
    being filled.
    """

    def __init__(
        self,
        job: ClaimedJob,
        rows: SourceRows,
        reader: SitemapReader,
        batch_entries: int,
        keying: concurrent.futures.Executor,
    ) -> None:
        self._job = job
        self._rows = rows
        self._reader = reader
        self._batch_entries = batch_entries
        self._keying = keying
        self._pending: list[SitemapEntry] = []
        self._in_flight: asyncio.Task[tuple[ExpandedBatch | None, int]] | None = None
        self._skipped_flushed = 0
        self.pages = 0
        self.sitemaps = 0
        self.skipped = 0

    async def add(self, entries: list[SitemapEntry]) -> None:
        self._pending.extend(entries)
        while len(self._pending) >= self._batch_entries:
            batch = self._pending[: self._batch_entries]
            self._pending = self._pending[self._batch_entries :]
            await self._send(batch, last=False)

    async def flush(self) -> None:
        """Insert what is pending, record that the whole document is read, and wait until
        every insert is in."""
        await self._send(self._pending, last=True)
        self._pending = []
        await self._land()

    async def abandon(self, *, cancelled: bool) -> None:
        """The expansion ends early: wait for the insert in flight (`cancelled`: cancel it
        first), so that no insert outlives the expansion. Its outcome no longer matters."""
        task, self._in_flight = self._in_flight, None
        if task is None:
            return
        if cancelled:
            task.cancel()
        # The insert's own error, if any, is not this expansion's: it ends for another reason.
        await asyncio.gather(task, return_exceptions=True)

    async def _send(self, batch: list[SitemapEntry], *, last: bool) -> None:
        # Progress: a batch's last entry, or (`last`) every entry read, skipped ones included;
        # the entries skipped so far go with the batch that records them as done.
        done = self._reader.entries if last else batch[-1].position
        skipped = self._reader.skipped - self._skipped_flushed if last else 0
        if not batch and not skipped:
            return
        loop = asyncio.get_running_loop()
        keyed = await loop.run_in_executor(
            self._keying,
            keyed_entries,
            [ExpandedEntry(entry.url, entry.is_sitemap) for entry in batch],
        )
        await self._land()
        self._skipped_flushed += skipped
        self._in_flight = asyncio.create_task(
            self._insert(keyed, done, skipped), name=f"source-batch-{self._job.id}"
        )

    async def _insert(
        self, keyed: KeyedEntries, done: int, skipped: int
    ) -> tuple[ExpandedBatch | None, int]:
        inserted = await self._rows.enqueue_expanded(
            self._job, keyed, entries_done=done, skipped=skipped
        )
        return inserted, skipped

    async def _land(self) -> None:
        """Wait for the insert in flight and count it; the row fenced out stops the expansion."""
        task = self._in_flight
        if task is None:
            return
        # Cleared only once it is in: an expansion cancelled meanwhile still waits for it
        # (`abandon`).
        inserted, skipped = await task
        self._in_flight = None
        if inserted is None:
            raise _stopped(self._job)
        self.pages += inserted.pages
        self.sitemaps += inserted.sitemaps
        self.skipped += skipped


def _lastmod_after(source: Mapping[str, Any]) -> datetime | None:
    text = source.get("lastmodAfter")
    if not isinstance(text, str):
        return None
    when = parse_lastmod(text)
    if when is None:
        raise PermanentFailure(
            f"source.lastmodAfter {text[:40]!r} is not an RFC 3339 date-time", reason="bad_input"
        )
    return when


def _stopped(job: ClaimedJob) -> RetryLater:
    return RetryLater(
        f"source row {job.id} stopped: it was cancelled or rescued, or the database failed",
        reason="source_stopped",
    )
