"""Pull zones over IPv6 loopback (::1): an edge worker whose cluster site is on ::1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from tests.edge.hit_server import HitTestServer
from tests.prerequisites import ipv6_loopback
from tests.support.cdn import PURGE, Cdn, register_and_make_zone
from tests.support.cdn import test_settings as cdn_settings
from tests.support.control import SECRETS
from tests.support.origins import PREFIX, ScriptedOrigin, add_pull_zone, serve_origin
from tests.support.wait import wait_until

ZONE = "six"


async def test_an_edge_advertised_on_ipv6_loopback_is_reachable_for_purges(tmp_path: Path, aiohttp_client: Any) -> None:
    """An edge started with `--host ::1` (or `--advertise-host ::1`) registers its cluster site as
    `http://[::1]:port`: control's purges reach it, and a purged pull zone URL is asked of the origin again."""
    ipv6_loopback()
    settings = cdn_settings({"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    control_client: TestClient = await aiohttp_client(control.app.create_app(settings, SECRETS, tmp_path / "data"))
    identity = EdgeIdentity(name="edge-six", worker=0, control_url=str(control_client.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="::1", workers=0)
    edge_client: TestClient = await aiohttp_client(HitTestServer(edge.app.create_app(settings, SECRETS, identity)))

    async def edge_healthy() -> bool:
        return (await edge_client.get("/api/health")).status == 200

    await wait_until(edge_healthy, "edge health 200")
    await register_and_make_zone(control_client, "edge-six")
    cdn = Cdn(control_client, edge_client)
    origin = ScriptedOrigin()
    origin.answer("/a.txt", b"first", headers={"Cache-Control": "max-age=600"})
    server = await serve_origin(origin)
    try:
        await add_pull_zone(cdn, ZONE, {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
        for _ in range(2):
            resp = await edge_client.get(f"/{ZONE}/a.txt")
            assert (resp.status, await resp.read()) == (200, b"first")
        assert origin.count("/a.txt") == 1
        resp = await control_client.post("/api/purge", json={"urls": [f"/{ZONE}/a.txt"]}, headers=PURGE)
        answer = await resp.json()
        assert resp.status == 200, answer
        assert answer["edges"]["pending"] == [], answer  # acknowledged: control reached the edge's cluster site
        origin.answer("/a.txt", b"second", headers={"Cache-Control": "max-age=600"})
        resp = await edge_client.get(f"/{ZONE}/a.txt")
        assert (resp.status, await resp.read()) == (200, b"second")
        assert origin.count("/a.txt") == 2
    finally:
        await server.close()
