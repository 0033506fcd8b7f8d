"""Host keys: which rows count as one site for per-site politeness.

A row's host key is its URL's registrable domain (`shop.example.co.uk` and `www.example.co.uk`
are one site, `example.co.uk`), taken from the public-suffix list bundled with the
`publicsuffixlist` package (private suffixes included, so `alice.github.io` and `bob.github.io`
stay two sites); nothing is downloaded at run time. An IP address, a single-label name
(`localhost`) or a name that is itself a public suffix is its own key. The database computes
the plain host name for rows inserted without a key (a classic application's INSERT): see
docs/queue.md.
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.parse

from publicsuffixlist import PublicSuffixList


@functools.cache
def _suffixes() -> PublicSuffixList:
    # Loads the bundled list (a few ms, once per process); never fetches a newer one.
    return PublicSuffixList()


def host_name_of(url: str) -> str:
    """The lower-cased host of `url` without brackets or port ('' when it has none)."""
    try:
        host = urllib.parse.urlsplit(url.strip()).hostname
    except ValueError:
        return ""
    return (host or "").rstrip(".").lower()


def host_key_of(url: str) -> str:
    """The politeness key of `url`: its registrable domain, or its host where it has none."""
    host = host_name_of(url)
    if not host or "." not in host:
        return host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return host
    registrable = _suffixes().privatesuffix(host)
    return registrable if registrable else host
