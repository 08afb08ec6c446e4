"""Control's /api/health and /metrics: the API reference's health shape, a public answer without internal
addresses, and the metrics key for /metrics and deep health."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import GIT, MANIFEST
from assetcdn.shared.cluster import PREFIX, sign_request
from tests.control.expect import expect_error
from tests.shared.health_shape import assert_health_shape, assert_no_internal_addresses
from tests.support.control import ACCESS, ACCOUNT, METRICS, SECRETS
from tests.support.metrics_text import metric

EDGE_URL = "http://127.0.0.1:49999"


async def _register_edge(control: TestClient) -> None:
    body = orjson.dumps({"v": 1, "name": "edge-x/0", "url": EDGE_URL, "generation": 0})
    headers = {**sign_request(SECRETS.cluster_secret, "POST", PREFIX + "/register", body),
               "Content-Type": "application/json"}
    resp = await control.post(PREFIX + "/register", data=body, headers=headers)
    assert resp.status == 200, await resp.text()


async def test_shallow_health_has_the_published_shape_and_no_internal_address(
        control: TestClient, data_dir: Path) -> None:
    await _register_edge(control)
    resp = await control.get("/api/health")
    text = await resp.text()
    assert resp.status == 200, text
    assert resp.headers["Cache-Control"] == "no-cache, no-store"
    body = orjson.loads(text)
    assert_health_shape(body)
    assert body["status"] == "ok"
    assert {c["method"] for c in body["checks"]} == {"shape"}
    assert_no_internal_addresses(text, str(data_dir))


async def test_the_bindings_name_what_control_has(control: TestClient) -> None:
    # The AI endpoints' models, the webhook outbox (a queue with retries and dead letters); no vector index with
    # semantic search off, as the tests' control runs.
    bindings = (await (await control.get("/api/health")).json())["bindings"]
    assert bindings == {"assets": True, "kv": True, "ai": True, "vectorize": False, "rateLimiter": True,
                        "metrics": True, "webhookQueue": True, "auditLogKv": True}


async def test_deep_health_needs_the_metrics_key(control: TestClient) -> None:
    await _register_edge(control)
    await expect_error(await control.get("/api/health?deep=1"), 401, "Unauthorized")
    await expect_error(await control.get("/api/health?deep=1", headers=ACCOUNT), 401, "Unauthorized")
    await expect_error(await control.get("/api/health?deep=1", headers={"Authorization": "Bearer wrong"}),
                       401, "Unauthorized")
    resp = await control.get("/api/health?deep=1", headers=METRICS)
    body = await resp.json()
    assert resp.status == 200, body
    assert_health_shape(body)
    assert {c["method"] for c in body["checks"]} <= {"manifest-fetch", "kv-get"}
    assert all(isinstance(c["latencyMs"], int) for c in body["checks"])
    assert [e["url"] for e in body["edges"]] == [EDGE_URL]


async def test_a_broken_binding_is_named_without_its_details_in_public(control: TestClient,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise RuntimeError("cannot open /srv/private/repo.git")

    monkeypatch.setattr(control.app[GIT], "head_commit_id", broken)
    resp = await control.get("/api/health")
    text = await resp.text()
    assert resp.status == 503
    body = orjson.loads(text)
    assert_health_shape(body)
    git_check = next(c for c in body["checks"] if c["name"] == "git")
    assert git_check["healthy"] is False and git_check["error"]
    assert "/srv/private" not in text
    resp = await control.get("/api/health?deep=1", headers=METRICS)
    assert resp.status == 503
    assert "/srv/private/repo.git" in await resp.text()  # the operator with the key sees the reason


async def test_metrics_need_the_metrics_key(control: TestClient) -> None:
    assert (await control.get("/api/health")).status == 200
    for headers in ({}, ACCOUNT, {"Authorization": "Bearer wrong"}, {"Authorization": SECRETS.metrics_key}):
        resp = await control.get("/metrics", headers=headers)
        await expect_error(resp, 401, "Unauthorized")
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await control.get("/metrics", headers=METRICS)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    text = await resp.text()
    assert "# TYPE assetcdn_requests_total counter" in text
    assert 'route="/api/health"' in text


async def test_the_manifest_generation_follows_each_commit(control: TestClient) -> None:
    """`assetcdn_manifest_generation{process="control"}` is the generation control publishes now, as the edges'
    series are theirs: an operator compares them to see an edge behind. It was set once, at start."""
    async def generation() -> float:
        return metric(await (await control.get("/metrics", headers=METRICS)).text(), "assetcdn_manifest_generation",
                      process="control")

    before = await generation()
    resp = await control.post("/api/core/zones", json={"Name": "counted"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    resp = await control.put("/api/storage/counted/v1/banners/a.txt", data=b"a", headers=ACCESS)
    assert resp.status == 201, await resp.text()
    published = control.app[MANIFEST].generation
    assert published > before
    assert await generation() == published
