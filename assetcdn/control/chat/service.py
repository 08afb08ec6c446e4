"""Chat on the control app: the concierge built from the configuration, its daily quota and per-client
limit; the context that starts and stops it (its documentation vectors load in the background)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from assetcdn.control.app_keys import COUNTERS, SETTINGS
from assetcdn.control.chat.concierge import Concierge
from assetcdn.control.chat.documentation import documentation_passages
from assetcdn.control.chat.generation import ChatModel, ChatModelConfig
from assetcdn.control.chat.quota import ChatQuota
from assetcdn.control.chat.retrieval import ChatRetriever
from assetcdn.control.identity.rate_limit import RateLimiter
from assetcdn.control.search.engine import SearchEngine
from assetcdn.control.search.service import SEARCH
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Counters

CHAT = web.AppKey("chat", Concierge)
CHAT_QUOTA = web.AppKey("chat_quota", ChatQuota)
CHAT_LIMITER = web.AppKey("chat_limiter", RateLimiter)      # POST /api/chat, per client


@contextlib.asynccontextmanager
async def chat_context(app: web.Application) -> AsyncIterator[None]:
    app[CHAT_QUOTA], app[CHAT], session = open_chat(app[SETTINGS], app[COUNTERS], app[SEARCH])
    try:
        app[CHAT].retriever.start()  # the documentation vectors, in the background (health says when ready)
        try:
            yield
        finally:
            await app[CHAT].retriever.close()
    finally:
        await session.close()

def open_chat(settings: Settings, counters: Counters,
              search: SearchEngine) -> tuple[ChatQuota, Concierge, aiohttp.ClientSession]:
    ai = settings.section("ai")
    session = aiohttp.ClientSession(auto_decompress=True)
    model = None
    if ai["chat_url"]:
        model = ChatModel(ChatModelConfig(ai["chat_url"], ai["chat_model"], ai["chat_api_key"],
                                          float(ai["chat_timeout_s"]), int(ai["chat_max_tokens"])), session)
    quota = ChatQuota(counters, int(ai["chat_monthly_limit"]), int(ai["chat_daily_soft_limit"]))
    return quota, Concierge(ChatRetriever(documentation_passages, search), model), session
