"""Credentials (headers, cookies, upstream proxies and values page steps type) sealed into a
row's payload, readable only with the key.

A ScrapeJob names its credentials in a Secret; the operator reads the Secret and stores the
values in each row as `payload.sealed`, encrypted with AES-256-GCM under a key that only the
operator and the workers hold (`SCRAPEQ_SEALING_KEY`). Anyone who can read the table, the
ScrapeJob or the logs sees an opaque string; a worker opens it just before the request.

The upstream proxies of a ScrapeJob (spec.proxy: `http://user:password@host:port` URLs from a
Secret) travel the same way: every request of the row's page goes through one of them. So do
the values a ScrapeJob's `type`/`fill` steps take from a Secret (`valueFrom.secretKeyRef`): the
step in the payload names its value (`sealedValue: "<secret>/<key>"`), and a worker types it
only into pages of the sealed origins.

The sealed text also names the origins (scheme://host:port) the credentials were given for,
inside the encryption: a row that copies the sealed text next to another URL cannot send the
credentials anywhere else, because workers send them only to those origins.

Format: `scrapeq-sealed:v1:<key id>:<base64url(nonce || ciphertext+tag)>`; the prefix up to the
key id is authenticated data. The key id (8 hex digits of a SHA-256 of the key) lets a worker
holding several keys (rotation: newest first) pick the right one. See docs/queue.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED_PREFIX: Final = "scrapeq-sealed:v1:"
KEY_BYTES: Final = 32  # AES-256
# 96-bit random nonces, the size GCM is designed for; a fresh one per sealing.
NONCE_BYTES: Final = 12
# The environment variable holding the key ring: base64 keys, comma-separated, newest first.
SEALING_KEY_ENV: Final = "SCRAPEQ_SEALING_KEY"
# RFC 9110 token characters: what a header or cookie name may consist of.
_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A cookie value (RFC 6265 cookie-octet, plus the space and comma browsers accept inside).
_COOKIE_VALUE: Final = re.compile(r"^[\x20-\x3a\x3c-\x7e]*$")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class SealingError(ValueError):
    """A key ring or a sealed text cannot be used. Messages never contain key or secret bytes."""


def origin_of(url: str) -> str | None:
    """`scheme://host:port` of an http(s) URL (lower-case, explicit port), else None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}:{port or _DEFAULT_PORTS[parts.scheme]}"


@dataclass(frozen=True)
class Credentials:
    """Headers and cookies for requests to `origins` only, and the upstream proxies for every
    request of the page (a job's spec.proxy). repr() never shows the values."""

    origins: tuple[str, ...]
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    cookies: Mapping[str, str] = field(default_factory=dict, repr=False)
    proxies: tuple[str, ...] = field(default=(), repr=False)
    # Values page steps type or fill (a step's `sealedValue` names one): Secret name/key ->
    # value, typed only into pages of `origins`.
    values: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def for_requests(self) -> bool:
        """True when these credentials change requests (headers, cookies, proxies), not only
        what page steps type."""
        return bool(self.headers or self.cookies or self.proxies)

    def applies_to(self, url: str) -> bool:
        """True when `url` is on one of the origins the credentials were given for."""
        return origin_of(url) in self.origins

    def cookie_header(self) -> str:
        """The cookies as one `Cookie` header value."""
        return "; ".join(f"{name}={value}" for name, value in self.cookies.items())


def credential_problems(headers: Mapping[str, str], cookies: Mapping[str, str]) -> list[str]:
    """What makes these headers or cookies unsendable, naming the header or cookie (never its
    value): a name that is not a token, a value with a line break or a control character."""
    problems: list[str] = []
    for name, value in headers.items():
        if not _TOKEN.match(name):
            problems.append(f"header name {name!r} is not a valid HTTP header name")
        if any((ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F for char in value):
            problems.append(
                f"the value of header {name!r} contains a line break or control character"
            )
    for name, value in cookies.items():
        if not _TOKEN.match(name):
            problems.append(f"cookie name {name!r} is not a valid cookie name")
        if not _COOKIE_VALUE.match(value):
            problems.append(
                f"the value of cookie {name!r} has characters a cookie cannot carry "
                "(a semicolon, a line break, a control or non-ASCII character)"
            )
    return problems


def parse_proxy_list(text: str) -> tuple[str, ...]:
    """The upstream proxies of a spec.proxy Secret value: one `http://[user:password@]host:port`
    or `socks5://[user:password@]host:port` per line; blank lines and lines starting with `#`
    are skipped. ValueError names the line and what is wrong, never the line's text (it may
    hold a password)."""
    proxies: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parts = urlsplit(line)
            port = parts.port
        except ValueError:
            port = None
            parts = urlsplit("")
        if parts.scheme not in ("http", "socks5") or not parts.hostname or port is None:
            raise ValueError(
                f"line {number} is not an upstream proxy http://[user:password@]host:port or "
                "socks5://[user:password@]host:port"
            )
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"line {number}: an upstream proxy URL has no path or query")
        if any(ord(char) < 0x21 or ord(char) == 0x7F for char in line):
            raise ValueError(f"line {number} contains a space or control character")
        proxies.append(line)
    if not proxies:
        raise ValueError(
            "it lists no upstream proxy (one http:// or socks5://[user:password@]host:port a line)"
        )
    return tuple(proxies)


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"scrapeq-sealing-key-id:" + key).hexdigest()[:8]


