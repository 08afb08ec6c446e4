"""The delivery worker: a background task of the control plane that empties the outbox.

Each round it first releases the held events whose release the database refused (``Outbox.release``), then
fans new events out into deliveries (``WebhookDeliveries.dispatch``), then starts the due
deliveries of every webhook, at most ``concurrency_per_target`` in flight per webhook and
``concurrency_total`` in all, each webhook's due rows fetched apart (a webhook with a long backlog
or a slow receiver holds only its own slots). It sleeps until the next retry is due or it is woken
(new events, a finished attempt, a replay). A failed attempt is retried after
``retry_delays_s[n]``; after the last one the delivery is dead (a dead letter).

The webhook is looked up when an attempt starts and again when it ends: a webhook deleted meanwhile
gets nothing more, and deleting it cancels its attempts in flight (``forget``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from yarl import URL

from assetcdn.control.webhooks.deliveries import DueDelivery, WebhookDeliveries
from assetcdn.control.webhooks.secret_box import SecretUnavailable
from assetcdn.control.webhooks.sender import USER_AGENT, Outcome, Sender, signature
from assetcdn.control.webhooks.settings import WebhookSettings
from assetcdn.control.webhooks.store import WebhookStore

log = logging.getLogger(__name__)

MAX_IDLE_S = 5.0          # the outbox is read at least this often, wake-ups or not
ERROR_BACKOFF_S = 1.0
UNRECORDED_RETRY_S = 5.0  # a delivery whose attempt's outcome could not be recorded is sent again after this
PRUNE_INTERVAL_S = 3600.0


class DeliveryWorker:
    def __init__(self, deliveries: WebhookDeliveries, store: WebhookStore, sender: Sender, settings: WebhookSettings,
                 clock: Callable[[], float] = time.time,
                 release_held: Callable[[], Awaitable[None]] | None = None) -> None:
        self._deliveries = deliveries
        self._release_held = release_held
        self._store = store
        self._sender = sender
        self._settings = settings
        self._clock = clock
        self._wake = asyncio.Event()
        self._inflight: dict[str, dict[str, asyncio.Task[None]]] = {}  # webhook id -> delivery id -> attempt
        # Deliveries whose attempt failed unexpectedly (its outcome could not be recorded: the database refused the
        # write), and when they may start again: they stay pending, and are not sent again at once in a loop.
        self._resting: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._turn = 0

    def notify(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-deliveries")

    async def stop(self) -> None:
        """Stop the loop and the attempts in flight (their rows stay pending: sent again after a restart)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        attempts = [task for running in self._inflight.values() for task in running.values()]
        for task in attempts:
            task.cancel()
        await asyncio.gather(*attempts, return_exceptions=True)
        await self._sender.close()

    def forget(self, webhook_id: str) -> None:
        """A deleted webhook: cancel its attempts in flight."""
        for task in self._inflight.pop(webhook_id, {}).values():
            task.cancel()

    def in_flight(self) -> int:
        return sum(len(running) for running in self._inflight.values())

    async def _run(self) -> None:
        last_prune = 0.0
        while True:
            self._wake.clear()
            try:
                if self._release_held is not None:
                    await self._release_held()
                hooks = self._store.all()
                await self._deliveries.dispatch(hooks)
                if self._clock() - last_prune > PRUNE_INTERVAL_S:
                    last_prune = self._clock()
                    await self._deliveries.drop_orphans([h.id for h in hooks])
                    await self._deliveries.prune(self._settings.retention_days)
                wait = await self._start_due()
            except Exception:
                log.exception("webhook delivery round failed; retrying in %.0f s", ERROR_BACKOFF_S)
                wait = ERROR_BACKOFF_S
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()

    async def _start_due(self) -> float:
        """Start what is due within the bounds; return how long to sleep at most."""
        now = self._clock()
        self._resting = {delivery: until for delivery, until in self._resting.items() if until > now}
        hooks = self._store.all()
        if hooks:  # a different webhook goes first each round, so the global bound is shared fairly
            self._turn = (self._turn + 1) % len(hooks)
            hooks = hooks[self._turn:] + hooks[:self._turn]
        total_free = self._settings.concurrency_total - self.in_flight()
        for hook in hooks:
            if total_free <= 0:
                break
            running = self._inflight.get(hook.id, {})
            free = min(self._settings.concurrency_per_target - len(running), total_free)
            if free <= 0:
                continue
            for due in await self._deliveries.due(hook.id, now, free + len(running) + len(self._resting)):
                if free == 0:
                    break
                if due.id in running or due.id in self._resting:
                    continue
                running = self._inflight.setdefault(hook.id, {})
                running[due.id] = asyncio.create_task(self._attempt(due), name=f"webhook-delivery-{due.id}")
                free -= 1
                total_free -= 1
        next_at = min([at for at in (await self._deliveries.next_due_after(now), *self._resting.values())
                       if at is not None], default=None)
        return MAX_IDLE_S if next_at is None else min(max(next_at - self._clock(), 0.0), MAX_IDLE_S)

    async def _attempt(self, due: DueDelivery) -> None:
        try:
            hook = self._store.get(due.webhook_id)
            if hook is None:
                await self._deliveries.drop(due.id)
                return
            attempt = due.attempts + 1
            try:
                secret = self._store.secret(hook)
            except SecretUnavailable as exc:
                outcome = Outcome(False, None, str(exc))
            else:
                headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
                           "X-Webhook-Signature": signature(secret, due.body), "X-Webhook-Event": due.event,
                           "X-Webhook-Id": due.event_id, "X-Webhook-Delivery": due.id,
                           "X-Webhook-Attempt": str(attempt)}
                outcome = await self._sender.post(hook.url, due.body, headers)
            if self._store.get(due.webhook_id) is None:
                return  # deleted while in flight: its deliveries are gone with it
            now = self._clock()
            if outcome.ok:
                await _to_completion(self._deliveries.delivered(due.id, attempt, outcome.status or 200, now))
                return
            delays = self._settings.retry_delays_s
            retry_at = now + delays[attempt - 1] if attempt <= len(delays) else None
            await _to_completion(self._deliveries.failed(due.id, attempt, outcome.status, outcome.error or "failed",
                                                         retry_at, now))
            if retry_at is None:
                log.warning("webhook %s (host %s): delivery %s of %s is a dead letter after %d attempts: %s",
                            hook.id, URL(hook.url).host, due.id, due.event, attempt, outcome.error)
        except Exception:
            self._resting[due.id] = self._clock() + UNRECORDED_RETRY_S
            log.exception("webhook delivery %s failed unexpectedly; it stays pending (again in %.0f s)", due.id,
                          UNRECORDED_RETRY_S)
        finally:
            running = self._inflight.get(due.webhook_id)
            if running is not None:
                running.pop(due.id, None)
                if not running:
                    del self._inflight[due.webhook_id]
            self._wake.set()


async def _to_completion(recording: Coroutine[Any, Any, None]) -> None:
    """Record an attempt's outcome even when the attempt is cancelled meanwhile (a shutdown): the receiver
    has answered, and a write cut short would be rolled back and the event sent again after a restart."""
    task = asyncio.ensure_future(recording)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
