"""GET /api/search over HTTP: meaning, typos, the fuzzy fallback, catalog changes, cache, errors, limits."""

from __future__ import annotations

import asyncio
import threading
import zipfile
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.routes.search import parse_limit
from assetcdn.control.search.encoder import WEIGHTS, packaged_model_zip
from assetcdn.control.search.engine import MAX_QUERY_CHARS, MAX_QUERY_TERMS, WAITING_QUERIES
from assetcdn.control.search.service import SEARCH
from tests.support.control import ACCESS, ACCOUNT, MakeControl, forwarded_for
from tests.support.search import add_zone, search, upload

CATALOG = ("autoworld/v1/banners/ferrari-488.jpg", "autoworld/v1/banners/tesla-model-s.jpg",
           "autoworld/v1/banners/school-bus.jpg", "petcare/v1/banners/golden-retriever-puppy.jpg",
           "petcare/v1/logos/logo.svg", "foodhub/v1/banners/margherita-pizza.jpg",
           "foodhub/v1/banners/espresso-cup.jpg")


@pytest.fixture
async def control(make_control: MakeControl) -> TestClient:
    client = await make_control()
    for zone in ("autoworld", "petcare", "foodhub"):
        await add_zone(client, zone)
    await upload(client, *CATALOG)
    return client


def names(answer: dict) -> list[str]:
    return [r["name"] for r in answer["results"]]


async def test_a_description_finds_the_asset_by_meaning(control: TestClient) -> None:
    answer = await search(control, "red sports car")
    assert answer["mode"] == "vector"
    assert answer["query"] == "red sports car" and answer["count"] == len(answer["results"]) >= 1
    top = answer["results"][0]
    assert top == {"name": "ferrari-488.jpg", "path": "autoworld/v1/banners/ferrari-488.jpg",
                   "project": "autoworld", "category": "banners", "format": "jpg",
                   "size": len(b"autoworld/v1/banners/ferrari-488.jpg"), "score": top["score"]}
    assert 0.5 < top["score"] <= 1.0
    assert all(r["score"] > 0.5 for r in answer["results"])
    assert [r["score"] for r in answer["results"]] == sorted((r["score"] for r in answer["results"]), reverse=True)


async def test_synonyms_find_what_the_words_do_not_contain(control: TestClient) -> None:
    assert names(await search(control, "puppy"))[0] == "golden-retriever-puppy.jpg"   # a word of the name
    assert names(await search(control, "dog"))[0] == "golden-retriever-puppy.jpg"     # no shared word
    assert names(await search(control, "coffee"))[0] == "espresso-cup.jpg"


async def test_misspelt_queries_still_find_their_target(control: TestClient) -> None:
    assert names(await search(control, "golden retreiver"))[0] == "golden-retriever-puppy.jpg"
    assert names(await search(control, "ferari"))[0] == "ferrari-488.jpg"
    assert names(await search(control, "margarita piza"))[0] == "margherita-pizza.jpg"


async def test_no_similar_asset_falls_back_to_fuzzy_matching(control: TestClient) -> None:
    answer = await search(control, "qzxv wkjj")
    assert answer == {"results": [], "query": "qzxv wkjj", "count": 0, "mode": "fuzzy"}


async def test_uploads_and_deletes_are_searchable_at_once(control: TestClient) -> None:
    assert "margherita-pizza.jpg" in names(await search(control, "pizza"))
    resp = await control.delete("/api/storage/foodhub/v1/banners/margherita-pizza.jpg", headers=ACCESS)
    assert resp.status == 200
    assert "margherita-pizza.jpg" not in names(await search(control, "pizza"))
    await upload(control, "foodhub/v1/banners/sushi-platter.jpg")
    assert names(await search(control, "japanese food"))[0] == "sushi-platter.jpg"


