"""A session's cookie jar in both engines: the stored form (a list of cookies as
`{"name", "value", "domain", "path", "expires", "secure", "httpOnly"}`, the fields of Chrome
DevTools' `Network.Cookie`) loaded into an aiohttp jar or a browser context, and read back
after the page (docs/worker.md, "Sessions")."""

from __future__ import annotations

import math
from collections.abc import Iterable
from email.utils import formatdate, parsedate_to_datetime
from http.cookies import CookieError, Morsel, SimpleCookie
from typing import Any, Final

import aiohttp
from yarl import URL

# The fields of a stored cookie; anything else a browser reports (size, priority, partition
# keys…) is not kept.
STORED_FIELDS: Final = ("name", "value", "domain", "path", "expires", "secure", "httpOnly")


def stored_cookie(cookie: dict[str, Any]) -> dict[str, Any] | None:
    """`cookie` (a CDP cookie or a stored one) in the stored form; None when it has no name or
    domain (nothing could send it)."""
    name, domain = cookie.get("name"), cookie.get("domain")
    if not isinstance(name, str) or not name or not isinstance(domain, str) or not domain:
        return None
    expires = cookie.get("expires", -1)
    return {
        "name": name,
        "value": str(cookie.get("value", "")),
        "domain": domain,
        "path": str(cookie.get("path") or "/"),
        "expires": float(expires) if isinstance(expires, int | float) else -1.0,
        "secure": bool(cookie.get("secure", False)),
        "httpOnly": bool(cookie.get("httpOnly", False)),
    }


def cookie_jar(cookies: Iterable[dict[str, Any]]) -> aiohttp.CookieJar:
    """A fresh aiohttp jar holding `cookies`. It accepts cookies of IP-address hosts, as a
    browser does (aiohttp refuses them by default), so a session behaves alike in both
    engines."""
    jar = aiohttp.CookieJar(unsafe=True)
    for cookie in cookies:
        stored = stored_cookie(cookie)
        if stored is None:
            continue
        simple: SimpleCookie = SimpleCookie()
        try:
            simple[stored["name"]] = stored["value"]
        except CookieError:
            continue  # a name the standard library cannot write: the site never sees it
        morsel = simple[stored["name"]]
        domain = stored["domain"].lstrip(".")
        morsel["domain"] = domain
        morsel["path"] = stored["path"]
        if stored["expires"] > 0 and math.isfinite(stored["expires"]):
            morsel["expires"] = _http_date(stored["expires"])
        if stored["secure"]:
            morsel["secure"] = True
        if stored["httpOnly"]:
            morsel["httponly"] = True
        jar.update_cookies(simple, response_url=URL.build(scheme="http", host=domain))
    return jar


def jar_cookies(jar: aiohttp.abc.AbstractCookieJar) -> list[dict[str, Any]]:
    """The cookies of an aiohttp jar in the stored form."""
    cookies: list[dict[str, Any]] = []
    for morsel in jar:
        stored = stored_cookie(_morsel_fields(morsel))
        if stored is not None:
            cookies.append(stored)
    return cookies


def _morsel_fields(morsel: Morsel[str]) -> dict[str, Any]:
    expires: float = -1.0
    if morsel["expires"]:
        parsed = _parse_http_date(str(morsel["expires"]))
        expires = parsed if parsed is not None else -1.0
    return {
        "name": morsel.key,
        "value": morsel.value,
        "domain": morsel["domain"],
        "path": morsel["path"] or "/",
        "expires": expires,
        "secure": bool(morsel["secure"]),
        "httpOnly": bool(morsel["httponly"]),
    }


def _http_date(epoch_seconds: float) -> str:
    return formatdate(epoch_seconds, usegmt=True)


def _parse_http_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def cdp_cookie(cookie: dict[str, Any]) -> dict[str, Any]:
    """A stored cookie as Chrome DevTools' `Network.setCookies` takes it (a session cookie has
    no `expires`)."""
    stored = stored_cookie(cookie) or {"name": "", "value": "", "domain": "", "path": "/"}
    sent = {key: stored[key] for key in ("name", "value", "domain", "path")}
    sent["secure"] = bool(stored.get("secure"))
    sent["httpOnly"] = bool(stored.get("httpOnly"))
    if float(stored.get("expires", -1)) > 0:
        sent["expires"] = stored["expires"]
    return sent


def merged(kept: Iterable[dict[str, Any]], fresh: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`kept` with `fresh` laid over it, one cookie per (name, domain, path): a browser reports
    only the cookies of the page's URLs, so the session's other cookies stay."""
    cookies: dict[tuple[str, str, str], dict[str, Any]] = {}
    for cookie in (*kept, *fresh):
        stored = stored_cookie(cookie)
        if stored is not None:
            cookies[(stored["name"], stored["domain"], stored["path"])] = stored
    return list(cookies.values())


__all__ = ["STORED_FIELDS", "cdp_cookie", "cookie_jar", "jar_cookies", "merged", "stored_cookie"]
