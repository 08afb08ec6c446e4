"""An operator-configured OpenAI-compatible vision endpoint (llama.cpp server, Ollama, vLLM): chat
completions with one image, for alt text and for the moderation categories NudeNet cannot score.

Only the operator chooses this URL ([ai_vision] endpoint_url); a caller's input never becomes a
request target. The image goes inline as a JPEG data URI. Replies are read up to MAX_REPLY_BYTES
within the request's time budget; any failure is an EndpointFailed the caller falls back from.
The API key (endpoint_api_key, best set as ASSETCDN_AI_VISION_ENDPOINT_API_KEY) is never logged.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from assetcdn.control.ai.moderation import CATEGORIES

MAX_REPLY_BYTES = 1024 * 1024
ALT_PROMPT = ("Write alt text for this image: one plain sentence of at most 150 characters that says what it "
              "shows, for someone who cannot see it. Do not start with 'Image of' or 'Picture of'. "
              "Reply with the sentence only. The file is named '{name}'.")
MODERATION_PROMPT = ("Rate this image for content moderation. Reply with only a JSON object with the keys "
                     "nudity, violence, drugs, hateSymbols and gore, each a number from 0 (absent) to 1 "
                     "(certainly present), and reasoning (one short sentence).")
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class EndpointFailed(Exception):
    """The endpoint could not be reached, answered an error, or sent nothing usable."""


@dataclass(frozen=True)
class EndpointSettings:
    url: str           # the chat-completions URL, e.g. http://127.0.0.1:8080/v1/chat/completions
    model: str
    api_key: str
    timeout_s: float


class VisionEndpoint:
    def __init__(self, settings: EndpointSettings) -> None:
        self.settings = settings
        self._session: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        return self.settings.model or "vision-endpoint"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def ask(self, prompt: str, jpeg: bytes, *, max_tokens: int, timeout_s: float) -> str:
        """The endpoint's reply text to `prompt` about the image; EndpointFailed otherwise."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        image = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
        body = {"model": self.settings.model, "max_tokens": max_tokens, "temperature": 0, "stream": False,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": image}}]}]}
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        timeout = aiohttp.ClientTimeout(total=max(min(self.settings.timeout_s, timeout_s), 0.1))
        try:
            async with self._session.post(self.settings.url, data=orjson.dumps(body), headers=headers, timeout=timeout,
                                          allow_redirects=False) as response:
                raw = await response.content.read(MAX_REPLY_BYTES + 1)
                if response.status != 200:
                    raise EndpointFailed(f"the endpoint answered HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise EndpointFailed(f"the endpoint could not be reached ({type(exc).__name__})") from None
        if len(raw) > MAX_REPLY_BYTES:
            raise EndpointFailed("the endpoint's reply is too large")
        return _reply_text(raw)


def _reply_text(raw: bytes) -> str:
    try:
        reply = orjson.loads(raw)
        content: Any = reply["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise EndpointFailed("the endpoint's reply is not a chat completion") from None
    if isinstance(content, list):  # content parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise EndpointFailed("the endpoint sent no text")
    return content.strip()


def clean_alt(text: str, limit: int) -> str:
    """One line of alt text from a model's reply: no quotes around it, no 'Alt text:' label, cut to `limit`."""
    text = " ".join(text.split())
    text = re.sub(r"^(alt(ernative)? text\s*:\s*)", "", text, flags=re.IGNORECASE).strip().strip("\"'“”")
    if len(text) > limit:
        text = text[:limit - 1].rsplit(" ", 1)[0] + "…"
    return text


def moderation_scores(text: str) -> tuple[dict[str, float], str] | None:
    """The five category scores and reasoning from a model's reply; None when it is not that JSON."""
    found = _JSON_OBJECT.search(text)
    if found is None:
        return None
    try:
        data = orjson.loads(found.group(0))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    scores = {}
    for category in CATEGORIES:
        value = data.get(category)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            return None
        scores[category] = round(float(value), 3)
    reasoning = data.get("reasoning")
    return scores, " ".join(reasoning.split())[:200] if isinstance(reasoning, str) else ""
