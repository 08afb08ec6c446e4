"""Webhooks on the control app: its typed state and the cleanup context that starts and stops the worker.

At start, under the commit lock, the outbox catches up with commits a killed process left without
events; then the worker runs until shutdown, when it cancels its attempts in flight (they stay
pending and are sent after the next start) and closes its HTTP sessions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.app_keys import SECRETS, SETTINGS
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.service import DB
from assetcdn.control.webhooks import deliveries as delivery_table
from assetcdn.control.webhooks import store as webhook_table
from assetcdn.control.webhooks.deliveries import WebhookDeliveries
from assetcdn.control.webhooks.secret_box import SecretBox
from assetcdn.control.webhooks.sender import Sender
from assetcdn.control.webhooks.settings import WebhookSettings
from assetcdn.control.webhooks.store import WebhookStore
from assetcdn.control.webhooks.worker import DeliveryWorker
from assetcdn.shared.address_guard import HostResolver, SystemResolver

WEBHOOKS = web.AppKey("webhooks", WebhookStore)
WEBHOOK_DELIVERIES = web.AppKey("webhook_deliveries", WebhookDeliveries)
WEBHOOK_WORKER = web.AppKey("webhook_worker", DeliveryWorker)
WEBHOOK_SETTINGS = web.AppKey("webhook_settings", WebhookSettings)
# Where target names are resolved; a test sets its own before the app starts (never real DNS in tests).
WEBHOOK_RESOLVER = web.AppKey("webhook_resolver", HostResolver)


@contextlib.asynccontextmanager
async def webhooks_context(app: web.Application) -> AsyncIterator[None]:
    settings = WebhookSettings.from_settings(app[SETTINGS])
    key = app[SECRETS].webhook_secret_key
    await app[DB].script(webhook_table.SCHEMA + delivery_table.SCHEMA)
    store = WebhookStore(app[DB], SecretBox(key) if key else None)
    await store.load()
    resolver = app.get(WEBHOOK_RESOLVER) or SystemResolver()
    deliveries = WebhookDeliveries(app[DB])
    publisher = app[PUBLISHER]
    worker = DeliveryWorker(deliveries, store, Sender(resolver, allow_loopback=settings.allow_loopback,
                                                      timeout_s=settings.timeout_s), settings,
                            release_held=publisher.outbox.release_unreleased)
    app[WEBHOOKS], app[WEBHOOK_DELIVERIES], app[WEBHOOK_WORKER] = store, deliveries, worker
    app[WEBHOOK_SETTINGS], app[WEBHOOK_RESOLVER] = settings, resolver
    publisher.outbox.on_ready(worker.notify)
    await publisher.catch_up_outbox()
    worker.start()
    try:
        yield
    finally:
        await worker.stop()
