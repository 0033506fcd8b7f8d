"""Where a job's sealed credentials go: onto requests to their origins, and nowhere else.

Both engines call `request_headers` for every request they send (the HTTP engine per redirect
hop, the browser per request it pauses in the CDP Fetch domain), so a redirect or a page's
sub-resource on another origin never carries them — even when the request arrives with them
already set (a browser carries request headers along a redirect). The values are never logged
and never reach a result.
"""

from __future__ import annotations

from collections.abc import Mapping

from scrapeq_queue.sealed_credentials import Credentials


def request_headers(
    headers: Mapping[str, str], url: str, credentials: Credentials | None
) -> dict[str, str] | None:
    """The headers a request to `url` should have, or None when `headers` are right as they
    are: with the credentials added on their origins, without them everywhere else."""
    if credentials is None:
        return None
    ours = {name.lower() for name in credentials.headers}
    kept = {name: value for name, value in headers.items() if name.lower() not in ours}
    cookie_name = next((name for name in kept if name.lower() == "cookie"), None)
    cookie = kept.pop(cookie_name) if cookie_name else ""
    if credentials.cookies:
        # Cookies of the same names set by the site (or carried along) give way to ours.
        cookie = "; ".join(
            part
            for part in (piece.strip() for piece in cookie.split(";"))
            if part and part.split("=", 1)[0].strip() not in credentials.cookies
        )
    if credentials.applies_to(url):
        kept.update(credentials.headers)
        if credentials.cookies:
            cookie = "; ".join(part for part in (cookie, credentials.cookie_header()) if part)
    if cookie:
        kept["Cookie"] = cookie
    if kept == dict(headers):
        return None
    return kept
