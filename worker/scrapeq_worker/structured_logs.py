"""Log output for a worker pod: plain lines for people, or one JSON object per line for a log
pipeline, carrying the job id, attempt, queue and owning ScrapeJob when a record has them."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

# Attributes a LogRecord has by itself; anything else was passed with `extra=` and is context.
_STANDARD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line: time, level, logger, message, context, exception."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


def configure_logging(*, json_lines: bool, level: str) -> None:
    """Send the worker's logs to stderr in the chosen format (replaces existing handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    # pyppeteer logs every CDP message at DEBUG and "connection closed" at INFO.
    logging.getLogger("pyppeteer").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("websockets").setLevel(max(logging.WARNING, root.level))
