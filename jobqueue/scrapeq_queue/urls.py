"""URL normalisation: the form two URLs share when they name the same page, for deduplication."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from scrapeq_queue.errors import InvalidJob

_DEFAULT_PORTS = {"http": 80, "https": 443}


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
