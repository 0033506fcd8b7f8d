"""A real HTTP receiver for webhook tests: it verifies every request's signature with the
documented check (scrapeq_operator.webhook_signing.verify) and answers with the statuses a test
scripts (500 for a while, then 204)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from scrapeq_operator.webhook_signing import SIGNATURE_HEADER, InvalidSignature, verify


@dataclass
class Delivery:
    """One request the receiver got."""

    event: dict[str, Any]
    content_type: str
    signature_valid: bool
    answered: int


@dataclass
class WebhookReceiver:
    key: bytes
    # Statuses to answer, in order; once used up, every request gets `then`.
    answers: list[int] = field(default_factory=list)
    then: int = 204
    deliveries: list[Delivery] = field(default_factory=list)
    url: str = ""

    @property
    def accepted(self) -> list[Delivery]:
        return [d for d in self.deliveries if 200 <= d.answered < 300]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify(self.key, request.headers.get(SIGNATURE_HEADER, ""), body, now=time.time())
            valid = True
        except InvalidSignature:
            valid = False
        status = self.answers.pop(0) if self.answers else self.then
        if not valid:
            status = 401
        self.deliveries.append(
            Delivery(json.loads(body), request.headers.get("Content-Type", ""), valid, status)
        )
        return web.Response(status=status)


@asynccontextmanager
async def webhook_receiver(
    key: bytes, answers: list[int] | None = None
) -> AsyncIterator[WebhookReceiver]:
    """A receiver listening on 127.0.0.1 (a free port) until the block ends."""
    receiver = WebhookReceiver(key, list(answers or []))
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()
