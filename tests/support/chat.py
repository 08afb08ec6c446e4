"""Reading the chat's answers: its server-sent events, and the text of the answer they stream."""

from __future__ import annotations

from typing import Any

import orjson


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        frames.append((lines["event"], orjson.loads(lines["data"])))
    return frames


def answer_text(frames: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(data["text"] for event, data in frames if event == "token")
