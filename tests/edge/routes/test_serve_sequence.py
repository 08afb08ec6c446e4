"""The serve sequence (assetcdn/edge/states/serve.py) through every delivery route, in process: a real control and a
real edge application without the hit path in front, so the sequence answers every request.

On each route one look-up decides MISS, HIT or STALE; with control down, what was never cached and,
past the stale-if-error bound, what was, are refused in each route's own envelope; a cached body
purged while it is being delivered is looked up again and fetched anew; an edge without a manifest
answers 503 on every route.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest
import pyvips
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient

import assetcdn.edge.app  # noqa: F401
import assetcdn.edge.states.serve  # noqa: F401
from assetcdn import edge
from assetcdn.control.video.demo import write_synthetic_video
from assetcdn.control.video.ingest import rendition_files
from assetcdn.control.video.transcode import transcode_hls
from assetcdn.edge.app import EdgeIdentity
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.tags import path_tag
from assetcdn.edge.node import EdgeNode
from assetcdn.shared.config import load_settings
from assetcdn.shared.signing import signed_url
from tests.integration.harness import LAZY_IMAGE_POOL, free_port_block
from tests.support.cdn import ZONE, Cdn, CdnFactory
from tests.support.control import ACCESS, SECRETS
from tests.support.wait import wait_until

VIDEO = "nature"
HLS = f"stocks/videos/{VIDEO}/hls"
STALE_WARNING = '110 - "Response is stale: control plane unreachable"'
# Bodies above 16 KB stay out of the memory tier; from 32 KB the disk tier keeps them as files, which a
# purge can unlink between the look-up and the open (assetcdn/edge/cache/disk.py).
LARGE_BODIES = {"ASSETCDN_EDGE_MEMORY_OBJECT_MAX_KB": "16"}


def noisy_png(width: int = 480, height: int = 320) -> bytes:
    """A photo-like PNG that does not compress much (a few hundred KB): cached as a file."""
    noise = pyvips.Image.gaussnoise(width, height, sigma=40, mean=128)
    return noise.bandjoin([noise.rot180(), noise.flip("horizontal")]).cast("uchar") \
        .copy(interpretation="srgb").pngsave_buffer()


@pytest.fixture(scope="module")
def hls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A real HLS rendition and index made by control's transcoder once for the module (two segments,
    each large enough to be cached as a file), as the repository files ingest would commit."""
    work = tmp_path_factory.mktemp("hls")
    source = write_synthetic_video(work / f"{VIDEO}.mp4", VIDEO, seconds=12, width=320, height=180, fps=10,
                                   audio=True)
    index = transcode_hls(source, work / "out", qualities=(720,), video=VIDEO, preset="ultrafast")
    return rendition_files(VIDEO, index, work / "out")


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


@dataclass(frozen=True)
class Route:
    name: str
    url: str
    headers: dict[str, str]
    cdn_path: str           # the source path whose cache entries the request reads
    envelope: str           # "standard": {"error": {"code": ...}}; "legacy": {"error": "..."}
    unreachable: int        # the status when control is needed and unreachable


def routes(prefix: str) -> list[Route]:
    """One request per delivery route, each reading its own source (under `prefix`), so each starts as a MISS."""
    base = f"{ZONE}/v1/images/{prefix}"
    return [
        Route("delivery", f"/{base}-file.png", {}, f"{base}-file.png", "standard", 503),
        Route("signed", _local(signed_url("http://edge", SECRETS.signed_url_secret, f"/{base}-signed.png", 3600)),
              {}, f"{base}-signed.png", "legacy", 502),
        Route("auto, file as is", f"/api/auto/{base}-auto", {"Accept": "image/png"}, f"{base}-auto.png",
              "legacy", 503),
        Route("auto, converted", f"/api/auto?path=/{base}-conv", {"Accept": "image/webp"}, f"{base}-conv.png",
              "legacy", 503),
        Route("transform", f"/api/transform?url=/{base}-tf.png&w=400&format=webp", {}, f"{base}-tf.png",
              "legacy", 503),
        Route("stream", f"/api/stream?video={VIDEO}&quality=720&segment=0", {}, f"{HLS}/720.ts", "legacy", 502),
    ]