def _authenticated_data(key_id: str) -> bytes:
    return f"{SEALED_PREFIX}{key_id}".encode("ascii")


class SealingKeys:
    """A key ring: seals with the first (newest) key, opens with whichever key sealed."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise SealingError("a sealing key ring needs at least one key")
        for position, key in enumerate(keys, start=1):
            if len(key) != KEY_BYTES:
                raise SealingError(
                    f"sealing key {position} is {len(key)} bytes; it must be {KEY_BYTES} "
                    "(generate one with `openssl rand -base64 32`)"
                )
        self._keys = {_key_id(key): AESGCM(key) for key in keys}
        self._newest = _key_id(keys[0])

    @classmethod
    def from_text(cls, text: str) -> SealingKeys:
        """Read `SCRAPEQ_SEALING_KEY`'s format: base64 keys separated by commas, newest first."""
        keys: list[bytes] = []
        for position, part in enumerate(text.split(","), start=1):
            part = part.strip()
            if not part:
                continue
            try:
                keys.append(base64.b64decode(part + "=" * (-len(part) % 4), altchars=b"-_"))
            except (binascii.Error, ValueError) as error:
                raise SealingError(f"sealing key {position} is not base64") from error
        return cls(keys)

    @classmethod
    def from_environment(cls) -> SealingKeys | None:
        """The key ring in `SCRAPEQ_SEALING_KEY`, or None when it is unset or empty."""
        text = os.environ.get(SEALING_KEY_ENV, "").strip()
        return cls.from_text(text) if text else None

    @staticmethod
    def generate() -> str:
        """A new random key in the ring's text format."""
        return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")

    def seal(self, credentials: Credentials) -> str:
        """The credentials as a sealed text for `payload.sealed`."""
        content: dict[str, object] = {
            "origins": list(credentials.origins),
            "headers": dict(credentials.headers),
            "cookies": dict(credentials.cookies),
        }
        if credentials.proxies:
            content["proxies"] = list(credentials.proxies)
        if credentials.values:
            content["values"] = dict(credentials.values)
        plain = json.dumps(content, separators=(",", ":")).encode("utf-8")
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._keys[self._newest].encrypt(nonce, plain, _authenticated_data(self._newest))
        body = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
        return f"{SEALED_PREFIX}{self._newest}:{body}"

    def open(self, text: str) -> Credentials:
        """The credentials in a sealed text; SealingError when no key of the ring opens it."""
        if not is_sealed_text(text):
            raise SealingError(f"not a sealed text (it must start with {SEALED_PREFIX!r})")
        key_id, _, body = text[len(SEALED_PREFIX) :].partition(":")
        cipher = self._keys.get(key_id)
        if cipher is None:
            raise SealingError(
                f"sealed with key {key_id}, which this process does not hold "
                f"({SEALING_KEY_ENV} has {', '.join(self._keys)})"
            )
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            plain = cipher.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _authenticated_data(key_id)
            )
            data = json.loads(plain)
        except (binascii.Error, ValueError, InvalidTag) as error:
            raise SealingError(f"the sealed text for key {key_id} is damaged") from error
        return Credentials(
            origins=tuple(str(origin) for origin in data.get("origins", ())),
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            cookies={str(k): str(v) for k, v in (data.get("cookies") or {}).items()},
            proxies=tuple(str(proxy) for proxy in data.get("proxies") or ()),
            values={str(k): str(v) for k, v in (data.get("values") or {}).items()},
        )

    def __repr__(self) -> str:
        return f"SealingKeys(ids={list(self._keys)})"


def is_sealed_text(value: object) -> bool:
    """True for a string shaped like a sealed text (the key is needed to know more)."""
    return isinstance(value, str) and value.startswith(SEALED_PREFIX) and value.count(":") == 3


__all__ = [
    "SEALED_PREFIX",
    "SEALING_KEY_ENV",
    "Credentials",
    "SealingError",
    "SealingKeys",
    "credential_problems",
    "is_sealed_text",
    "origin_of",
    "parse_proxy_list",
]
