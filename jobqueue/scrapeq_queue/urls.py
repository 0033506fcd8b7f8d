"""URL normalisation (the form two URLs share when they name the same page, for deduplication),
and the check that a row's URL can be fetched at all (`target_problem`)."""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from scrapeq_queue.errors import InvalidJob

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Browsers and servers refuse longer URLs; a row's URL is also copied into its results and logs.
MAX_URL_CHARS: Final = 8192
# The Fetch standard's "bad ports" (fetch.spec.whatwg.org, port blocking): Chromium refuses them
# (net::ERR_UNSAFE_PORT), so the plain-HTTP engine refuses them too, and a page is refused the
# same way on both engines. Each is another protocol's port (SMTP, IRC, SIP...).
BAD_PORTS: Final = frozenset(
    {1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95}
    | {101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161}
    | {179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563}
    | {587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060}
    | {5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080}
)
# The reason of a row whose URL cannot be fetched whatever the engine (the network guard's too).
BAD_URL_REASON: Final = "bad_url"
# C0 controls and DEL: a URL holding one is refused.
_CONTROL_CHARACTER: Final = re.compile("[\x00-\x1f\x7f]")
# What `ipaddress.ip_address` can read: dotted decimal IPv4, or IPv6 (which holds a colon).
# Other host names skip the attempt: a refused parse costs more than the rest of the check.
_MAYBE_ADDRESS: Final = re.compile(r"[0-9.]+|.*:.*")
# The form nearly every row's URL has: http(s), a host of ASCII labels of 1-63 characters, no
# port or user, and nothing below a space after it. Such a URL has none of target_problem's
# problems, and matching it costs a tenth of parsing it (a claim checks every row it takes).
_PLAIN_URL: Final = re.compile(
    r"(?i:https?)://(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}\.?(?:[/?#][^\x00-\x20\x7f]*)?"
)


def target_problem(url: str, *, max_chars: int | None = MAX_URL_CHARS) -> str | None:
    """Why `url` cannot be fetched by any engine (None: it can be tried).

    A URL that cannot be parsed (an unclosed IPv6 literal), has a port outside 1-65535 or one
    of BAD_PORTS, no host, a host name that cannot be encoded for DNS (IDNA: an empty label or
    one longer than 63 characters), control characters or more than `max_chars` characters (a
    row's URL: a page's own requests are as long as the page makes them). Schemes and
    addresses are the network guard's to judge: a non-http(s) URL passes here.
    """
    shown = url if len(url) <= 200 else url[:197] + "..."
    if max_chars is not None and len(url) > max_chars:
        return f"the URL has {len(url)} characters; at most {max_chars} are allowed"
    stripped = url.strip()
    if _PLAIN_URL.fullmatch(stripped):
        return None
    return _parsed_target_problem(stripped, shown)


def _parsed_target_problem(stripped: str, shown: str) -> str | None:
    """target_problem's checks on the parsed URL, for any URL (the plain form skips them)."""
    if _CONTROL_CHARACTER.search(stripped):
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
    if port in BAD_PORTS:
        return (
            f"the URL {shown!r} uses port {port}, another protocol's port that browsers refuse "
            "(the Fetch standard's bad ports)"
        )
    host = parts.hostname
    if not host:
        return f"the URL {shown!r} has no host"
    if _MAYBE_ADDRESS.fullmatch(host):
        try:
            ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            pass
        else:
            return None
    if host.isascii():
        # The IDNA codec checks no more than the labels' lengths in an ASCII name.
        labels = host.encode("ascii").split(b".")
    else:
        try:
            labels = host.encode("idna").split(b".")
        except UnicodeError as error:
            return f"the host of {shown!r} is not a valid DNS name ({error})"
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