async def start(make_cdn: CdnFactory, hls_files: dict[str, bytes], *prefixes: str) -> Cdn:
    """A CDN holding one photo per route and prefix and the HLS files, uploaded in one batch (one commit)."""
    cdn = await make_cdn(hit_path=False, **LARGE_BODIES)
    png = noisy_png()
    files = {route.cdn_path: png for prefix in prefixes for route in routes(prefix) if route.name != "stream"}
    files.update(hls_files)
    resp = await cdn.control.post("/api/storage/batch", headers=ACCESS, json={"files": [
        {"path": path, "content": base64.b64encode(data).decode()} for path, data in files.items()]})
    assert resp.status == 201, await resp.text()

    async def arrived() -> bool:
        return all(cdn.node.replica.get(path) is not None for path in files)

    await wait_until(arrived, "the batch reaching the edge")
    return cdn


async def get(client: TestClient, route: Route) -> tuple[ClientResponse, bytes]:
    resp = await client.get(route.url, headers=route.headers)
    return resp, await resp.read()


async def stop_control(cdn: Cdn) -> None:
    await cdn.control.close()

    async def unreachable() -> bool:
        return not cdn.node.control_reachable()

    await wait_until(unreachable, "the edge noticing control is gone")


def assert_refusal(route: Route, resp: ClientResponse, body: bytes, status: int) -> None:
    assert resp.status == status, (route.name, resp.status, body[:300])
    error = orjson.loads(body)["error"]
    if route.envelope == "standard":
        assert isinstance(error, dict) and error["code"], (route.name, body)
    else:
        assert isinstance(error, str) and error, (route.name, body)


async def test_every_route_misses_then_hits_then_serves_stale_while_control_is_down_within_its_bound(
        make_cdn: CdnFactory, hls_files: dict[str, bytes]) -> None:
    cdn = await start(make_cdn, hls_files, "seq", "cold")
    first: dict[str, bytes] = {}
    for route in routes("seq"):
        resp, body = await get(cdn.edge, route)
        assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS"), (route.name, body[:300])
        first[route.name] = body
        resp, body = await get(cdn.edge, route)
        assert (resp.status, resp.headers["X-Cache"], body) == (200, "HIT", first[route.name]), route.name
        assert "Warning" not in resp.headers

    await stop_control(cdn)
    for route in routes("seq"):
        resp, body = await get(cdn.edge, route)
        assert (resp.status, resp.headers["X-Cache"]) == (200, "STALE"), (route.name, body[:300])
        assert body == first[route.name] and resp.headers["Warning"] == STALE_WARNING, route.name
        head = await cdn.edge.head(route.url, headers=route.headers)
        assert (head.status, head.headers["X-Cache"]) == (200, "STALE"), route.name
        assert int(head.headers["Content-Length"]) == len(first[route.name]), route.name

    # What was never cached needs control: each route refuses in its own envelope and words.
    for route in routes("cold"):
        if route.name == "stream":  # a segment not served yet is cut from the cached rendition
            resp = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720&segment=1")
            assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS")
            continue
        resp, body = await get(cdn.edge, route)
        assert_refusal(route, resp, body, route.unreachable)

    # Past the stale-if-error bound (a day by default: here as if it had passed) what is cached is refused too.
    cdn.node.stale_if_error_s = 0.001
    assert cdn.node.hit_status() is None
    for route in routes("seq"):
        resp, body = await get(cdn.edge, route)
        assert_refusal(route, resp, body, route.unreachable)


class PurgeOnLookUp:
    """Wraps the edge cache's `get`: the first time a look-up hands out the file of one of `cdn_path`'s
    entries, that path is purged at once (its files unlinked), as a purge landing between the look-up
    and the open does."""

    def __init__(self, node: EdgeNode, cdn_path: str) -> None:
        self.node, self.cdn_path = node, cdn_path
        self.real_get: Callable[[str], CachedObject | None] = node.cache.get
        self.fired = 0

    def get(self, key: str) -> CachedObject | None:
        obj = self.real_get(key)
        if obj is not None and obj.path is not None and key.endswith(self.cdn_path) and not self.fired:
            self.fired += 1
            self.node.cache.purge_tags([path_tag(self.cdn_path)])
        return obj


