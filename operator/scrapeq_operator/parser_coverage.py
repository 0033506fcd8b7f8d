"""Whether a ScrapeJob's parser is one the worker pools of its queue have: pure bookkeeping on
what the workers published (scrapeq_queue.queue_parsers; docs/parsers.md, "Publication").

A ScrapeJob that names a parser no worker of its queue has published is not queued: it gets
Ready=False with reason UnknownParser and a Warning Event, and is checked again every
not-ready retry (30 s by default) until a worker publishes the parser, when its rows are queued.
This spares its rows from failing one by one with unknown_parser. When no worker of the queue
has ever published anything (a new queue, or pools at zero replicas that never started), the
operator cannot know what their image holds: the rows are queued, and a worker that lacks the
parser fails them unknown_parser. Waiting there would deadlock with scale-to-zero: a pool only
starts once rows are queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scrapeq_queue import QueueParsers
from scrapeq_queue.payload import DECLARATIVE_PARSER

from scrapeq_operator.errors import JobNotRunnableError

UNKNOWN_PARSER_REASON: Final = "UnknownParser"
# Parser names an UnknownParser message lists: enough to spot a typo.
MAX_LISTED_PARSERS: Final = 20


def named_parser(payload: Mapping[str, Any] | None) -> str | None:
    """The parser a row payload names (None: the declarative extraction)."""
    parser = (payload or {}).get("parser")
    if not isinstance(parser, str) or parser == DECLARATIVE_PARSER:
        return None
    return parser


def unknown_parser(parser: str, queue: str, published: QueueParsers) -> JobNotRunnableError | None:
    """The UnknownParser error when workers of `queue` published and none has `parser`; None
    when one has it or when none ever published (see the module's docstring)."""
    if published.workers == 0 or parser in published.parsers:
        return None
    names = sorted(published.parsers)
    listed = ", ".join(names[:MAX_LISTED_PARSERS]) or "none"
    if len(names) > MAX_LISTED_PARSERS:
        listed += f" and {len(names) - MAX_LISTED_PARSERS} more"
    return JobNotRunnableError(
        UNKNOWN_PARSER_REASON,
        f"no worker of queue {queue} has parser {parser!r} (they have: {listed}); the rows "
        "are queued once a worker image with it serves the queue (docs/parsers.md)",
    )
