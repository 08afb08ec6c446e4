"""POST /api/chat: the concierge's answer as Server-Sent Events (public).

400 ``Invalid JSON body`` / ``Message is required``, 413 and 429 ``limit_reached`` use the legacy envelope.
Besides the month's model-answered questions (assetcdn/control/chat/quota.py), one client IP may ask
``[ai] chat_rate_limit_per_minute`` valid questions a minute.
"""

from __future__ import annotations

import contextlib
import logging

import orjson
from aiohttp import web

from assetcdn.control.chat.conversation import parse_question
from assetcdn.control.chat.service import CHAT, CHAT_LIMITER, CHAT_QUOTA
from assetcdn.control.chat.sse import HEADERS, frame
from assetcdn.control.identity.rate_limit import Decision, client_key, rate_headers
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.request_body import read_body
from assetcdn.shared.errors import LegacyError

log = logging.getLogger(__name__)

MONTHLY_LIMIT_MESSAGE = "Monthly query limit reached. The Concierge will be back next month."


async def chat(request: web.Request) -> web.StreamResponse:
    # The question is read and checked first: a refused request takes no slot of the client's minute.
    raw = await read_body(request)  # 413 in the legacy envelope (assetcdn/shared/request_body.py)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise LegacyError(400, "Invalid JSON body") from None
    question = parse_question(body)
    if question is None:
        raise LegacyError(400, "Message is required")
    decision = await request.app[CHAT_LIMITER].take(f"chat:{client_key(request_ip(request))}")
    if not decision.allowed:
        raise LegacyError(429, "rate_limit_exceeded",
                          f"Rate limit exceeded: at most {decision.limit} chat questions a minute per client. "
                          f"Retry in {decision.retry_after_s()} s.", headers=rate_headers(decision))
    allowance = await request.app[CHAT_QUOTA].take(with_model=request.app[CHAT].model is not None)
    if isinstance(allowance, Decision):
        # Refused for the month: the client's minute gives its slot back (a refused request is not counted), and
        # the 429 says when the month ends.
        await request.app[CHAT_LIMITER].give_back(decision)
        raise LegacyError(429, "limit_reached", MONTHLY_LIMIT_MESSAGE, extra={"message": MONTHLY_LIMIT_MESSAGE},
                          headers=allowance.refusal_headers())
    answered = False
    try:
        response = web.StreamResponse(headers=HEADERS)
        await response.prepare(request)
        async with contextlib.aclosing(request.app[CHAT].answer(question, allowance)) as frames:
            try:
                async for data in frames:
                    if request.transport is None or request.transport.is_closing():
                        log.info("chat client went away; answer stopped")
                        return response
                    await response.write(data)
                    answered = answered or data.startswith(b"event: done\n")
            except ConnectionResetError:
                log.info("chat client went away; answer stopped")
                return response
            except Exception:  # the headers are sent: the failure can only be a frame now
                log.exception("chat failed")
                with contextlib.suppress(ConnectionResetError):
                    await response.write(frame("error", {"error": "Internal error. Please ask again."}))
        await response.write_eof()
        return response
    finally:
        # Not answered by the model (an error frame, a client gone before the end, or the extractive
        # answer when the model could not start): the question is not counted.
        if not answered or not allowance.use_model:
            await request.app[CHAT_QUOTA].refund(allowance)
