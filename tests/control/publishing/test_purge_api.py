"""POST /api/purge on control: auth, the daily quota (429 with Retry-After), what a purge reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.routes.purge import MAX_ITEMS
from assetcdn.shared.config import load_settings
from assetcdn.shared.openapi import document
from assetcdn.shared.purge_targets import MAX_ITEM_LENGTH
from tests.support.control import ACCOUNT, SECRETS

PURGE = {"x-api-key": SECRETS.purge_key}


@pytest.fixture
async def control_two_purges(aiohttp_client, tmp_path: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={"ASSETCDN_PURGE_DAILY_LIMIT": "2"})
    return await aiohttp_client(create_app(settings, SECRETS, tmp_path / "data"))


async def test_the_daily_quota_counts_accepted_purges_only(control_two_purges: TestClient) -> None:
    control = control_two_purges
    resp = await control.post("/api/purge", json={"tags": ["bad tag"]}, headers=PURGE)
    assert resp.status == 400  # refused requests do not use the quota
    first = await control.post("/api/purge", json={"tags": ["project-a"]}, headers=PURGE)
    assert first.status == 200
    body = await first.json()
    assert (body["success"], body["purged"], body["remaining_today"]) == (True, ["project-a"], 1)
    assert body["edges"] == {"total": 0, "acknowledged": [], "pending": [], "elapsedMs": 0.0, "entriesRemoved": {},
                            "latencyMs": {}}
    assert first.headers["X-RateLimit-Remaining"] == "1"
    second = await control.post("/api/purge", json={"purge_everything": True}, headers=PURGE)
    assert second.status == 200 and (await second.json())["remaining_today"] == 0
    third = await control.post("/api/purge", json={"urls": ["/a/v1/logos/x.svg"]}, headers=PURGE)
    assert third.status == 429
    body = await third.json()
    assert body["error"] == "Rate limit exceeded: max 2 purges per day"
    assert body["HttpCode"] == 429 and body["requestId"]
    assert 0 < int(third.headers["Retry-After"]) <= 86400
    assert third.headers["X-RateLimit-Remaining"] == "0"


async def test_with_the_daily_quota_switched_off_an_answer_claims_no_purges_left(aiohttp_client,  # type: ignore[no-untyped-def]
                                                                               tmp_path: Path) -> None:
    """`purge.daily_limit = 0` switches the limit off (docs/operations.md, Limits): every answer said
    `remaining_today: 0`, and the dashboard "0 purges left today", while purges went on being accepted."""
    settings = load_settings(environ={"ASSETCDN_PURGE_DAILY_LIMIT": "0"})
    control = await aiohttp_client(create_app(settings, SECRETS, tmp_path / "data"))
    for _ in range(2):
        resp = await control.post("/api/purge", json={"tags": ["project-a"]}, headers=PURGE)
        assert resp.status == 200
        assert "remaining_today" not in await resp.json()
        assert "X-RateLimit-Remaining" not in resp.headers


async def test_a_purge_write_token_may_purge_and_other_keys_may_not(control: TestClient) -> None:
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["purge:write"]}, headers=ACCOUNT)
    token = (await resp.json())["token"]
    resp = await control.post("/api/purge", json={"tags": ["all-assets"]},
                              headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200
    for headers in ({"x-api-key": SECRETS.analytics_key}, ACCOUNT, {}):
        resp = await control.post("/api/purge", json={"tags": ["all-assets"]}, headers=headers)
        assert resp.status == 401
        assert isinstance((await resp.json())["error"], str)  # the legacy envelope


async def test_an_oversize_purge_body_is_413_in_the_legacy_envelope(control: TestClient) -> None:
    resp = await control.post("/api/purge", data=b'{"tags": [' + b'"a",' * 20000 + b'"a"]}', headers=PURGE)
    body = await resp.json()
    assert resp.status == 413
    assert isinstance(body["error"], str) and body["HttpCode"] == 413 and body["Message"] == body["error"]


REFUSED = [
    ({"prefixes": ["/"]}, ["/"]),                                   # names no zone
    ({"prefixes": ["/akande", "/akande/v1/"]}, ["/akande"]),        # a zone name cut short is no zone
    ({"prefixes": ["akande/v1/", "ftp://cdn.example.com/akande/"]}, ["akande/v1/", "ftp://cdn.example.com/akande/"]),
    ({"prefixes": ["/akande/../other/", "/akande/%2e%2e/x"]}, ["/akande/../other/", "/akande/%2e%2e/x"]),
    ({"prefixes": ["/akande/v1/\n"]}, ["/akande/v1/\n"]),
    ({"urls": ["https://cdn.example.com/akande/%0d%0aX: y", "/akande/v1/logos/a.svg"]},
     ["https://cdn.example.com/akande/%0d%0aX: y"]),
]


@pytest.mark.parametrize(("body", "invalid"), REFUSED)
async def test_bad_prefixes_and_urls_are_400_naming_them(control: TestClient, body: dict[str, Any],
                                                         invalid: list[str]) -> None:
    resp = await control.post("/api/purge", json=body, headers=PURGE)
    answer = await resp.json()
    assert resp.status == 400, answer
    assert answer["HttpCode"] == 400 and answer["Message"] == answer["error"] and answer["requestId"]
    assert answer["invalid"] == invalid


@pytest.mark.parametrize(("body", "error"), [
    ({"prefixes": []}, "prefixes array is empty"),
    ({"prefixes": "/akande/"}, '"prefixes" must be an array'),
    ({"prefixes": [f"/akande/{i}/" for i in range(31)]}, "Too many prefixes: max 30 per request"),
    ({"prefixes": ["/akande/"], "urls": ["/akande/v1/logos/a.svg"]},
     "Only one of purge_everything, urls, tags, or prefixes may be specified per request"),
    ({"tags": ["a"], "soft": "yes"}, '"soft" must be true or false'),
    ({"soft": True}, 'Request must include "urls" array, "tags" array, "prefixes" array, or "purge_everything": true'),
])
async def test_a_malformed_purge_is_400_in_the_legacy_envelope(control: TestClient, body: dict[str, Any],
                                                               error: str) -> None:
    resp = await control.post("/api/purge", json=body, headers=PURGE)
    answer = await resp.json()
    assert (resp.status, answer["error"], answer["HttpCode"]) == (400, error, 400)


async def test_a_refused_purge_records_nothing(control: TestClient) -> None:
    first = await (await control.post("/api/purge", json={"tags": ["a"]}, headers=PURGE)).json()
    refused: list[dict[str, Any]] = [{"prefixes": ["/akande/", "/"], "soft": True}, {"urls": ["/ok/x", "bad"]},
                                     {"prefixes": []}]
    for body in refused:
        assert (await control.post("/api/purge", json=body, headers=PURGE)).status == 400
    second = await (await control.post("/api/purge", json={"tags": ["b"]}, headers=PURGE)).json()
    # No generation, no day's quota and no audit entry went to the refused ones.
    assert second["generation"] == first["generation"] + 1
    assert second["remaining_today"] == first["remaining_today"] - 1
    resp = await control.get("/api/core/audit-logs", headers=ACCOUNT)
    purges = [e["meta"] for e in (await resp.json())["Entries"] if e["action"] == "purge.execute"]
    assert [meta["purged"] for meta in purges] == [["b"], ["a"]]


async def test_a_soft_prefix_purge_reports_its_mode_in_the_answer_and_the_audit_log(control: TestClient) -> None:
    prefixes = ["/akande/v1/logos/", "https://akande.cdn.localhost/img/", "/shop/caf%C3%A9/"]
    resp = await control.post("/api/purge", json={"prefixes": prefixes, "soft": True}, headers=PURGE)
    body = await resp.json()
    assert resp.status == 200, body
    assert (body["purged"], body["mode"], body["soft"]) == (prefixes, "prefixes", True)
    hard = await (await control.post("/api/purge", json={"purge_everything": True}, headers=PURGE)).json()
    assert (hard["purged"], hard["mode"], hard["soft"]) == ("everything", "everything", False)
    resp = await control.get("/api/core/audit-logs", headers=ACCOUNT)
    metas = [e["meta"] for e in (await resp.json())["Entries"] if e["action"] == "purge.execute"]
    assert [(m["purged"], m["purgeMode"], m["soft"]) for m in metas] == [
        ("everything", "everything", False), (prefixes, "prefixes", True)]


async def test_a_prefix_with_a_query_or_fragment_is_refused_rather_than_widened(control: TestClient) -> None:
    # The edge reads a prefix's path only: `/akande/?v=2` would purge every path of the zone.
    prefixes = ["/akande/?v=2", "/akande/img#top", "https://akande.cdn.localhost/img/?", "/akande/v1/"]
    first = await (await control.post("/api/purge", json={"tags": ["a"]}, headers=PURGE)).json()
    resp = await control.post("/api/purge", json={"prefixes": prefixes}, headers=PURGE)
    answer = await resp.json()
    assert resp.status == 400, answer
    assert answer["invalid"] == prefixes[:3] and "query" in answer["error"]
    second = await (await control.post("/api/purge", json={"tags": ["b"]}, headers=PURGE)).json()
    assert second["generation"] == first["generation"] + 1  # nothing was purged nor recorded


async def test_a_url_or_prefix_with_a_user_name_or_password_is_refused(control: TestClient) -> None:
    # No request carries userinfo; accepted, it was purged as the bare URL and echoed to logs and webhooks.
    urls = ["https://bot:s3cret@akande.cdn.localhost/a.css", "https://bot@akande.cdn.localhost/b.css",
            "https://akande.cdn.localhost/c@2x.png", "/akande/d@2x.png"]
    resp = await control.post("/api/purge", json={"urls": urls}, headers=PURGE)
    answer = await resp.json()
    assert resp.status == 400, answer
    assert answer["invalid"] == urls[:2] and "user name or password" in answer["error"]
    resp = await control.post("/api/purge", json={"prefixes": ["https://bot:s3cret@akande.cdn.localhost/img/"]},
                              headers=PURGE)
    assert resp.status == 400 and (await resp.json())["invalid"] == ["https://bot:s3cret@akande.cdn.localhost/img/"]
    resp = await control.post("/api/purge", json={"urls": urls[2:]}, headers=PURGE)
    assert resp.status == 200 and (await resp.json())["purged"] == urls[2:]
    resp = await control.get("/api/core/audit-logs", headers=ACCOUNT)
    purges = [e["meta"]["purged"] for e in (await resp.json())["Entries"] if e["action"] == "purge.execute"]
    assert purges == [urls[2:]]  # the refused ones recorded nothing


async def test_a_url_or_prefix_with_a_malformed_port_is_refused(control: TestClient) -> None:
    # The edge reads a purge URL's host without its port: `host:abc` was purged as the bare host.
    urls = ["https://akande.cdn.localhost:abc/a.css", "https://akande.cdn.localhost:99999/a.css",
            "https://akande.cdn.localhost:8443/a.css"]
    resp = await control.post("/api/purge", json={"urls": urls}, headers=PURGE)
    answer = await resp.json()
    assert resp.status == 400, answer
    assert answer["invalid"] == urls[:2] and "malformed port" in answer["error"]
    resp = await control.post("/api/purge", json={"prefixes": ["http://akande.cdn.localhost:-1/img/"]},
                              headers=PURGE)
    assert resp.status == 400 and (await resp.json())["invalid"] == ["http://akande.cdn.localhost:-1/img/"]
    resp = await control.post("/api/purge", json={"urls": urls[2:]}, headers=PURGE)
    assert resp.status == 200 and (await resp.json())["generation"] == 1  # the refused ones recorded nothing


async def test_the_openapi_schema_of_a_purge_states_the_bounds_the_route_enforces(control: TestClient) -> None:
    schema = document()["components"]["schemas"]["PurgeRequest"]["properties"]
    items = {"urls": "/akande/{}", "tags": "t{}", "prefixes": "/akande/{}/"}
    for mode, item in items.items():
        bounds = schema[mode]
        assert (bounds["minItems"], bounds["maxItems"]) == (1, MAX_ITEMS)
        for count, status in ((0, 400), (1, 200), (MAX_ITEMS, 200), (MAX_ITEMS + 1, 400)):
            body: dict[str, Any] = {mode: [item.format(i) for i in range(count)]}
            resp = await control.post("/api/purge", json=body, headers=PURGE)
            assert resp.status == status, (mode, count, await resp.text())
    for mode in ("urls", "prefixes"):
        assert schema[mode]["items"]["maxLength"] == MAX_ITEM_LENGTH
    # purge_everything takes only true: false is refused, alone or beside another mode.
    assert schema["purge_everything"].get("const") is True
    for refused in ({"purge_everything": False}, {"purge_everything": False, "tags": ["a"]}):
        assert (await control.post("/api/purge", json=refused, headers=PURGE)).status == 400


async def test_items_at_the_length_limit_are_purged_and_longer_ones_refused_saying_so(control: TestClient) -> None:
    def of_length(start: str, n: int) -> str:
        return start + "a" * (n - len(start))
    # A full batch at the limit fits the 64 KB body and is purged whole.
    urls = [of_length(f"/akande/{i:02}/", MAX_ITEM_LENGTH) for i in range(MAX_ITEMS)]
    resp = await control.post("/api/purge", json={"urls": urls}, headers=PURGE)
    assert resp.status == 200 and (await resp.json())["purged"] == urls
    for mode, item in (("urls", of_length("https://akande.cdn.localhost/", MAX_ITEM_LENGTH + 1)),
                       ("prefixes", of_length("/akande/", MAX_ITEM_LENGTH + 1))):
        resp = await control.post("/api/purge", json={mode: ["/akande/ok", item]}, headers=PURGE)
        answer = await resp.json()
        assert resp.status == 400 and answer["invalid"] == [item]
        assert f"at most {MAX_ITEM_LENGTH} characters" in answer["error"]  # the reason, not only the form
    second = await (await control.post("/api/purge", json={"tags": ["b"]}, headers=PURGE)).json()
    assert second["generation"] == 2  # the refused batches recorded nothing


ZONE_REFUSED = [
    ({"urls": ["/akande/v1/logos/a.svg"], "zone": "akande"}, '"zone" scopes "tags" only'),
    ({"prefixes": ["/akande/v1/"], "zone": "akande"}, '"zone" scopes "tags" only'),
    ({"purge_everything": True, "zone": "akande"}, '"zone" scopes "tags" only'),
    ({"tags": ["home"], "zone": None}, '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'),
    ({"tags": ["home"], "zone": ["akande"]}, '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'),
    ({"tags": ["home"], "zone": "Akande"}, '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'),
    ({"tags": ["home"], "zone": "akande\n"}, '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'),
]


@pytest.mark.parametrize(("body", "error"), ZONE_REFUSED)
async def test_a_zone_beside_another_mode_or_not_in_the_zone_name_form_is_400_and_records_nothing(
        control: TestClient, zone: str, body: dict[str, Any], error: str) -> None:
    first = await (await control.post("/api/purge", json={"tags": ["a"]}, headers=PURGE)).json()
    resp = await control.post("/api/purge", json=body, headers=PURGE)
    answer = await resp.json()
    assert (resp.status, answer["error"], answer["HttpCode"]) == (400, error, 400), answer
    second = await (await control.post("/api/purge", json={"tags": ["b"]}, headers=PURGE)).json()
    assert second["generation"] == first["generation"] + 1
    assert second["remaining_today"] == first["remaining_today"] - 1


async def test_a_zone_that_does_not_exist_is_404_in_the_legacy_envelope_and_records_nothing(
        control: TestClient, zone: str) -> None:
    first = await (await control.post("/api/purge", json={"tags": ["a"]}, headers=PURGE)).json()
    resp = await control.post("/api/purge", json={"tags": ["home"], "zone": "akandee"}, headers=PURGE)
    answer = await resp.json()
    assert resp.status == 404, answer
    assert (answer["error"], answer["HttpCode"]) == ("Zone 'akandee' does not exist", 404)
    assert answer["Message"] == answer["error"] and answer["requestId"]
    second = await (await control.post("/api/purge", json={"tags": ["b"]}, headers=PURGE)).json()
    assert second["generation"] == first["generation"] + 1  # no generation, no quota
    assert second["remaining_today"] == first["remaining_today"] - 1


async def test_a_tag_purge_within_a_zone_says_its_zone_and_is_recorded_with_it(control: TestClient, zone: str) -> None:
    resp = await control.post("/api/purge", json={"tags": ["home", "home"], "zone": zone, "soft": True}, headers=PURGE)
    body = await resp.json()
    assert resp.status == 200, body
    assert (body["purged"], body["mode"], body["soft"], body["zone"]) == (["home"], "tags", True, zone)
    unscoped = await (await control.post("/api/purge", json={"tags": ["home"]}, headers=PURGE)).json()
    assert "zone" not in unscoped  # an unscoped purge's answer is as it was
    resp = await control.get("/api/core/audit-logs", headers=ACCOUNT)
    metas = [e["meta"] for e in (await resp.json())["Entries"] if e["action"] == "purge.execute"]
    assert [(m["purged"], m.get("zone")) for m in metas] == [(["home"], None), (["home"], zone)]
