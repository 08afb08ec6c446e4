"""Building the chat pieces of the control plane from its configuration (wired by control.app)."""

from __future__ import annotations

import aiohttp
import aiosqlite

from control.chat.concierge import Concierge
from control.chat.documentation import documentation_passages
from control.chat.generation import ChatModel, ChatModelConfig
from control.chat.quota import ChatQuota
from control.chat.retrieval import ChatRetriever
from control.search.engine import SearchEngine
from shared.config import Settings


def open_chat(settings: Settings, db: aiosqlite.Connection,
              search: SearchEngine) -> tuple[ChatQuota, Concierge, aiohttp.ClientSession]:
    ai = settings.section("ai")
    session = aiohttp.ClientSession(auto_decompress=True)
    model = None
    if ai["chat_url"]:
        model = ChatModel(ChatModelConfig(ai["chat_url"], ai["chat_model"], ai["chat_api_key"],
                                          float(ai["chat_timeout_s"]), int(ai["chat_max_tokens"])), session)
    quota = ChatQuota(db, int(ai["chat_monthly_limit"]), int(ai["chat_daily_soft_limit"]))
    return quota, Concierge(ChatRetriever(documentation_passages(), search), model), session
