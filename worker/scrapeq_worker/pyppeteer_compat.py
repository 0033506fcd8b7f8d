"""Repairs to pyppeteer 2.0.0 (unmaintained) that a long-lived, timeout-heavy browser needs.

pyppeteer resolves each CDP reply's future without checking whether the caller already gave up
on it. The worker gives up on purpose — every page operation runs under a timeout — and the
cancelled future then raises `InvalidStateError` inside the connection's reader task when the
late reply (or the tab's detach) arrives. That exception ends the reader task: the browser
connection goes deaf and every later page hangs. Two fixes, applied once at import:

* a tab's session and the browser connection skip already-finished futures when they fail
  the pending ones on close;
* one message that cannot be dispatched is logged and dropped instead of ending the reader.

Closing a browser with pages still open (a drain, a retired browser) left two kinds of noise on
stderr, "Future exception was never retrieved" and "Task exception was never retrieved":

* every reply future is failed with "Target closed" when the connection goes away, including
  futures nobody awaits: `CDPSession.send` forwards each message through a
  `Target.sendMessageToTarget` whose own reply future it drops. Each reply future now marks
  its exception as retrieved when it finishes; a caller that awaits it still gets the error;
* `Page.close` awaits the target's closed-future itself, so cancelling a `page.close()` (it
  runs under a timeout) cancels that future, and the browser's later `targetDestroyed`
  handler raised `InvalidStateError` setting it. Setting it is now skipped once it is done.

And one saving: the DevTools WebSocket is opened without permessage-deflate. The browser is on
the same machine, so compressing each CDP message (dozens per page) only costs CPU on both
ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from pyppeteer import connection as _connection
from pyppeteer import target as _target

logger = logging.getLogger(__name__)

_APPLIED_MARK = "_scrapeq_patched"


def _fail_pending(callbacks: dict[int, asyncio.Future[Any]], describe: Any) -> None:
    for callback in callbacks.values():
        if not callback.done():
            callback.set_exception(
                _connection._rewriteError(
                    callback.error,  # type: ignore[attr-defined]
                    f"Protocol error {callback.method}: Target closed.",  # type: ignore[attr-defined]
                )
            )
    callbacks.clear()


def retrieve_exception(future: asyncio.Future[Any]) -> None:
    """Done-callback: mark a future's exception as seen, so that one nobody awaits any more
    is not logged as "never retrieved" (an awaiting caller still gets it raised)."""
    if not future.cancelled():
        future.exception()


def _quiet_replies(send: Any) -> Any:
    @functools.wraps(send)
    def quiet_send(self: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = send(self, method, params)
        reply.add_done_callback(retrieve_exception)
        return reply

    return quiet_send


def apply() -> None:
    """Patch pyppeteer's Connection, CDPSession and Target (idempotent)."""
    connection_class: Any = _connection.Connection
    session_class: Any = _connection.CDPSession
    target_class: Any = _target.Target
    if getattr(connection_class, _APPLIED_MARK, False):
        return

    def session_on_closed(self: Any) -> None:
        _fail_pending(self._callbacks, None)
        self._connection = None

    original_on_close = connection_class._on_close

    async def connection_on_close(self: Any) -> None:
        _fail_pending(self._callbacks, None)
        await original_on_close(self)

    original_on_message = connection_class._on_message

    async def connection_on_message(self: Any, message: str) -> None:
        try:
            await original_on_message(self, message)
        except asyncio.InvalidStateError:
            pass  # the reply to a request whose caller timed out and stopped waiting
        except Exception:
            logger.exception("dropped a CDP message pyppeteer could not dispatch")

    def target_closed(self: Any) -> None:
        if not self._isClosedPromise.done():
            self._isClosedPromise.set_result(None)

    # Connection.__init__ looks this name up in its module at call time.
    _connection.ws_connect = functools.partial(_connection.ws_connect, compression=None)
    session_class._on_closed = session_on_closed
    connection_class._on_close = connection_on_close
    connection_class._on_message = connection_on_message
    connection_class.send = _quiet_replies(connection_class.send)
    session_class.send = _quiet_replies(session_class.send)
    target_class._closedCallback = target_closed
    setattr(connection_class, _APPLIED_MARK, True)
