"""What a client of /api/ai/* sees: access, the asset field in both forms, refusals, cache and budget."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.ai.service import IMAGE_ANALYSIS
from tests.control.expect import expect_error
from tests.support.control import ACCESS, ACCOUNT, MakeControl
from tests.support.photos import astronaut_jpeg, coffee_jpeg, upload

KINDS = ("alt-text", "moderate", "smart-crop")
ASTRONAUT = "akande/v1/banners/astronaut.jpg"


async def mint(client: TestClient, scopes: list[str]) -> dict[str, str]:
    resp = await client.post("/api/tokens", json={"name": "ai", "scopes": scopes}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    return {"Authorization": f"Bearer {body['Token']['secret']}"}


async def ask(client: TestClient, kind: str, url: Any, headers: dict[str, str] | None = None,
              method: str = "GET") -> Any:
    headers = ACCESS if headers is None else headers
    if method == "POST":
        return await client.post(f"/api/ai/{kind}", json={"url": url}, headers=headers)
    return await client.get(f"/api/ai/{kind}", params={"url": url}, headers=headers)


@pytest.fixture
async def control_with_astronaut(make_control: MakeControl) -> TestClient:
    client = await make_control()
    await upload(client, ASTRONAUT, astronaut_jpeg())
    return client


@pytest.mark.parametrize("kind", KINDS)
async def test_get_and_post_answer_the_same_fields(control_with_astronaut: TestClient, kind: str) -> None:
    fresh = await ask(control_with_astronaut, kind, "/" + ASTRONAUT)
    assert fresh.status == 200, await fresh.text()
    first = await fresh.json()
    assert first["source"] == "ai" and first["url"] == "/" + ASTRONAUT
    assert first["model"] and first["engine"] in ("local", "endpoint", "local+endpoint")
    assert isinstance(first["degraded"], bool) and first["dateGenerated"].endswith("Z")
    posted = await ask(control_with_astronaut, kind, "clients/" + ASTRONAUT, method="POST", headers=ACCOUNT)
    assert posted.status == 200, await posted.text()
    second = await posted.json()
    assert second["source"] == "cached" and second["url"] == "clients/" + ASTRONAUT
    assert {k: v for k, v in second.items() if k not in ("source", "url")} == \
        {k: v for k, v in first.items() if k not in ("source", "url")}


async def test_response_shapes_follow_the_api(control_with_astronaut: TestClient) -> None:
    crop = await (await ask(control_with_astronaut, "smart-crop", ASTRONAUT)).json()
    assert crop["gravity"] in ("center", "north", "south", "east", "west", "northeast", "northwest",
                               "southeast", "southwest", "face")
    assert crop["confidence"] in ("high", "medium", "low")
    assert set(crop["box"]) == {"x", "y", "width", "height"}
    moderation = await (await ask(control_with_astronaut, "moderate", ASTRONAUT)).json()
    assert moderation["verdict"] in ("safe", "borderline", "unsafe")
    assert moderation["safe"] is (moderation["verdict"] == "safe")
    assert set(moderation["categories"]) == {"nudity", "violence", "drugs", "hateSymbols", "gore"}
    assert len(moderation["reasoning"]) <= 240
    alt = await (await ask(control_with_astronaut, "alt-text", ASTRONAUT)).json()
    assert 0 < len(alt["alt"]) <= 160


@pytest.mark.parametrize("kind", [*KINDS, "background-remove"])
async def test_credentials_are_required(control_with_astronaut: TestClient, kind: str) -> None:
    await expect_error(await ask(control_with_astronaut, kind, ASTRONAUT, headers={}), 401, "Unauthorized")
    await expect_error(await ask(control_with_astronaut, kind, ASTRONAUT, headers={"AccessKey": "wrong"}), 401,
                       "Unauthorized")
    other = await mint(control_with_astronaut, ["storage:read", "assets:read"])
    await expect_error(await ask(control_with_astronaut, kind, ASTRONAUT, headers=other), 401, "Unauthorized")


@pytest.mark.parametrize("kind", KINDS)
async def test_an_ai_read_token_is_enough(control_with_astronaut: TestClient, kind: str) -> None:
    token = await mint(control_with_astronaut, ["ai:read"])
    resp = await ask(control_with_astronaut, kind, ASTRONAUT, headers=token, method="POST")
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_background_remove_is_always_501(control_with_astronaut: TestClient, method: str) -> None:
    token = await mint(control_with_astronaut, ["ai:read"])
    for headers in (ACCESS, ACCOUNT, token):
        body = await expect_error(await ask(control_with_astronaut, "background-remove", ASTRONAUT, headers, method),
                                  501, "NotImplemented")
        detail = body["error"]["details"][0]
        assert detail["code"] == "BlockedByDependency" and detail["target"] and detail["message"]


@pytest.mark.parametrize("url, code", [
    ("", "MissingUrl"),
    ("x" * 2049, "UrlTooLong"),
    ("/akande/v1/../secrets.env", "InvalidUrl"),
    ("/akande/v1/banners/%2e%2e/x.jpg", "InvalidUrl"),
    ("/api/transform?url=/akande/v1/banners/astronaut.jpg", "InvalidUrl"),
    ("https://example.com/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
    ("http://169.254.169.254/latest/meta-data/", "AbsoluteUrlForbidden"),
    ("http://10.0.0.8/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
    ("http://[::1]:8788/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
    ("http://127.0.0.1:9/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
    ("http://user:pw@127.0.0.1:8788/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
    ("file:///etc/passwd", "AbsoluteUrlForbidden"),
    ("//example.com/akande/v1/banners/astronaut.jpg", "AbsoluteUrlForbidden"),
])
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_anything_but_an_asset_of_ours_is_400(control_with_astronaut: TestClient, url: str, code: str,
                                                     method: str) -> None:
    body = await expect_error(await ask(control_with_astronaut, "smart-crop", url, method=method), 400, code)
    assert body["error"]["target"] == "url"


async def test_a_missing_or_non_string_url_is_400(control_with_astronaut: TestClient) -> None:
    await expect_error(await control_with_astronaut.get("/api/ai/smart-crop", headers=ACCESS), 400, "MissingUrl")
    resp = await control_with_astronaut.post("/api/ai/smart-crop", json={}, headers=ACCESS)
    await expect_error(resp, 400, "MissingUrl")
    for value in (42, ["/akande/v1/banners/astronaut.jpg"], {"path": "x"}, True):
        resp = await control_with_astronaut.post("/api/ai/smart-crop", json={"url": value}, headers=ACCESS)
        await expect_error(resp, 400, "InvalidUrl")


async def test_bad_post_bodies_are_400(control_with_astronaut: TestClient) -> None:
    for data in (b"{not json", b"", b"[1, 2]", b'"text"'):
        resp = await control_with_astronaut.post("/api/ai/moderate", data=data, headers=ACCESS)
        await expect_error(resp, 400, "InvalidJson")
    resp = await control_with_astronaut.post("/api/ai/moderate", data=b'{"url": "' + b"a" * 20000 + b'"}',
                                             headers=ACCESS)
    await expect_error(resp, 413, "PayloadTooLarge")


async def test_urls_on_our_own_hosts_name_the_asset(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_SERVER_PUBLIC_URL="https://cdn.example.net",
                                ASSETCDN_DOMAINS_BASE_DOMAIN="cdn.example.net")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    resp = await client.post("/api/core/zones/akande/domains", json={"Hostname": "img.akande.example"},
                             headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    for url in ("https://cdn.example.net/akande/v1/banners/astronaut.jpg",
                "https://cdn.example.net:443/akande/v1/banners/astronaut.jpg?v=2#top",
                "http://127.0.0.1:8788/akande/v1/banners/astronaut.jpg",      # the default edge address
                "https://img.akande.example/v1/banners/astronaut.jpg",          # the zone's custom domain
                "https://IMG.akande.example/akande/v1/banners/astronaut.jpg",
                "https://akande.cdn.example.net/v1/banners/astronaut.jpg"):     # <zone>.<base domain>
        resp = await ask(client, "smart-crop", url)
        assert resp.status == 200, (url, await resp.text())
        assert (await resp.json())["gravity"] == "face"
    await expect_error(await ask(client, "smart-crop", "https://cdn.example.net:8443/akande/v1/banners/astronaut.jpg"),
                       400, "AbsoluteUrlForbidden")
    # A tenant host serves its own zone only: another zone's path there does not exist.
    resp = await client.post("/api/core/zones", json={"Name": "other"}, headers=ACCOUNT)
    assert resp.status == 201
    await upload(client, "other/v1/banners/coffee.jpg", coffee_jpeg())
    await expect_error(await ask(client, "smart-crop", "https://img.akande.example/other/v1/banners/coffee.jpg"),
                       404, "AssetNotFound")
    assert (await ask(client, "smart-crop", "https://cdn.example.net/other/v1/banners/coffee.jpg")).status == 200


async def test_unknown_assets_are_404(control_with_astronaut: TestClient) -> None:
    for url in ("/akande/v1/banners/missing.jpg", "/nozone/v1/banners/astronaut.jpg", "stocks/images/none.png"):
        body = await expect_error(await ask(control_with_astronaut, "alt-text", url), 404, "AssetNotFound")
        assert body["error"]["target"] == "url"


async def test_what_is_not_an_image_is_refused_and_costs_no_budget(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_AI_VISION_DAILY_BUDGET="1")
    await upload(client, "akande/v1/banners/notes.json", b'{"not": "an image"}')
    await upload(client, "akande/v1/banners/broken.jpg", astronaut_jpeg()[:200])
    await expect_error(await ask(client, "moderate", "akande/v1/banners/notes.json"), 415, "UnsupportedMediaType")
    await expect_error(await ask(client, "moderate", "akande/v1/banners/broken.jpg"), 422, "UndecodableImage")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    assert (await ask(client, "moderate", ASTRONAUT)).status == 200   # the one analysis of the day


async def test_an_unexpected_failure_costs_no_budget(make_control: MakeControl,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    client = await make_control(ASSETCDN_AI_VISION_DAILY_BUDGET="1")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    analysis = client.app[IMAGE_ANALYSIS]
    real = analysis._smart_crop

    async def broken(*args: Any) -> dict[str, Any]:
        raise RuntimeError("the detector fell over")

    monkeypatch.setattr(analysis, "_smart_crop", broken)
    assert (await ask(client, "smart-crop", ASTRONAUT)).status == 500
    monkeypatch.setattr(analysis, "_smart_crop", real)
    assert (await ask(client, "smart-crop", ASTRONAUT)).status == 200   # the day's one analysis is still there


async def test_images_over_the_pixel_limit_are_422(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_AI_VISION_MAX_SOURCE_PIXELS="100000")
    await upload(client, ASTRONAUT, astronaut_jpeg())   # 512 x 512 = 262,144 pixels
    body = await expect_error(await ask(client, "smart-crop", ASTRONAUT), 422, "ImageTooLarge")
    assert "262,144" in body["error"]["message"]


async def test_a_changed_asset_is_analysed_again(control_with_astronaut: TestClient) -> None:
    first = await (await ask(control_with_astronaut, "smart-crop", ASTRONAUT)).json()
    assert first["gravity"] == "face"
    await upload(control_with_astronaut, ASTRONAUT, coffee_jpeg())   # same path, other bytes
    second = await (await ask(control_with_astronaut, "smart-crop", ASTRONAUT)).json()
    assert second["source"] == "ai" and second["gravity"] != "face" and second["width"] == 600
    third = await (await ask(control_with_astronaut, "smart-crop", ASTRONAUT)).json()
    assert third["source"] == "cached" and third["width"] == 600


async def test_a_spent_daily_budget_is_503_but_cached_answers_still_flow(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_AI_VISION_DAILY_BUDGET="2")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    await upload(client, "akande/v1/banners/coffee.jpg", coffee_jpeg())
    assert (await ask(client, "smart-crop", ASTRONAUT)).status == 200
    assert (await ask(client, "moderate", ASTRONAUT)).status == 200
    resp = await ask(client, "smart-crop", "akande/v1/banners/coffee.jpg")
    await expect_error(resp, 503, "AiUnavailable")
    assert int(resp.headers["Retry-After"]) > 0
    replay = await ask(client, "smart-crop", ASTRONAUT)
    assert replay.status == 200 and (await replay.json())["source"] == "cached"


async def test_a_zero_budget_turns_analysis_off(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_AI_VISION_DAILY_BUDGET="0")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    await expect_error(await ask(client, "alt-text", ASTRONAUT), 503, "AiUnavailable")


async def test_private_assets_are_analysed_for_keys_only(control_with_astronaut: TestClient) -> None:
    path = "akande/v1/private/astronaut.jpg"
    await upload(control_with_astronaut, path, astronaut_jpeg())
    token = await mint(control_with_astronaut, ["ai:read"])
    await expect_error(await ask(control_with_astronaut, "alt-text", path, headers=token), 403, "Forbidden")
    assert (await ask(control_with_astronaut, "alt-text", path, headers=ACCOUNT)).status == 200


async def test_analysis_over_its_time_budget_is_503(make_control: MakeControl) -> None:
    client = await make_control(ASSETCDN_AI_VISION_TIME_BUDGET_S="0.000001")
    await upload(client, ASTRONAUT, astronaut_jpeg())
    await expect_error(await ask(client, "smart-crop", ASTRONAUT), 503, "AnalysisTimedOut")
