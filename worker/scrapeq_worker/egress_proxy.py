"""The browser's one way out: an HTTP proxy inside the worker that checks every connection.

Chromium is started with this proxy for everything it sends (`--proxy-server` with
`--proxy-bypass-list=<-loopback>`, and per browser context with `Target.createBrowserContext`'s
`proxyServer`), so no request type can skip the check: tab requests, popups, shared and service
workers, WebSockets (Chromium sends `ws://` as `CONNECT host:port`), speculation prefetch and
prerender all arrive here (measured: docs/worker.md, "Threat model").

Chromium does no DNS for proxied names; the proxy receives host names, resolves each once with
the network guard, checks every address, and connects to one of those same checked addresses.
There is no second lookup between check and connect, so DNS rebinding has no window.

* `CONNECT host:port` (HTTPS, `ws://`, `wss://`, TURN over TCP) opens a checked tunnel.
* An absolute-URI request (`GET http://host/path HTTP/1.1`) is forwarded in origin form with
  `Connection: close`: one request per client connection, so each request is checked.

Each route (listening port) reports its refusals to whoever holds it: the pool gives every
browser context its own route and hands the route to the job using that context, so a refusal
is attributed to the job whose page (or popup, or worker) made the request.

No connection outlives its job or hangs on a silent peer: when either side of a connection ends,
both are closed; a connection with no bytes in either direction for `idle_timeout_seconds`, or
open for `max_connection_seconds`, is cut; and a job letting go of its route (`Route.release`)
or a closed route cuts every connection still open through it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

from scrapeq_queue.sessions import proxy_id

from .errors import BlockedRequest, RetryLater
from .network_guard import IPAddress, NetworkGuard

logger = logging.getLogger(__name__)

UpstreamScheme = Literal["http", "socks5"]
UPSTREAM_SCHEMES: Final = ("http", "socks5")

# The header on the proxy's own refusals: the plain-HTTP engine, which reads them as responses,
# tells them from a site's answer by it.
REFUSAL_HEADER: Final = "X-Scrapeq-Egress-Refused"
# A request head larger than this is refused (Chromium's own limit for headers is 256 KiB).
_MAX_HEAD_BYTES: Final = 256 * 1024
_HEAD_TIMEOUT_SECONDS: Final = 30.0
# No byte in either direction for this long ends a connection (nginx's proxy_read_timeout). A
# page that still wants the connection is one whose job has outlived the default page timeout
# (30 s) by half again.
DEFAULT_IDLE_TIMEOUT_SECONDS: Final = 60.0
# No connection lives longer than the longest job may run (a row's timeoutSeconds is at most
# 600, scrapeq_queue.payload.MAX_TIMEOUT_SECONDS), however steadily its site trickles.
DEFAULT_MAX_CONNECTION_SECONDS: Final = 600.0
# How long a finished connection may take to hand its last buffered bytes to the browser before
# it is cut: a reader that stops reading must not keep the socket.
_FLUSH_SECONDS: Final = 5.0
_CHUNK: Final = 64 * 1024
# Hop-by-hop headers (RFC 9110 7.6.1) and the proxy's own; never forwarded.
_HOP_HEADERS: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
    }
)


@dataclass(frozen=True)
class Refusal:
    """One connection the proxy refused: what was asked for and why."""

    target: str  # the URL of a plain-HTTP request, or host:port of a tunnel
    reason: str  # blocked_address, blocked_scheme, bad_url, dns_error, connect_error, ...
    error: str
    # A failure that may pass later (DNS, connect, upstream proxy), not a guard's refusal.
    retryable: bool = False


@dataclass(frozen=True)
class UpstreamProxy:
    """An HTTP or SOCKS5 proxy the egress proxy chains to (per worker pool or per job). The
    guard still decides: the upstream is asked for a tunnel to the checked address, never to a
    name (an HTTP CONNECT to the address, a SOCKS5 CONNECT with an IPv4 or IPv6 address, never
    a domain name). Its credentials are kept out of every repr, string and log line."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)
    # How the cluster knows this proxy (scrapeq_queue.sessions.proxy_id): a hash of its URL,
    # never its address or credentials; what session records and metric labels show.
    id: str = field(default="", compare=False)
    scheme: UpstreamScheme = "http"
    # SOCKS5's username/password (RFC 1929), each at most 255 bytes; None: no authentication.
    socks_login: tuple[bytes, bytes] | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, text: str) -> UpstreamProxy:
        """`http://[user:password@]host:port` or `socks5://[user:password@]host:port`; errors
        never repeat the credentials."""
        parts = urlsplit(text.strip())
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in UPSTREAM_SCHEMES or not parts.hostname or port is None:
            if parts.scheme not in UPSTREAM_SCHEMES:
                problem = f"its scheme is {parts.scheme or '(none)'!r}, not 'http' or 'socks5'"
            elif not parts.hostname:
                problem = "it names no host"
            else:
                problem = f"its port is missing or not a number 0-65535 (host {parts.hostname!r})"
            raise ValueError(
                f"an upstream proxy is http://[user:password@]host:port or "
                f"socks5://[user:password@]host:port: {problem}"
            )
        scheme: UpstreamScheme = "socks5" if parts.scheme == "socks5" else "http"
        authorization = None
        socks_login = None
        if parts.username is not None:
            user, password = unquote(parts.username), unquote(parts.password or "")
            if scheme == "socks5":
                login = (user.encode(), password.encode())
                if not 1 <= len(login[0]) <= 255 or len(login[1]) > 255:
                    raise ValueError(
                        "an upstream SOCKS5 proxy's user name is 1-255 bytes and its password "
                        "at most 255 bytes (RFC 1929)"
                    )
                socks_login = login
            else:
                pair = f"{user}:{password}"
                authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(parts.hostname, port, authorization, proxy_id(text), scheme, socks_login)

    @property
    def has_credentials(self) -> bool:
        return self.authorization is not None or self.socks_login is not None

    def __str__(self) -> str:
        shown = f"{self.scheme}://{_bracket(self.host)}:{self.port}"
        return shown + (" (with credentials)" if self.has_credentials else "")


