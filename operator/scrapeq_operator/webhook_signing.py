"""How a webhook event is signed, and how a receiver checks it (docs/webhooks.md, "Verifying").

The signature is HMAC-SHA256 with the key from the ScrapeJob's Secret over
`<timestamp>.<body>`, where the timestamp is Unix seconds when the request was made and the
body the exact bytes sent. It travels in one header, `Scrapeq-Signature: t=<timestamp>,v1=<hex>`
(the scheme Stripe and Svix use): signing the timestamp lets a receiver refuse a request
replayed later, and the `v1` label lets a future scheme be sent beside this one.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

SIGNATURE_HEADER: Final = "Scrapeq-Signature"
# Five minutes, as Stripe's libraries default to: covers clock skew and a slow network, and
# keeps the replay window short.
DEFAULT_TOLERANCE_SECONDS: Final = 300


class InvalidSignature(ValueError):
    """The header is missing parts, the timestamp is out of tolerance, or no signature
    matches the body."""


def signature(key: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` under `key`."""
    return hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(key: bytes, timestamp: int, body: bytes) -> str:
    """The value of the Scrapeq-Signature header for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={signature(key, timestamp, body)}"


def verify(
    key: bytes,
    header: str,
    body: bytes,
    *,
    now: float,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
) -> int:
    """Check a Scrapeq-Signature header against `body`; return its timestamp.

    Raises InvalidSignature when the header has no timestamp or no v1 signature, when the
    timestamp is more than `tolerance_seconds` from `now`, or when no v1 signature matches.
    """
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise InvalidSignature("the header needs t=<timestamp> and v1=<signature>")
    if abs(now - timestamp) > tolerance_seconds:
        raise InvalidSignature(f"timestamp {timestamp} is outside the tolerance")
    expected = signature(key, timestamp, body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise InvalidSignature("no signature matches the body")
    return timestamp