async def test_a_deleted_zone_leaves_the_results(control: TestClient) -> None:
    assert "golden-retriever-puppy.jpg" in names(await search(control, "puppy"))
    resp = await control.delete("/api/core/zones/petcare", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert all(r["project"] != "petcare" for r in (await search(control, "puppy"))["results"])


async def test_a_repeated_query_is_answered_from_the_cache(control: TestClient) -> None:
    first = await search(control, "Red  sports CAR")
    resp = await control.get("/api/search", params={"q": "red sports car"})
    second = await resp.json()
    assert resp.headers["Cache-Control"] == "public, max-age=60"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"   # public: a page on another origin may read it
    assert second["mode"] == "cached" and second["results"] == first["results"]
    assert second["query"] == "red sports car"
    # A catalog change is seen at once, not after 60 s.
    await upload(control, "autoworld/v1/banners/lamborghini-huracan.jpg")
    third = await search(control, "red sports car")
    assert third["mode"] == "vector" and "lamborghini-huracan.jpg" in names(third)


async def test_a_missing_or_blank_query_is_400_in_the_legacy_envelope(control: TestClient) -> None:
    for params in ({}, {"q": ""}, {"q": "   "}):
        resp = await control.get("/api/search", params=params)
        assert resp.status == 400
        body = await resp.json()
        assert body["error"] == 'Query parameter "q" is required'
        assert body["HttpCode"] == 400 and body["Message"] == body["error"] and body["requestId"]


async def test_a_query_too_long_or_too_wordy_is_400_and_takes_no_slot(make_control: MakeControl) -> None:
    client = await make_control(search_rate_limit_per_minute="2")
    refused = {"x" * (MAX_QUERY_CHARS + 1): "too long", " ".join(["car"] * (MAX_QUERY_TERMS + 1)): "too many words",
               " ": "is required"}
    for _ in range(2):
        for query, words in refused.items():
            resp = await client.get("/api/search", params={"q": query})
            body = await resp.json()
            assert resp.status == 400 and words in body["error"], body
    assert (await client.get("/api/search", params={"q": "x" * MAX_QUERY_CHARS})).status == 200
    resp = await client.get("/api/search", params={"q": " ".join(["car"] * MAX_QUERY_TERMS)})
    assert resp.status == 200 and resp.headers["X-RateLimit-Remaining"] == "0"  # the 400s took no slot


async def test_a_search_backlog_is_answered_503_at_once_and_cached_answers_never_wait(
        control: TestClient) -> None:
    engine = control.app[SEARCH]
    first = await control.get("/api/search", params={"q": "red sports car"})  # cached from now on
    left = int(first.headers["X-RateLimit-Remaining"])
    release = threading.Event()
    # Every search thread held: the queries admitted (as many as run at once plus WAITING_QUERIES) wait.
    blockers = [engine.executor.submit(release.wait) for _ in range(engine.admitted_max - WAITING_QUERIES)]
    try:
        waiting = [asyncio.create_task(control.get("/api/search", params={"q": f"pizza {i}"}))
                   for i in range(engine.admitted_max)]
        for _ in range(500):  # until every one of them is in
            if engine.admitted == engine.admitted_max:
                break
            await asyncio.sleep(0.01)
        assert engine.admitted == engine.admitted_max
        resp = await control.get("/api/search", params={"q": "one too many"})
        body = await resp.json()
        assert resp.status == 503 and body["error"] == "Search is busy; retry in a second.", body
        assert resp.headers["Retry-After"] == "1"
        # Refused for the server's own load: it takes no slot of the client's minute, or a client retrying as
        # told would spend its minute on 503s.
        assert int(resp.headers["X-RateLimit-Remaining"]) == left - engine.admitted_max
        cached = await control.get("/api/search", params={"q": "red sports car"})  # past the backlog
        assert (await cached.json())["mode"] == "cached"
        assert int(cached.headers["X-RateLimit-Remaining"]) == left - engine.admitted_max - 1
    finally:
        release.set()
    for resp in await asyncio.gather(*waiting):
        assert resp.status == 200
    assert all(blocker.done() for blocker in blockers)


async def test_limit_is_clamped_to_1_50(control: TestClient) -> None:
    everything = (await search(control, "banners jpg", limit="50"))["count"]
    assert everything >= 5
    assert (await search(control, "banners jpg", limit="1"))["count"] == 1
    assert (await search(control, "banners jpg", limit="0"))["count"] == 1
    assert (await search(control, "banners jpg", limit="2"))["count"] == 2
    assert (await search(control, "banners jpg", limit="500"))["count"] == everything   # 50 at most
    assert (await search(control, "banners jpg", limit="x"))["count"] == everything     # the default, 20


async def test_requests_beyond_the_per_ip_limit_are_429(make_control: MakeControl) -> None:
    client = await make_control(search_rate_limit_per_minute="3")
    for i in range(3):
        resp = await client.get("/api/search", params={"q": f"logo {i}"})
        assert resp.status == 200
        assert resp.headers["X-RateLimit-Remaining"] == str(2 - i)
        assert "x-ratelimit-remaining" in resp.headers.get("Access-Control-Expose-Headers", "").lower()
    resp = await client.get("/api/search", params={"q": "logo"})
    assert resp.status == 429
    body = await resp.json()
    assert body["error"] == "rate_limit_exceeded" and body["HttpCode"] == 429
    assert "3 searches a minute" in body["Message"]
    assert resp.headers["X-RateLimit-Limit"] == "3" and resp.headers["X-RateLimit-Remaining"] == "0"
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    assert resp.headers["Access-Control-Allow-Origin"] == "*"   # a page on another origin reads the 429 too
    # and when to ask again: none of these is a CORS-safelisted field, so a page reads it only when it is exposed
    exposed = {name.strip().lower() for name in resp.headers.get("Access-Control-Expose-Headers", "").split(",")}
    assert {"retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= exposed
    # Counted per client: another address, forwarded by an edge, has its own window.
    other = await client.get("/api/search", params={"q": "logo"}, headers=forwarded_for("203.0.113.9"))
    assert other.status == 200


async def test_the_model_is_kept_inflated_where_search_model_cache_dir_says(make_control: MakeControl,
                                                                           tmp_path: Path) -> None:
    client = await make_control(search_model_cache_dir=str(tmp_path / "models"))
    await add_zone(client, "autoworld")
    await upload(client, "autoworld/v1/banners/ferrari-488.jpg", "autoworld/v1/banners/school-bus.jpg")
    assert (await search(client, "red sports car"))["mode"] == "vector"
    [kept] = (tmp_path / "models").iterdir()
    assert kept.read_bytes() == zipfile.ZipFile(packaged_model_zip()).read(WEIGHTS)


async def test_without_the_model_search_is_fuzzy_and_still_typo_tolerant(make_control: MakeControl) -> None:
    client = await make_control(search_semantic="false")
    await add_zone(client, "autoworld")
    await upload(client, "autoworld/v1/banners/ferrari-488.jpg", "autoworld/v1/banners/school-bus.jpg")
    answer = await search(client, "ferari")
    assert answer["mode"] == "fuzzy" and names(answer) == ["ferrari-488.jpg"] and answer["results"][0]["score"] == 0.8
    assert (await search(client, "red sports car"))["results"] == []


def test_limit_values_are_clamped_not_refused() -> None:
    assert [parse_limit(v) for v in (None, "", "0", "-3", "1", "20", "50", "51", "500", "x", "2.5")] == \
        [20, 20, 1, 1, 1, 20, 50, 50, 50, 20, 20]


async def test_private_assets_stay_out_of_public_search(control: TestClient) -> None:
    await upload(control, "autoworld/v1/private/red-sports-car-contract.pdf")
    for q in ("red sports car contract", "contract", "private"):
        assert all(r["category"] != "private" for r in (await search(control, q))["results"])


async def test_every_search_error_uses_the_legacy_envelope(control: TestClient) -> None:
    resp = await control.post("/api/search", params={"q": "logo"})
    assert resp.status in (404, 405)                # the method is not served here
    body = await resp.json()
    assert isinstance(body["error"], str) and body["HttpCode"] == resp.status


async def test_a_pages_preflight_is_answered_and_another_method_is_readable(make_control: MakeControl) -> None:
    """Search is public and readable from any origin, at control as through an edge: a page adding a header of its own
    (If-None-Match) asks first with OPTIONS, which was 405 without Access-Control-Allow-Origin, so its fetch()
    failed; it is a 204 preflight, and a POST's 405 is readable too."""
    client = await make_control()
    page = {"Origin": "https://shop.example"}
    resp = await client.options("/api/search", params={"q": "logo"},
                                headers={**page, "Access-Control-Request-Method": "GET",
                                         "Access-Control-Request-Headers": "if-none-match"})
    assert resp.status == 204, await resp.text()
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert {m.strip() for m in resp.headers["Access-Control-Allow-Methods"].split(",")} >= {"GET", "HEAD"}
    assert "if-none-match" in resp.headers["Access-Control-Allow-Headers"].lower()
    resp = await client.post("/api/search", params={"q": "logo"}, headers=page)
    assert resp.status == 405 and resp.headers.get("Access-Control-Allow-Origin") == "*"
    assert {m.strip() for m in resp.headers["Allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}
    assert (await resp.json())["HttpCode"] == 405
    resp = await client.post("/api/tokens", headers=page)  # behind a key: nothing readable
    assert resp.status == 401 and "Access-Control-Allow-Origin" not in resp.headers


async def test_alt_text_once_known_becomes_searchable(make_control: MakeControl) -> None:
    # Files named by number: only an alt text (here from the SVG's title) says what one shows.
    client = await make_control()
    await add_zone(client, "acme")
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><title>A lighthouse on a rocky '
           b'coast at dusk</title><rect width="64" height="64" fill="#234"/></svg>')
    resp = await client.put("/api/storage/clients/acme/v1/images/img-0042.svg", data=svg,
                            headers={**ACCESS, "Content-Type": "image/svg+xml"})
    assert resp.status == 201, await resp.text()
    await upload(client, "acme/v1/images/img-0043.svg", "acme/v1/images/img-0044.svg")

    def score(answer: dict, name: str) -> float:
        return next((r["score"] for r in answer["results"] if r["name"] == name), 0.0)

    before = await search(client, "lighthouse by the sea")
    assert score(before, "img-0042.svg") <= max(score(before, "img-0043.svg"), score(before, "img-0044.svg")), before

    resp = await client.get("/api/ai/alt-text", params={"url": "/acme/v1/images/img-0042.svg"}, headers=ACCESS)
    assert resp.status == 200, await resp.text()
    assert "lighthouse" in (await resp.json())["alt"].lower()
    after = await search(client, "lighthouse by the sea")
    assert after["mode"] == "vector" and names(after)[0] == "img-0042.svg", after
    assert score(after, "img-0042.svg") > max(score(after, "img-0043.svg"), score(after, "img-0044.svg")) + 0.1, after