async def test_a_body_purged_while_being_delivered_is_looked_up_and_fetched_again_on_every_route(
        make_cdn: CdnFactory, hls_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    cdn = await start(make_cdn, hls_files, "gone")
    node = cdn.node
    for route in routes("gone"):
        resp, body = await get(cdn.edge, route)
        assert (resp.status, resp.headers["X-Cache"]) == (200, "MISS"), (route.name, body[:300])
        keys = node.cache.disk.keys_for_tags([path_tag(route.cdn_path)])
        cached = [o for o in (node.cache.get(k) for k in keys) if o is not None]
        assert any(o.path is not None for o in cached), f"{route.name}: the body is not cached as a file"

        purge = PurgeOnLookUp(node, route.cdn_path)
        monkeypatch.setattr(node.cache, "get", purge.get)
        again, again_body = await get(cdn.edge, route)
        monkeypatch.undo()
        assert purge.fired == 1, route.name
        assert (again.status, again.headers["X-Cache"]) == (200, "MISS"), (route.name, again_body[:300])
        assert again_body == body, route.name

    # A body that vanishes on every attempt: two attempts, then the route says so in its envelope.
    attempts: list[str] = []

    async def vanished(request: web.Request, obj: CachedObject, headers: dict[str, str]) -> web.StreamResponse:
        attempts.append(request.path)
        raise FileNotFoundError(obj.key)

    monkeypatch.setattr(edge.states.serve, "deliver", vanished)
    for route in routes("gone"):
        attempts.clear()
        resp, body = await get(cdn.edge, route)
        assert_refusal(route, resp, body, 503)
        assert b"purged while it was being delivered" in body and len(attempts) == 2, (route.name, attempts)


def closed_port() -> int:
    return free_port_block(1)  # below the ephemeral range: no server beside this test binds it by chance


async def test_an_edge_without_a_manifest_answers_503_on_every_route(
        aiohttp_client: Callable[..., Awaitable[TestClient]], tmp_path: Path) -> None:
    # Started while control is down and with nothing persisted: it has no manifest to look anything up in.
    settings = load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2", **LAZY_IMAGE_POOL})
    identity = EdgeIdentity(name="edge-n", worker=0, control_url=f"http://127.0.0.1:{closed_port()}",
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    client = await aiohttp_client(edge.app.create_app(settings, SECRETS, identity))
    assert not client.app[NODE].replica.loaded
    for route in routes("any"):
        resp, body = await get(client, route)
        assert_refusal(route, resp, body, 503)
        if route.envelope == "standard":
            assert b'"EdgeNotReady"' in body
        else:
            assert b"not loaded the manifest" in body, (route.name, body)


async def test_cache_keys_of_every_route_never_change(make_cdn: CdnFactory, hls_files: dict[str, bytes]) -> None:
    # The keys as each route stored them before they were built in one module (assetcdn/edge/states/keys.py):
    # a changed key would orphan every cached entry of that kind, so these must never change.
    cdn = await start(make_cdn, hls_files, "keys")
    by_name = {route.name: route for route in routes("keys")}
    photo = by_name["transform"].cdn_path
    for url in (by_name["delivery"].url, by_name["transform"].url, by_name["stream"].url,
                f"/api/lqip?url=/{photo}&size=16&blur=10", f"/api/blurhash?url=/{photo}&size=24"):
        resp = await cdn.edge.get(url)
        assert resp.status == 200, (url, await resp.text())

    def blob(path: str) -> str:
        entry = cdn.node.replica.get(path)
        assert entry is not None, path
        return entry.blob_id

    file, segment_source = by_name["delivery"].cdn_path, by_name["stream"].cdn_path
    for key in (f"asset:{blob(file)}:{file}",
                f"tf1/{blob(photo)}/w400.webp|{photo}",
                f"segment:{blob(segment_source)}:0|{segment_source}",
                f"lqip2/{blob(photo)}/s16-b10|{photo}",
                f"blurhash2/{blob(photo)}/s24|{photo}"):
        assert cdn.node.cache.get(key) is not None, key

    # Playlists are cached since they go through the serve sequence: keyed by the index's content id.
    index = f"{HLS}/index.json"
    for query, part in ((f"video={VIDEO}", "master"), (f"video={VIDEO}&quality=720", "720")):
        first = await cdn.edge.get(f"/api/stream?{query}")
        again = await cdn.edge.get(f"/api/stream?{query}")
        assert (first.headers["X-Cache"], again.headers["X-Cache"]) == ("MISS", "HIT"), query
        assert await again.read() == await first.read() and b"#EXTM3U" in await first.read()
        assert first.headers["Content-Type"] == "application/vnd.apple.mpegurl; charset=utf-8"
        assert cdn.node.cache.get(f"playlist:{blob(index)}:{part}|{index}") is not None, part
