"""Webhooks plane (AccountKey, or a Bearer token with webhooks:read / webhooks:write).

- ``GET /api/webhooks``: the registered webhooks (``webhooks``, ``Webhooks`` and ``Count``, as the
  API reference names them), never their secrets.
- ``POST /api/webhooks`` ``{url, events, secret?}``: 201 with the signing secret, shown this once.
- ``DELETE /api/webhooks?id=``: 204; deliveries to it stop at once, attempts in flight are cancelled.
- ``GET /api/webhooks/deliveries?id=<webhook>&state=&limit=``: recent deliveries, newest first.
- ``GET /api/webhooks/dead-letters?id=<webhook>&limit=``: deliveries whose every retry failed.
- ``POST /api/webhooks/replay`` ``{id: <delivery>}``: 202; a dead letter is delivered again, with its
  retries anew.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from assetcdn.control.analytics.params import parse_limit
from assetcdn.control.request_body import read_json
from assetcdn.control.webhooks.deliveries import LIST_DEFAULT, LIST_MAXIMUM, STATES, ReplayRefused
from assetcdn.control.webhooks.registration import check_target, parse_webhook_request
from assetcdn.control.webhooks.service import (
    WEBHOOK_DELIVERIES,
    WEBHOOK_RESOLVER,
    WEBHOOK_SETTINGS,
    WEBHOOK_WORKER,
    WEBHOOKS,
)
from assetcdn.shared.errors import bad_request, conflict, not_found
from assetcdn.shared.middleware import json_response

MAX_ID_LENGTH = 64


async def list_webhooks(request: web.Request) -> web.Response:
    hooks = [hook.to_json() for hook in request.app[WEBHOOKS].all()]
    return json_response({"webhooks": hooks, "Webhooks": hooks, "Count": len(hooks)})


async def register_webhook(request: web.Request) -> web.Response:
    settings = request.app[WEBHOOK_SETTINGS]
    webhook_request, url = parse_webhook_request(await read_json(request),
                                                 allow_loopback=settings.allow_loopback)
    await check_target(url, request.app[WEBHOOK_RESOLVER], allow_loopback=settings.allow_loopback)
    secret, hook = await request.app[WEBHOOKS].create(webhook_request.url, webhook_request.events,
                                                      webhook_request.secret, settings.max_webhooks)
    record = hook.to_json()
    # Both shapes of the API reference: the flat {id, url, events, secret} and the wrapped {HttpCode, Message, Webhook{...}}.
    return json_response({
        "HttpCode": 201, "Message": "Webhook registered. Store the secret securely — it cannot be retrieved again.",
        "id": hook.id, "url": hook.url, "events": list(hook.events), "secret": secret,
        "createdAt": record["createdAt"], "active": True, "Webhook": record,
    }, status=201)


def _id_param(request: web.Request, what: str, *, required: bool) -> str | None:
    value = request.query.get("id")
    if not value:
        if required:
            raise bad_request(f"Missing required query parameter: id ({what}).", target="id", code="MissingId")
        return None
    if len(value) > MAX_ID_LENGTH:
        raise bad_request(f"'id' is at most {MAX_ID_LENGTH} characters.", target="id")
    return value


def _known_webhook(request: web.Request) -> str | None:
    webhook_id = _id_param(request, "the webhook id from GET /api/webhooks", required=False)
    if webhook_id is not None and request.app[WEBHOOKS].get(webhook_id) is None:
        raise not_found(f"Webhook '{webhook_id}' does not exist.", target="id", code="WebhookNotFound")
    return webhook_id


async def delete_webhook(request: web.Request) -> web.Response:
    webhook_id = _id_param(request, "the webhook id from GET /api/webhooks", required=True)
    assert webhook_id is not None
    if not await request.app[WEBHOOKS].delete(webhook_id):
        raise not_found(f"Webhook '{webhook_id}' does not exist.", target="id", code="WebhookNotFound")
    request.app[WEBHOOK_WORKER].forget(webhook_id)
    return web.Response(status=204)


async def _deliveries(request: web.Request, state: str | None) -> list[dict[str, Any]]:
    webhook_id = _known_webhook(request)
    limit = parse_limit(request.query.get("limit"), default=LIST_DEFAULT, maximum=LIST_MAXIMUM)
    return await request.app[WEBHOOK_DELIVERIES].list(webhook_id=webhook_id, state=state, limit=limit)


async def list_deliveries(request: web.Request) -> web.Response:
    state = request.query.get("state") or None
    if state is not None and state not in STATES:
        raise bad_request(f"'state' must be one of {', '.join(STATES)}.", target="state", code="InvalidState")
    deliveries = await _deliveries(request, state)
    return json_response({"deliveries": deliveries, "Deliveries": deliveries, "Count": len(deliveries)})


async def list_dead_letters(request: web.Request) -> web.Response:
    dead = await _deliveries(request, "dead")
    return json_response({"deadLetters": dead, "DeadLetters": dead, "Count": len(dead)})


async def replay_delivery(request: web.Request) -> web.Response:
    body = await read_json(request)
    delivery_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(delivery_id, str) or not delivery_id or len(delivery_id) > MAX_ID_LENGTH:
        raise bad_request('The body must be {"id": "<delivery id>"} (from GET /api/webhooks/dead-letters).',
                          target="id", code="MissingId")
    try:
        record = await request.app[WEBHOOK_DELIVERIES].replay(delivery_id)
    except ReplayRefused as exc:
        raise conflict(f"Delivery '{delivery_id}' is {exc.state}, not a dead letter; only dead letters are "
                       "replayed.", target="id", code="NotDeadLetter") from None
    if record is None:
        raise not_found(f"Delivery '{delivery_id}' does not exist.", target="id", code="DeliveryNotFound")
    request.app[WEBHOOK_WORKER].notify()
    return json_response({"HttpCode": 202, "Message": "The dead letter is queued for delivery again.",
                          "id": delivery_id, "Delivery": record}, status=202)
