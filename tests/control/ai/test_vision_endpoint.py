"""A configured OpenAI-compatible vision endpoint, played by a tiny fake server on loopback."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from assetcdn.control.ai.vision_endpoint import clean_alt, moderation_scores
from tests.support.control import ACCESS, MakeControl
from tests.support.photos import astronaut_jpeg, upload

ASTRONAUT = "akande/v1/banners/astronaut.jpg"
Reply = Callable[[dict[str, Any]], Awaitable[web.StreamResponse]]


class FakeVisionModel:
    """Answers chat completions with whatever `reply` builds, and keeps what it was sent."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        return await self.reply(body)


def completion(text: str) -> Reply:
    async def reply(body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                               "finish_reason": "stop"}]})
    return reply


@pytest.fixture
async def fake_model(aiohttp_server) -> Callable[[Reply], Awaitable[tuple[FakeVisionModel, str]]]:  # type: ignore[no-untyped-def]
    async def start(reply: Reply) -> tuple[FakeVisionModel, str]:
        model = FakeVisionModel(reply)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", model.handle)
        server: TestServer = await aiohttp_server(app, host="127.0.0.1")
        return model, str(server.make_url("/v1/chat/completions"))
    return start


async def control_using(make_control: MakeControl, url: str, **extra: str):  # type: ignore[no-untyped-def]
    client = await make_control(ASSETCDN_AI_VISION_ENDPOINT_URL=url, ASSETCDN_AI_VISION_ENDPOINT_MODEL="llava-test",
                                ASSETCDN_AI_VISION_ENDPOINT_API_KEY="sk-test-secret", **extra)
    await upload(client, ASTRONAUT, astronaut_jpeg())
    return client


async def test_the_endpoint_writes_the_alt_text(make_control: MakeControl, fake_model) -> None:  # type: ignore[no-untyped-def]
    model, url = await fake_model(completion('"An astronaut in a white suit smiles beside a US flag."'))
    client = await control_using(make_control, url)
    resp = await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["alt"] == "An astronaut in a white suit smiles beside a US flag."
    assert (body["engine"], body["model"], body["degraded"]) == ("endpoint", "llava-test", False)
    headers, sent = model.requests[0]
    assert headers["Authorization"] == "Bearer sk-test-secret" and sent["model"] == "llava-test"
    parts = sent["messages"][0]["content"]
    image = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    assert image.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(image.split(",", 1)[1])[:3] == b"\xff\xd8\xff"
    assert "astronaut.jpg" in next(p["text"] for p in parts if p["type"] == "text")


async def test_a_failing_endpoint_falls_back_to_the_local_sentence(make_control: MakeControl, fake_model) -> None:  # type: ignore[no-untyped-def]
    async def broken(body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"error": "model not loaded"}, status=500)
    _, url = await fake_model(broken)
    client = await control_using(make_control, url)
    body = await (await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert body["engine"] == "local" and body["degraded"] is True and "one person" in body["alt"]
    assert "HTTP 500" in body["note"]


async def test_an_unreachable_endpoint_falls_back_too(make_control: MakeControl, unused_tcp_port: int) -> None:
    client = await control_using(make_control, f"http://127.0.0.1:{unused_tcp_port}/v1/chat/completions")
    body = await (await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert body["engine"] == "local" and body["degraded"] is True


async def test_the_endpoint_scores_the_categories_nudenet_cannot(make_control: MakeControl, fake_model) -> None:  # type: ignore[no-untyped-def]
    scores = {"nudity": 0.0, "violence": 0.05, "drugs": 0.0, "hateSymbols": 0.0, "gore": 0.62,
              "reasoning": "Fake blood on the suit."}
    _, url = await fake_model(completion("```json\n" + orjson.dumps(scores).decode() + "\n```"))
    client = await control_using(make_control, url)
    body = await (await client.post("/api/ai/moderate", json={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert body["categories"] == {"nudity": 0.0, "violence": 0.05, "drugs": 0.0, "hateSymbols": 0.0, "gore": 0.62}
    assert (body["verdict"], body["safe"], body["degraded"]) == ("unsafe", False, False)
    assert body["engine"] == "local+endpoint" and body["model"] == "nudenet-3.4.2/320n+llava-test"
    assert "Fake blood" in body["reasoning"]


async def test_an_unparseable_verdict_is_borderline(make_control: MakeControl, fake_model) -> None:  # type: ignore[no-untyped-def]
    _, url = await fake_model(completion("I think this picture is fine, probably."))
    client = await control_using(make_control, url)
    body = await (await client.get("/api/ai/moderate", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert (body["verdict"], body["safe"], body["degraded"]) == ("borderline", False, True)
    assert body["categories"]["gore"] is None and body["categories"]["nudity"] is not None


def test_replies_are_cleaned_and_checked() -> None:
    assert clean_alt("Alt text: 'A red car.'", 160) == "A red car."
    assert len(clean_alt("word " * 100, 160)) <= 160
    assert moderation_scores('{"nudity": 2, "violence": 0, "drugs": 0, "hateSymbols": 0, "gore": 0}') is None
    assert moderation_scores('{"nudity": 0.1}') is None
    assert moderation_scores("no json") is None


async def test_a_fallback_answer_is_not_kept_once_the_endpoint_is_back(make_control: MakeControl, fake_model) -> None:  # type: ignore[no-untyped-def]
    answers = ["", "A smiling astronaut."]

    async def flaky(body: dict[str, Any]) -> web.StreamResponse:
        return await completion(answers.pop(0))(body)
    _, url = await fake_model(flaky)
    client = await control_using(make_control, url)
    first = await (await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert first["engine"] == "local" and first["degraded"] is True and "sent no text" in first["note"]
    second = await (await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert (second["alt"], second["engine"], second["source"]) == ("A smiling astronaut.", "endpoint", "ai")
    third = await (await client.get("/api/ai/alt-text", params={"url": ASTRONAUT}, headers=ACCESS)).json()
    assert (third["alt"], third["source"]) == ("A smiling astronaut.", "cached")
