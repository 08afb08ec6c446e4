"""The chat request body: ``{"message": "...", "history": [{"role", "content"}, ...]}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HISTORY_TURNS = 5          # the last five turns are used
MAX_TURN_CHARS = 4000      # each turn's content is cut to this (the body itself is capped at 64 KiB)
ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Question:
    message: str
    history: tuple[dict[str, str], ...]


def parse_question(body: Any) -> Question | None:
    """None when there is no usable message (the route answers 400 "Message is required")."""
    if not isinstance(body, dict):
        return None
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    raw = body.get("history")
    turns = [{"role": t["role"], "content": t["content"][:MAX_TURN_CHARS]}
             for t in (raw if isinstance(raw, list) else [])
             if isinstance(t, dict) and t.get("role") in ROLES and isinstance(t.get("content"), str)]
    return Question(message.strip()[:MAX_TURN_CHARS], tuple(turns[-HISTORY_TURNS:]))
