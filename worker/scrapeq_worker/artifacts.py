"""Page artifacts (payload `keep`): what a job keeps of its page besides the result, with
their caps, and where each one goes (docs/worker.md, "Artifacts").

With an object store, every kept artifact is uploaded under the row's keys and the result
holds `artifacts: {name: {key, bytes, sha256}}`; a result over the row's limit is uploaded
whole as `result.json` and the row keeps a small pointer document. Without one, html and text
go into the result itself (the result cap cuts them and names them under `truncated`), and a
job that keeps a screenshot or a PDF fails `artifact_needs_object_store` before its page is
fetched: the row cannot hold them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from scrapeq_queue.payload import RENDERED_ARTIFACT_KINDS

from .errors import BadInput, PermanentFailure
from .extraction import TEXT_SAMPLE_CHARACTERS, PageOutcome, cap_result
from .job_options import JobOptions
from .object_store import ObjectStore, StoredObject

# The caps. HTML: what a page may download (--max-response-bytes, 10 MiB by default) is the
# natural bound, in characters. Text: 1 Mi characters, several books' worth; the text of a page
# rarely passes 100 K. The captures' caps are the browser's (browser_settings.py).
TEXT_MAX_CHARS: Final = 1024 * 1024
# With an object store, a result over the row's limit is stored whole up to this size (cut
# beyond it, as the row's result is): 8 MiB, 32 times the row's default limit.
RESULT_OBJECT_MAX_BYTES: Final = 8 * 1024 * 1024

# Object names under the row's key prefix, and their content types.
OBJECT_NAMES: Final = {
    "html": ("page.html", "text/html; charset=utf-8"),
    "text": ("page.txt", "text/plain; charset=utf-8"),
    "screenshot": ("screenshot.png", "image/png"),
    "pdf": ("page.pdf", "application/pdf"),
}
RESULT_OBJECT: Final = ("result.json", "application/json")


@dataclass(frozen=True)
class Artifacts:
    """What a scrape keeps of its page and where it goes: `store` None keeps html and text in
    the result. `html_limit` is the most characters of HTML a kept html artifact has in the
    store; `max_result_bytes` is the row's limit."""

    store: ObjectStore | None
    html_limit: int
    max_result_bytes: int

    def prepare(self, options: JobOptions) -> JobOptions:
        """`options` with what the engines must read for the kept artifacts; raises
        PermanentFailure(artifact_needs_object_store) or BadInput before any page is fetched
        when the artifacts cannot be kept."""
        if self.store is not None and not options.result_chars:
            options = replace(
                options, result_chars=max(self.max_result_bytes, RESULT_OBJECT_MAX_BYTES)
            )
        if not options.keep:
            return options
        rendered = [kind for kind in RENDERED_ARTIFACT_KINDS if kind in options.keep]
        named = " and ".join(rendered)
        verb = "needs" if len(rendered) == 1 else "need"
        if rendered and not options.render:
            raise BadInput(
                f"keep: {named} {verb} a rendered page (render: true)", reason="invalid_payload"
            )
        if rendered and self.store is None:
            raise PermanentFailure(
                f"keep: {named} {verb} an object store, and this worker pool has none "
                "(--object-store-bucket, chart workers.objectStore.bucket)",
                reason="artifact_needs_object_store",
            )
        # Without a store the row holds html and text: nothing past its limit can stay.
        room = self.html_limit if self.store is not None else self.max_result_bytes
        text_room = TEXT_MAX_CHARS if self.store is not None else self.max_result_bytes
        return replace(
            options,
            html_limit=max(options.html_limit, room)
            if "html" in options.keep
            else options.html_limit,
            text_chars=text_room if "text" in options.keep else 0,
        )

    def take_text(self, outcome: PageOutcome, options: JobOptions) -> str | None:
        """The text artifact out of `outcome` (read in place of the text sample), leaving the
        sample the job would have had without it."""
        page = outcome.extracted
        if not options.text_chars or page is None:
            return None
        text = page.text_sample or ""
        page.text_sample = (text[:TEXT_SAMPLE_CHARACTERS] or None) if options.text_sample else None
        return text

    async def place(
        self,
        document: dict[str, Any],
        outcome: PageOutcome,
        options: JobOptions,
        *,
        text: str | None,
        row: tuple[str, int] | None,
    ) -> dict[str, Any]:
        """The stored result: `document` with its artifacts uploaded (their keys in it) or
        inlined, fitted to the row's limit."""
        kept: dict[str, bytes] = {}
        cut: list[str] = list(document.pop("truncated", None) or [])
        if "html" in options.keep and outcome.html is not None:
            kept["html"] = outcome.html.encode()
        if "text" in options.keep and text is not None:
            kept["text"] = text.encode()
        kept.update(outcome.captures)
        cut.extend(f"artifacts.{name}" for name in outcome.too_large)
        if self.store is None or row is None:
            # In the row: the result cap cuts them further and names what it cut.
            if "html" in kept:
                document["html"] = outcome.html
                if outcome.html_truncated:
                    cut.append("html")
            if "text" in kept:
                document["text"] = text
            if cut:
                document["truncated"] = cut
            return cap_result(document, self.max_result_bytes)
        if "html" in kept and outcome.html_truncated:
            cut.append("artifacts.html")
        if cut:
            document["truncated"] = cut
        queue, job_id = row
        if kept:
            stored: dict[str, Any] = {}
            for name in ("html", "text", "screenshot", "pdf"):
                if name in kept:
                    object_name, content_type = OBJECT_NAMES[name]
                    uploaded = await self.store.put(
                        self.store.key(queue, job_id, object_name),
                        kept[name],
                        content_type=content_type,
                    )
                    stored[name] = uploaded.as_json()
            document["artifacts"] = stored
        return await self._fit(document, queue, job_id)

    async def _fit(self, document: dict[str, Any], queue: str, job_id: int) -> dict[str, Any]:
        """`document` as it is when it fits the row; else uploaded whole (cut to
        RESULT_OBJECT_MAX_BYTES) as result.json and a pointer document in the row."""
        document = cap_result(document, max(self.max_result_bytes, RESULT_OBJECT_MAX_BYTES))
        encoded = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
        if len(encoded) <= self.max_result_bytes:
            return document
        assert self.store is not None
        object_name, content_type = RESULT_OBJECT
        uploaded = await self.store.put(
            self.store.key(queue, job_id, object_name), encoded, content_type=content_type
        )
        return pointer_document(document, uploaded)


# The keys a pointer document keeps of the whole result: small, and what a listing shows.
_POINTER_KEYS: Final = ("url", "final_url", "status", "content_type", "engine", "rendered", "title")


def pointer_document(document: Mapping[str, Any], stored: StoredObject) -> dict[str, Any]:
    """What the row holds of a result stored as an object: its identity and where it is."""
    pointer: dict[str, Any] = {key: document.get(key) for key in _POINTER_KEYS}
    if isinstance(pointer.get("title"), str):
        pointer["title"] = pointer["title"][:1000]
    pointer["result_object"] = stored.as_json()
    if "artifacts" in document:
        pointer["artifacts"] = document["artifacts"]
    return pointer
