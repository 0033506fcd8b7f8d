"""URL normalisation (the form two URLs share when they name the same page, for deduplication),
and the check that a row's URL can be fetched at all (`target_problem`)."""

from __future__ import annotations

import ipaddress
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from scrapeq_queue.errors import InvalidJob

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Browsers and servers refuse longer URLs; a row's URL is also copied into its results and logs.
MAX_URL_CHARS: Final = 8192
# The reason of a row whose URL cannot be fetched whatever the engine (the network guard's too).
BAD_URL_REASON: Final = "bad_url"


def target_problem(url: str, *, max_chars: int | None = MAX_URL_CHARS) -> str | None:
    """Why `url` cannot be fetched by any engine (None: it can be tried).

    A URL that cannot be parsed (an unclosed IPv6 literal), has a port outside 1-65535, no
    host, a host name that cannot be encoded for DNS (IDNA: an empty label or one longer than
    63 characters), control characters or more than `max_chars` characters (a row's URL: a
    page's own requests are as long as the page makes them). Schemes and addresses are the
    network guard's to judge: a non-http(s) URL passes here.
    """
    shown = url if len(url) <= 200 else url[:197] + "..."
    if max_chars is not None and len(url) > max_chars:
        return f"the URL has {len(url)} characters; at most {max_chars} are allowed"
    stripped = url.strip()
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in stripped):
        return f"the URL {shown!r} contains control characters"
    try:
        parts = urlsplit(stripped)
        port = parts.port
    except ValueError as error:
        return f"the URL {shown!r} cannot be parsed: {error}"
    if parts.scheme.lower() not in _DEFAULT_PORTS:
        return None
    if port == 0:
        return f"the URL {shown!r} has port 0; ports are 1-65535"
    host = parts.hostname
    if not host:
        return f"the URL {shown!r} has no host"
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        pass
    else:
        return None
    try:
        encoded = host.encode("idna")
    except UnicodeError as error:
        return f"the host of {shown!r} is not a valid DNS name ({error})"
    labels = encoded.split(b".")
    if labels[-1] == b"":
        labels.pop()  # a fully qualified name's final dot
    if not labels or any(not label or len(label) > 63 for label in labels):
        return f"the host of {shown!r} is not a valid DNS name (an empty or too long label)"
    return None


def normalise_url(url: str) -> str:
    """Return `url` with scheme and host lower-cased, the default port and fragment dropped.

    The query string is kept as given (its order can matter to a site). Raises InvalidJob for a
    blank URL.
    """
    stripped = url.strip()
    if not stripped:
        raise InvalidJob("a job needs a non-empty URL")
    parts = urlsplit(stripped)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError as error:
        raise InvalidJob(f"invalid port in URL {url!r}") from error
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    netloc = host
    if parts.username is not None:
        credentials = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{credentials}@{host}"
    if port is not None and _DEFAULT_PORTS.get(scheme) != port:
        netloc = f"{netloc}:{port}"
    path = parts.path or ("/" if host else "")
    return urlunsplit((scheme, netloc, path, parts.query, ""))
