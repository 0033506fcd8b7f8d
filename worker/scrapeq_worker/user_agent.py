"""The User-Agent both engines send: one definition, below every module that uses it.

A leaf module (it imports nothing of the worker's), so that the engines, the browser's
settings and the command line's settings all read the same string without importing each
other.
"""

from __future__ import annotations

import importlib.metadata
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

__all__ = ["DEFAULT_USER_AGENT", "user_agent"]
