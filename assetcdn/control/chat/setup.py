"""Building the chat pieces of the control plane from its configuration (wired by assetcdn.control.app)."""

from __future__ import annotations

import aiohttp

from assetcdn.control.chat.concierge import Concierge
from assetcdn.control.chat.documentation import documentation_passages
from assetcdn.control.chat.generation import ChatModel, ChatModelConfig
from assetcdn.control.chat.quota import ChatQuota
from assetcdn.control.chat.retrieval import ChatRetriever
from assetcdn.control.search.engine import SearchEngine
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Counters


def open_chat(settings: Settings, counters: Counters,
              search: SearchEngine) -> tuple[ChatQuota, Concierge, aiohttp.ClientSession]:
    ai = settings.section("ai")
    session = aiohttp.ClientSession(auto_decompress=True)
    model = None
    if ai["chat_url"]:
        model = ChatModel(ChatModelConfig(ai["chat_url"], ai["chat_model"], ai["chat_api_key"],
                                          float(ai["chat_timeout_s"]), int(ai["chat_max_tokens"])), session)
    quota = ChatQuota(counters, int(ai["chat_monthly_limit"]), int(ai["chat_daily_soft_limit"]))
    return quota, Concierge(ChatRetriever(documentation_passages(), search), model), session
