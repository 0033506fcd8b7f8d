"""The User-Agent both engines send: one definition, below every module that uses it.

A leaf module (it imports nothing of the worker's), so that the engines, the browser's
settings and the command line's settings all read the same string without importing each
other.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Final


def _version() -> str:
    try:
        return importlib.metadata.version("scrapeq")
    except importlib.metadata.PackageNotFoundError:  # running from a checkout, not installed
        return "dev"


def user_agent(contact_url: str | None) -> str:
    """The User-Agent both engines send unless a job's `headers` override it: it names
    scrapeq and, when the pool sets one, the URL where a site owner reaches its operator (the
    `+URL` convention of Googlebot and bingbot). The `Mozilla/5.0 (compatible; …)` frame keeps
    sites that sniff for browsers from refusing outright; everything after it is honest."""
    contact = f"; +{contact_url}" if contact_url else ""
    return f"Mozilla/5.0 (compatible; scrapeq/{_version()}{contact})"


DEFAULT_USER_AGENT: Final = user_agent(None)

# A User-Agent's product token, the name robots.txt groups are matched against: the name after
# `(compatible;` in a browser-framed agent (`Mozilla/5.0 (compatible; scrapeq/0.1; +URL)`, as
# Googlebot and bingbot send theirs), else its first word (`AcmeBot/2.1 (+URL)`).
_COMPATIBLE_TOKEN: Final = re.compile(r"\(compatible;\s*([A-Za-z0-9_-]+)")
_LEADING_TOKEN: Final = re.compile(r"\s*([A-Za-z0-9_-]+)")
DEFAULT_PRODUCT_TOKEN: Final = "scrapeq"


def product_token(agent: str | None) -> str:
    """The product token of `agent` (scrapeq's own without one, or where none can be read)."""
    if not agent:
        return DEFAULT_PRODUCT_TOKEN
    found = _COMPATIBLE_TOKEN.search(agent) or _LEADING_TOKEN.match(agent)
    return found.group(1) if found else DEFAULT_PRODUCT_TOKEN


__all__ = ["DEFAULT_PRODUCT_TOKEN", "DEFAULT_USER_AGENT", "product_token", "user_agent"]
