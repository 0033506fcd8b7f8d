"""Webhook delivery: the one operator-wide loop that posts the outbox's due events.

Each round claims a few due events (SKIP LOCKED with a lease, so two operators never post one
event at once), commits, and only then posts each one, signed with the key read from its
ScrapeJob's Secret at that moment (webhook_signing.py). A 2xx answer delivers the event; any
other answer, a timeout or a missing Secret makes it due again after a growing delay with
jitter (webhook_events.retry_delay), until `webhook_max_age_seconds` after the phase was
reached, when it is given up with a Warning Event (WebhookUndelivered). An endpoint the address
guard refuses (webhook_guard.py) is given up at once, nothing sent, with a Warning Event
(WebhookRefused). Redirects are never followed: a 3xx is a failed attempt. An event's state
lives only in the outbox, so a restarted loop (or another operator) carries on from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import aiohttp
import scrapeq_queue
from scrapeq_queue import Connection, DatabaseUnavailable, WebhookEvent

from scrapeq_operator import metrics
from scrapeq_operator.cluster import ObjectRef
from scrapeq_operator.settings import OperatorSettings
from scrapeq_operator.vocabulary import GROUP, VERSION
from scrapeq_operator.webhook_events import CONTENT_TYPE, event_body, retry_delay
from scrapeq_operator.webhook_guard import (
    PinnedResolver,
    WebhookGuard,
    WebhookRefused,
    WebhookUnreachable,
)
from scrapeq_operator.webhook_signing import SIGNATURE_HEADER, signature_header

if TYPE_CHECKING:
    from scrapeq_operator.runtime import OperatorRuntime

logger = logging.getLogger(__name__)

# Events posted per round, concurrently: a burst of finished ScrapeJobs drains in a few rounds
# without one slow receiver holding up the rest for long.
BATCH_SIZE: Final = 10
# Only the answer's status is read, never its body.
USER_AGENT: Final = "scrapeq-webhooks/1"


class WebhookDelivery:
    """Post due outbox events; `run` is the loop, `deliver_round` one pass."""

    def __init__(self, settings: OperatorSettings, runtime: OperatorRuntime) -> None:
        self.settings = settings
        self.runtime = runtime
        self.guard = WebhookGuard(settings.webhook_allow_networks)
        # Set by the status sync when it recorded events: deliver them now, not at the next poll.
        self.wake = asyncio.Event()

    @property
    def lease_seconds(self) -> float:
        """How long a claimed event is held: the POST's limit plus the Secret read and the
        resolution, with room to spare, so a live attempt never loses its lease."""
        return 2 * self.settings.webhook_timeout_seconds + 30.0

    async def run(self) -> None:
        """Deliver until cancelled; a failing round is logged and counted, never fatal."""
        while True:
            delivered_any = False
            try:
                delivered_any = await self.deliver_round() > 0
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable as error:
                metrics.RECONCILE_ERRORS_TOTAL.labels("webhooks").inc()
                logger.warning("webhooks: database unavailable, delivering later: %s", error)
            except Exception:
                metrics.RECONCILE_ERRORS_TOTAL.labels("webhooks").inc()
                logger.exception("webhooks: delivery round failed")
            if delivered_any:
                continue  # a full batch may have left more due events behind
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.webhook_poll_seconds):
                    await self.wake.wait()
            self.wake.clear()

    async def deliver_round(self) -> int:
        """Claim up to BATCH_SIZE due events and attempt each; return how many were claimed."""
        async with self.runtime.connection() as connection:
            events = await scrapeq_queue.claim_webhook_events(
                connection, limit=BATCH_SIZE, lease_seconds=self.lease_seconds
            )
        # Every attempt runs to its end before the round does (none is left running behind a
        # failed one); the first error, a database gone mid-round say, then fails the round.
        results = await asyncio.gather(
            *(self.attempt(event) for event in events), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return len(events)

    async def attempt(self, event: WebhookEvent) -> None:
        """Post one claimed event and record how the attempt ended."""
        try:
            endpoint = await self.guard.check(event.url)
        except WebhookRefused as refusal:
            await self._refuse(event, str(refusal))
            return
        except WebhookUnreachable as error:
            await self._failed(event, str(error))
            return
        key = await self._signing_key(event)
        if isinstance(key, str):
            await self._failed(event, key)
            return
        body = event_body(event)
        headers = {
            "Content-Type": CONTENT_TYPE,
            "User-Agent": USER_AGENT,
            SIGNATURE_HEADER: signature_header(key, int(time.time()), body),
        }
        timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout_seconds)
        connector = aiohttp.TCPConnector(resolver=PinnedResolver(endpoint), force_close=True)
        try:
            async with (
                aiohttp.ClientSession(
                    connector=connector, timeout=timeout, trust_env=False
                ) as session,
                session.post(
                    event.url, data=body, headers=headers, allow_redirects=False
                ) as response,
            ):
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            await self._failed(event, f"POST failed: {type(error).__name__}: {error}"[:300])
            return
        if 200 <= status < 300:
            await self._finish(
                event, lambda connection: scrapeq_queue.mark_webhook_delivered(connection, event)
            )
            metrics.WEBHOOK_DELIVERIES_TOTAL.labels("delivered").inc()
            logger.info(
                "webhooks: delivered %s of %s/%s (event %s, attempt %d)",
                event.event_type,
                event.owner_namespace,
                event.owner_name,
                event.event_id,
                event.attempt,
            )
            return
        await self._failed(event, f"the endpoint answered HTTP {status}")

    async def _signing_key(self, event: WebhookEvent) -> bytes | str:
        """The signing key, or why it cannot be had (naming the Secret and key, never a
        value)."""
        where = f"Secret {event.owner_namespace}/{event.secret_name}"
        try:
            data = await self.runtime.cluster.read_secret_data(
                event.owner_namespace, event.secret_name
            )
        except Exception as error:
            return f"{where} could not be read: {type(error).__name__}"
        if data is None:
            return f"{where} not found"
        key = data.get(event.secret_key)
        if not key:
            return f"{where} has no key {event.secret_key!r}"
        return key

    async def _finish(
        self, event: WebhookEvent, finish: Callable[[Connection], Awaitable[bool]]
    ) -> None:
        """Record how an attempt ended; an attempt whose lease ran out changes nothing."""
        async with self.runtime.connection() as connection:
            current = await finish(connection)
        if not current:
            logger.warning(
                "webhooks: attempt %d of event %s outlived its lease; a newer attempt owns it",
                event.attempt,
                event.event_id,
            )

    async def _failed(self, event: WebhookEvent, error: str) -> None:
        """A failed attempt: due again after the back-off, or given up past the maximum age."""
        age = (event.claimed_at - event.created_at).total_seconds()
        remaining = self.settings.webhook_max_age_seconds - age
        if remaining <= 0:
            await self._finish(
                event,
                lambda connection: scrapeq_queue.mark_webhook_dead(connection, event, error=error),
            )
            metrics.WEBHOOK_DELIVERIES_TOTAL.labels("dead").inc()
            await self._announce(
                event,
                "WebhookUndelivered",
                f"gave up the {event.event_type} event for {event.url} after {event.attempt} "
                f"attempts in {age:.0f} s: {error}",
            )
            return
        delay = min(
            remaining,
            retry_delay(
                event.attempt,
                base_seconds=self.settings.webhook_retry_base_seconds,
                max_seconds=self.settings.webhook_retry_max_seconds,
            ),
        )
        await self._finish(
            event,
            lambda connection: scrapeq_queue.retry_webhook_event(
                connection, event, delay_seconds=delay, error=error
            ),
        )
        metrics.WEBHOOK_DELIVERIES_TOTAL.labels("retry").inc()
        logger.info(
            "webhooks: attempt %d of the %s event of %s/%s failed (%s); next in %.1f s",
            event.attempt,
            event.event_type,
            event.owner_namespace,
            event.owner_name,
            error,
            delay,
        )

    async def _refuse(self, event: WebhookEvent, reason: str) -> None:
        await self._finish(
            event,
            lambda connection: scrapeq_queue.mark_webhook_dead(
                connection, event, error=f"refused: {reason}"
            ),
        )
        metrics.WEBHOOK_DELIVERIES_TOTAL.labels("refused").inc()
        await self._announce(
            event,
            "WebhookRefused",
            f"the {event.event_type} event was not sent to {event.url}: {reason}",
        )

    async def _announce(self, event: WebhookEvent, reason: str, message: str) -> None:
        logger.warning("webhooks: %s/%s: %s", event.owner_namespace, event.owner_name, message)
        target = ObjectRef(
            f"{GROUP}/{VERSION}",
            "ScrapeJob",
            event.owner_namespace,
            event.owner_name,
            event.owner_uid,
        )
        await self.runtime.cluster.announce(target, type_="Warning", reason=reason, message=message)