class Route:
    """One listening port of the proxy. `holder` receives its refusals (None: logged only)."""

    def __init__(
        self, proxy: EgressProxy, *, refuse_all: bool, upstream: UpstreamProxy | None = None
    ) -> None:
        self.proxy = proxy
        self.refuse_all = refuse_all
        # This route's own upstream (a job's spec.proxy); None: the proxy's (the pool's).
        self.upstream = upstream
        self._holder: Callable[[Refusal], None] | None = None
        # Released by its job and not held by the next one yet: lets nothing out, so a page
        # left running in a warm context cannot reach a site between its owner's jobs.
        self.between_jobs = False
        self.server: asyncio.Server | None = None
        self.port = 0
        # Connections accepted on this route so far, and the ones still open (their tasks).
        self.connections = 0
        self.live: set[asyncio.Task[None]] = set()

    @property
    def holder(self) -> Callable[[Refusal], None] | None:
        """Who receives this route's refusals (the job using its context); None: logged only."""
        return self._holder

    @holder.setter
    def holder(self, holder: Callable[[Refusal], None] | None) -> None:
        self._holder = holder
        if holder is not None:
            self.between_jobs = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def report(self, refusal: Refusal) -> None:
        holder = self.holder
        if holder is not None:
            holder(refusal)
        else:
            logger.info(
                "egress proxy refused %s (%s) with no job holding the route",
                refusal.target,
                refusal.reason,
            )

    async def release(self) -> None:
        """The job holding this route has ended: forget its holder, cut every connection still
        open through the route (both sides), and refuse new ones until the next holder takes
        it, so nothing the job's pages opened or still try outlives the job."""
        self.holder = None
        self.between_jobs = True
        await self.cut()

    async def cut(self) -> None:
        """Cut every connection open through this route now; return once they are closed."""
        tasks = list(self.live)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop listening and cut every connection still open through this route."""
        if self.server is not None:
            self.server.close()
            self.proxy.routes.discard(self)
            self.server = None
        await self.cut()


class EgressProxy:
    """Opens routes; every connection through a route is checked by `guard`."""

    def __init__(
        self,
        guard: NetworkGuard,
        *,
        upstream: UpstreamProxy | None = None,
        connect_timeout_seconds: float = 10.0,
        idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS,
        max_connection_seconds: float = DEFAULT_MAX_CONNECTION_SECONDS,
    ) -> None:
        self.guard = guard
        self.upstream = upstream
        self.connect_timeout_seconds = connect_timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self.max_connection_seconds = max_connection_seconds
        self.routes: set[Route] = set()
        self._connections: set[asyncio.Task[None]] = set()
        self._turns = itertools.count()

    async def open_route(
        self, *, refuse_all: bool = False, upstreams: Sequence[UpstreamProxy] = ()
    ) -> Route:
        """A new listening port on 127.0.0.1. `refuse_all`: a port that lets nothing out (for
        the browser's default context, which no job uses). `upstreams`: a job's own upstream
        proxies instead of the pool's; the route goes through one of them, each in turn."""
        upstream = upstreams[next(self._turns) % len(upstreams)] if upstreams else None
        route = Route(self, refuse_all=refuse_all, upstream=upstream)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._connections.add(task)
                task.add_done_callback(self._connections.discard)
                route.live.add(task)
                task.add_done_callback(route.live.discard)
            route.connections += 1
            finished = False
            try:
                async with asyncio.timeout(self.max_connection_seconds):
                    await self._serve(route, reader, writer)
                finished = True
            except TimeoutError:
                pass
            finally:
                # A cut connection (cancelled, or over its time) is aborted at once; a finished
                # one hands over what it still buffers, within a bound.
                await _end(writer, flush=finished)

        route.server = await asyncio.start_server(
            serve, host="127.0.0.1", port=0, limit=_MAX_HEAD_BYTES
        )
        route.port = route.server.sockets[0].getsockname()[1]
        self.routes.add(route)
        return route

    async def close(self) -> None:
        """Close every route and cut every connection still open."""
        for route in list(self.routes):
            await route.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    # --- one client connection ---------------------------------------------------------------

    async def _serve(
        self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One client connection, from its request head to the end of either side."""
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            return
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
        except ValueError:
            await _answer(writer, 400, "Bad Request", "not an HTTP proxy request")
            return
        tunnel = method.upper() == "CONNECT"
        shown = target[:500]
        origin_form = ""
        try:
            if tunnel:
                host, port = _split_authority(target)
            else:
                host, port, origin_form = _split_absolute(target)
            if route.refuse_all:
                raise BlockedRequest(
                    f"blocked request to {shown}: nothing leaves the browser outside a job's "
                    "browser context",
                    reason="blocked_context",
                )
            if route.between_jobs:
                raise BlockedRequest(
                    f"blocked request to {shown}: nothing leaves a browser context between "
                    "its jobs",
                    reason="blocked_context",
                )
            upstream = await self._connect(host, port, shown, route.upstream or self.upstream)
        except (BlockedRequest, RetryLater) as refusal:
            route.report(
                Refusal(
                    shown,
                    refusal.reason,
                    refusal.message,
                    retryable=isinstance(refusal, RetryLater),
                )
            )
            if isinstance(refusal, RetryLater):
                await _answer(writer, 502, "Bad Gateway", refusal.message, refusal.reason)
            else:
                await _answer(writer, 403, "Forbidden", refusal.message, refusal.reason)
            return
        up_reader, up_writer = upstream
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_forward_head(method, origin_form, version, lines[1:]))
            await _pipe_both(
                reader,
                writer,
                up_reader,
                up_writer,
                idle_seconds=self.idle_timeout_seconds,
                rewrite_response=not tunnel,
            )
        finally:
            # Nothing more goes to the site once either side has ended: no flush to wait for.
            up_writer.transport.abort()

    async def _connect(
        self, host: str, port: int, shown: str, upstream: UpstreamProxy | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve `host` once, check every address, connect to a checked one (through
        `upstream` when there is one)."""
        url = f"http://{_bracket(host)}:{port}/"
        addresses = await self.guard.check_url(url)
        if upstream is not None:
            return await self._through_upstream(upstream, addresses[0], port, shown)
        last: OSError | None = None
        for address in addresses:
            # Connect to the address that was checked, never to the name again.
            try:
                async with asyncio.timeout(self.connect_timeout_seconds):
                    return await asyncio.open_connection(str(address), port, limit=_CHUNK)
            except (OSError, TimeoutError) as error:
                last = error if isinstance(error, OSError) else OSError(str(error) or "timeout")
        raise RetryLater(f"could not connect to {shown}: {last}", reason="connect_error")

    async def _through_upstream(
        self, upstream: UpstreamProxy, address: IPAddress, port: int, shown: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A tunnel through `upstream` to the checked `address` (not the name: the upstream
        must not resolve it again)."""
        if upstream.scheme == "socks5":
            return await self._through_socks5(upstream, address, port, shown)
        target = f"{_bracket(str(address))}:{port}"
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                reader, writer = await asyncio.open_connection(
                    upstream.host, upstream.port, limit=_CHUNK
                )
        except (OSError, TimeoutError) as error:
            raise RetryLater(
                f"could not connect to the upstream proxy {upstream} for {shown}: "
                f"{error or 'timed out'}",
                reason="upstream_proxy_error",
            ) from error
        credentials = (
            f"Proxy-Authorization: {upstream.authorization}\r\n" if upstream.authorization else ""
        )
        try:
            writer.write(
                f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{credentials}\r\n".encode()
            )
            async with asyncio.timeout(self.connect_timeout_seconds):
                head = await reader.readuntil(b"\r\n\r\n")
            status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            status = status_line.split(" ", 2)[1] if status_line.count(" ") else "?"
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            raise RetryLater(
                f"the upstream proxy {upstream} gave no answer to a tunnel for {shown}",
                reason="upstream_proxy_error",
            ) from None
        if status != "200":
            writer.close()
            raise RetryLater(
                f"the upstream proxy {upstream} refused a tunnel for {shown}: {status_line[:200]}",
                reason="upstream_proxy_error",
            )
        return reader, writer

    async def _through_socks5(
        self, upstream: UpstreamProxy, address: IPAddress, port: int, shown: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A SOCKS5 tunnel (RFC 1928) through `upstream` to the checked `address`, given as an
        IP address (ATYP 1 or 4), so the proxy never resolves a name; username/password
        authentication (RFC 1929) when the proxy's URL has credentials."""
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                reader, writer = await asyncio.open_connection(
                    upstream.host, upstream.port, limit=_CHUNK
                )
        except (OSError, TimeoutError) as error:
            raise RetryLater(
                f"could not connect to the upstream proxy {upstream} for {shown}: "
                f"{error or 'timed out'}",
                reason="upstream_proxy_error",
            ) from error
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                await _socks5_handshake(reader, writer, upstream, address, port)
        except _Socks5Refused as refused:
            writer.close()
            raise RetryLater(
                f"the upstream proxy {upstream} refused a tunnel for {shown}: {refused}",
                reason="upstream_proxy_error",
            ) from None
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            writer.close()
            raise RetryLater(
                f"the upstream proxy {upstream} gave no answer to a tunnel for {shown}",
                reason="upstream_proxy_error",
            ) from None
        return reader, writer


class _Socks5Refused(Exception):
    """The SOCKS5 proxy answered, and said no (its words, never the credentials)."""


# RFC 1928's replies, by code: what the proxy says went wrong.
_SOCKS5_REPLIES: Final = {
    1: "general failure",
    2: "connection not allowed by its rules",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


async def _socks5_handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: UpstreamProxy,
    address: IPAddress,
    port: int,
) -> None:
    """Greet, authenticate if asked, and CONNECT to `address`:`port`; return once the tunnel
    is open. Raises _Socks5Refused for an answer that is not a yes."""
    methods = b"\x00\x02" if upstream.socks_login is not None else b"\x00"
    writer.write(b"\x05" + bytes([len(methods)]) + methods)
    version, method = await reader.readexactly(2)
    if version != 5:
        raise _Socks5Refused("it does not speak SOCKS5")
    if method == 0x02 and upstream.socks_login is not None:
        user, password = upstream.socks_login
        writer.write(b"\x01" + bytes([len(user)]) + user + bytes([len(password)]) + password)
        _, status = await reader.readexactly(2)
        if status != 0:
            raise _Socks5Refused("its login was refused")
    elif method != 0x00:
        raise _Socks5Refused(
            "it wants a login that this URL does not give"
            if method == 0x02
            else "it accepts none of the authentication methods offered"
        )
    target = (b"\x01" if address.version == 4 else b"\x04") + address.packed
    writer.write(b"\x05\x01\x00" + target + port.to_bytes(2, "big"))
    _, reply, _, address_type = await reader.readexactly(4)
    # The bound address the reply carries: skipped, its length by its type.
    if address_type == 1:
        await reader.readexactly(4 + 2)
    elif address_type == 4:
        await reader.readexactly(16 + 2)
    elif address_type == 3:
        (length,) = await reader.readexactly(1)
        await reader.readexactly(length + 2)
    else:
        raise _Socks5Refused(f"its reply has an unknown address type {address_type}")
    if reply != 0:
        raise _Socks5Refused(_SOCKS5_REPLIES.get(reply, f"reply {reply}"))


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _split_authority(authority: str) -> tuple[str, int]:
    """host and port of a CONNECT target (`example.com:443`, `[::1]:8080`)."""
    parts = urlsplit(f"//{authority}")
    try:
        port = parts.port
    except ValueError as error:
        raise BlockedRequest(
            f"blocked tunnel to {authority!r}: {error}", reason="bad_url"
        ) from error
    if not parts.hostname or port is None:
        raise BlockedRequest(f"blocked tunnel to {authority!r}: no host:port", reason="bad_url")
    return parts.hostname, port


def _split_absolute(target: str) -> tuple[str, int, str]:
    """host, port and origin-form (path?query) of an absolute-URI proxy request."""
    parts = urlsplit(target)
    if parts.scheme.lower() != "http":
        raise BlockedRequest(
            f"blocked request to {target[:200]}: only http:// is forwarded in the clear "
            "(https goes through CONNECT)",
            reason="blocked_scheme",
        )
    try:
        port = parts.port or 80
    except ValueError as error:
        raise BlockedRequest(
            f"blocked request to {target[:200]}: {error}", reason="bad_url"
        ) from error
    if not parts.hostname:
        raise BlockedRequest(f"blocked request to {target[:200]}: no host", reason="bad_url")
    origin_form = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, origin_form


def _forward_head(method: str, origin_form: str, version: str, header_lines: list[bytes]) -> bytes:
    kept = [
        line
        for line in header_lines
        if line and line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]
    return (
        f"{method} {origin_form} {version}\r\n".encode("latin-1")
        + b"".join(line + b"\r\n" for line in kept)
        + b"Connection: close\r\n\r\n"
    )


def _close_response_head(head: bytes) -> bytes:
    """The response head with its connection headers replaced by `Connection: close`, so the
    browser never sends a second request (to be checked anew) on this connection."""
    lines = head.split(b"\r\n")
    kept = [
        line
        for line in lines[1:]
        if line and line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]
    return (
        lines[0]
        + b"\r\n"
        + b"".join(line + b"\r\n" for line in kept)
        + (b"Connection: close\r\nProxy-Connection: close\r\n\r\n")
    )


class _Activity:
    """Whether bytes still move through one connection: `idle` returns once none has moved,
    either way, for `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._deadline: asyncio.Timeout | None = None

    def touch(self) -> None:
        if self._deadline is not None:
            self._deadline.reschedule(asyncio.get_running_loop().time() + self.seconds)

    async def idle(self) -> None:
        try:
            async with asyncio.timeout(self.seconds) as deadline:
                self._deadline = deadline
                await asyncio.get_running_loop().create_future()  # only the deadline ends this
        except TimeoutError:
            return


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    idle_seconds: float,
    rewrite_response: bool = False,
) -> None:
    """Copy both ways until either side ends (end of stream or an error) or no byte has moved
    for `idle_seconds`; the caller then closes both. Bytes already read from the site are
    written to the browser's side first."""
    activity = _Activity(idle_seconds)
    copies = {
        asyncio.create_task(_copy(reader, up_writer, activity)),
        asyncio.create_task(_copy(up_reader, writer, activity, rewrite_head=rewrite_response)),
        asyncio.create_task(activity.idle()),
    }
    try:
        await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in copies:
            task.cancel()
        await asyncio.gather(*copies, return_exceptions=True)


async def _copy(
    source: asyncio.StreamReader,
    sink: asyncio.StreamWriter,
    activity: _Activity,
    *,
    rewrite_head: bool = False,
) -> None:
    """Copy `source` to `sink` until `source` ends or either fails. `rewrite_head`: the first
    thing read is a response head, passed on with `Connection: close` (_close_response_head)."""
    try:
        await sink.drain()
        if rewrite_head:
            head = await source.readuntil(b"\r\n\r\n")
            activity.touch()
            sink.write(_close_response_head(head))
            await sink.drain()
        while data := await source.read(_CHUNK):
            activity.touch()
            sink.write(data)
            await sink.drain()
            activity.touch()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return


async def _end(writer: asyncio.StreamWriter, *, flush: bool) -> None:
    """Close one side: with `flush`, after its buffered bytes are sent (at most _FLUSH_SECONDS);
    otherwise at once."""
    if flush:
        writer.close()
        try:
            async with asyncio.timeout(_FLUSH_SECONDS):
                await writer.wait_closed()
            return
        except (OSError, TimeoutError):
            pass
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
    writer.transport.abort()


async def _answer(
    writer: asyncio.StreamWriter, status: int, phrase: str, message: str, reason: str = "bad_url"
) -> None:
    body = message.encode("utf-8", "replace")[:2000]
    writer.write(
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"{REFUSAL_HEADER}: {reason}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


__all__ = [
    "DEFAULT_IDLE_TIMEOUT_SECONDS",
    "DEFAULT_MAX_CONNECTION_SECONDS",
    "REFUSAL_HEADER",
    "EgressProxy",
    "Refusal",
    "Route",
    "UpstreamProxy",
]
