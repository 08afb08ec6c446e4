"""Pull zones' fresh hits on the hit path, over raw sockets against a real edge and an origin the tests script:
the same answers the application gives (Age and Cache-Status included, conditional and Range requests), an Age
that ticks with the clock, and stale entries, purges and new rules taken into account on the next request.

The clock the hit path and the serve sequence read (`time.time` in both modules) is the tests' own: an answer's
Age is then the same on both paths, and a test moves time forward instead of sleeping."""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio
from aiohttp import web

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.fastpath import hit_server
from assetcdn.edge.fastpath.prepared import PulledHit, fields_cost
from assetcdn.edge.states import pull as pull_states
from assetcdn.edge.states.keys import pull_key
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.content_security import SANDBOX_CSP
from assetcdn.shared.tls_state import TLS_STATE_PATH, TlsState
from tests.support.cdn import PURGE
from tests.support.control import ACCOUNT, SECRETS
from tests.support.footprint import traced_per_item
from tests.support.h2_memory import H2InProcess, MemoryHttp11
from tests.support.hit_cdn import HitCdn, RawConnection, Response
from tests.support.origins import LONG, Handler, ScriptedOrigin, pull_zone_on_hit_cdn, stored_url
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZONE = "pullfast"
BODY = bytes(range(256)) * 20
PER_REQUEST = {"x-request-id"}
HEADS = 300
TENANT_HOST = f"{ZONE}.cdn.localhost"  # the zone's own host (the default base domain is cdn.localhost)


class Clock:
    """`time` for the two modules, with `time()` the tests' own reading; everything else is the real module's."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fixed = Clock()
    module: ModuleType
    for module in (hit_server, pull_states):
        monkeypatch.setattr(module, "time", fixed)
    yield fixed


class PullCdn:
    def __init__(self, cdn: HitCdn, origin: ScriptedOrigin) -> None:
        self.cdn = cdn
        self.origin = origin

    @property
    def served(self) -> int:
        """Requests the hit path answered itself."""
        assert self.cdn.site.hits is not None
        return self.cdn.site.hits.served

    def stored(self, name: str, scheme: str = "http") -> pull_states.StoredResponse:
        found = stored_url(self.cdn.node, ZONE, name, scheme=scheme)
        assert found is not None
        return found

    async def warm(self, name: str, **headers: str) -> RawConnection:
        """`name` stored at the edge (its first request a MISS); a connection to the hit path."""
        self.origin.answer(name, BODY, headers={"Content-Type": "application/octet-stream", **headers})
        conn = await self.cdn.connect()
        assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

        async def kept() -> bool:  # a client has the whole body just before it is stored
            return stored_url(self.cdn.node, ZONE, name) is not None

        await wait_until(kept, f"{name} stored")
        return conn

    async def warm_secure(self, server: hit_server.HitServer, name: str, **headers: str) -> None:
        """`name` stored at the edge for https clients (an https URL has a key of its own), filled through the
        https site's hit server `server` over TLS HTTP/1.1."""
        self.origin.answer(name, BODY, headers={"Content-Type": "application/octet-stream", **headers})
        assert (await MemoryHttp11(server).request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

        async def kept() -> bool:
            return stored_url(self.cdn.node, ZONE, name, scheme="https") is not None

        await wait_until(kept, f"{name} stored for https")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pulled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PullCdn]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-hits"), ZONE) as (cdn, origin):
        yield PullCdn(cdn, origin)


def comparable(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() not in PER_REQUEST)
    return response.status, headers, response.body


async def test_a_fresh_hit_is_answered_exactly_as_the_application_answers_it(pulled: PullCdn, clock: Clock) -> None:
    etag = '"v1"'
    conn = await pulled.warm("/same.bin", **LONG, ETag=etag, **{"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                                                               "Age": "7", "Cache-Tag": "news"})
    plain = await pulled.cdn.plain()
    path = f"/{ZONE}/same.bin"
    stored = pulled.stored("/same.bin")
    clock.now = stored.freshness.response_time + 3.5
    age = int(stored.freshness.age(clock.now))
    assert age >= 10  # the origin's 7 and the 3.5 s since it arrived (RFC 9111 4.2.3)
    fast_cases: list[tuple[str, dict[str, str]]] = [
        ("GET", {}), ("HEAD", {}),
        ("GET", {"If-None-Match": etag}), ("GET", {"If-None-Match": f'W/{etag}, "other"'}),
        ("GET", {"If-None-Match": "*"}), ("GET", {"If-None-Match": '"nope"'}), ("HEAD", {"If-None-Match": etag}),
        ("GET", {"Range": "bytes=0-9"}), ("GET", {"Range": "bytes=-7"}), ("GET", {"Range": "bytes=4000-"}),
        ("HEAD", {"Range": "bytes=5-6"}), ("GET", {"Range": "bytes=0-1,4-5"}),
    ]
    # What the hit path hands to the application: the answers are the same all the same.
    handed_cases: list[tuple[str, dict[str, str]]] = [
        ("GET", {"If-Modified-Since": "Tue, 02 Jan 2024 00:00:00 GMT"}), ("GET", {"Range": "bytes=9999999-"}),
        ("GET", {"Range": "bytes=0-9", "If-Range": etag}), ("GET", {"Cache-Control": "max-stale=10"}),
    ]
    served = pulled.served
    for method, headers in fast_cases + handed_cases:
        fast = await conn.request(path, method, **headers)
        slow = await plain.request(path, method, **headers)
        assert comparable(fast) == comparable(slow), (method, headers)
        assert fast.header("Age") == str(age)
        assert fast.header("X-Request-ID") and fast.header("Date")
    assert pulled.served == served + len(fast_cases)
    statuses = [(await conn.request(path, **h)).status for h in ({"If-None-Match": etag}, {"Range": "bytes=0-0"})]
    assert statuses == [304, 206]
    whole = await conn.request(path)
    assert (whole.body, whole.header("X-Cache"), whole.header("Cache-Status")) == (BODY, "HIT", f"assetcdn; hit; ttl={int(600 - stored.freshness.age(clock.now))}")
    # A query string is part of what the origin is asked: its own entry, on the hit path too.
    pulled.origin.answer("/same.bin", b"other", headers=LONG)
    assert (await conn.request(f"{path}?v=2")).header("X-Cache") == "MISS"
    fast, slow = await conn.request(f"{path}?v=2"), await plain.request(f"{path}?v=2")
    assert comparable(fast) == comparable(slow) and fast.body == b"other"
    assert (await conn.request(path)).body == BODY
    assert pulled.origin.count("/same.bin") == 2


async def test_every_answer_from_a_stored_copy_says_the_accept_ranges_its_200_says(pulled: PullCdn) -> None:
    """The origin said `Accept-Ranges: none`; the edge answers ranges from its copy and its 200 says `bytes`. A 304
    or a 416 from that copy relayed the origin's `none`: a browser updating its stored head from the 304 (RFC 9111
    4.3.4) then held `none` for what the edge answers ranges of. Each says `bytes`, on both paths."""
    etag = '"r1"'
    conn = await pulled.warm("/ranges-none.bin", **LONG, ETag=etag, **{"Accept-Ranges": "none"})
    plain = await pulled.cdn.plain()
    path = f"/{ZONE}/ranges-none.bin"
    for client in (conn, plain):
        answers = [await client.request(path, **headers) for headers in (
            {}, {"If-None-Match": etag}, {"Range": "bytes=0-9"}, {"Range": f"bytes={len(BODY) + 5}-"})]
        assert [(a.status, a.headers.getall("Accept-Ranges", [])) for a in answers] == [
            (200, ["bytes"]), (304, ["bytes"]), (206, ["bytes"]), (416, ["bytes"])], client is conn


async def test_fields_a_304_names_private_or_no_cache_leave_the_copy_it_refreshes(pulled: PullCdn,
                                                                                 clock: Clock) -> None:
    """A 304 whose Cache-Control names a field in a qualified `private="..."` or `no-cache="..."` takes it out of
    the copy it refreshes, the first response's own value too (RFC 9111 5.2.2.4, 5.2.2.7): every hit after it,
    on the hit path as from the application, goes out without it."""
    conn = await pulled.warm("/named-304.bin", **{"Cache-Control": "max-age=10", "ETag": '"n1"',
                                                   "X-User": "alice", "X-Trace": "t1", "X-Kept": "k"})
    plain = await pulled.cdn.plain()
    path = f"/{ZONE}/named-304.bin"
    first = pulled.stored("/named-304.bin").freshness
    clock.now = first.response_time + 1
    assert (await conn.request(path)).header("X-User") == "alice"  # the first response's, while it was fresh

    async def not_modified(request: web.Request) -> web.StreamResponse:
        assert request.headers.get("If-None-Match") == '"n1"'
        return web.Response(status=304, headers={"ETag": '"n1"', "Cache-Control":
                                                 'max-age=600, private="X-User", no-cache="X-Trace"'})

    pulled.origin.route("/named-304.bin", not_modified)
    clock.now = first.response_time + 11  # stale: the application revalidates it
    revalidated = await plain.request(path)
    assert (revalidated.status, revalidated.header("X-Cache")) == (200, "REVALIDATED")

    async def refreshed() -> bool:
        return pulled.stored("/named-304.bin").freshness.response_time != first.response_time

    await wait_until(refreshed, "the copy refreshed by the 304")
    clock.now = pulled.stored("/named-304.bin").freshness.response_time + 2
    served = pulled.served
    fast, slow = await conn.request(path), await plain.request(path)
    assert pulled.served == served + 1
    for answer in (revalidated, fast, slow):
        assert (answer.header("X-User"), answer.header("X-Trace"), answer.header("X-Kept")) == (None, None, "k")
        assert answer.body == BODY
    assert fast.header("Cache-Control") == 'max-age=600, private="X-User", no-cache="X-Trace"'
    assert comparable(fast) == comparable(slow)


async def test_a_range_of_a_200_the_origin_sent_with_a_content_range_has_one_content_range(pulled: PullCdn,
                                                                                           clock: Clock) -> None:
    """An origin's 200 may carry a Content-Range (it means nothing there, and the copy is kept with it): a 206 made
    of it gives its own range in its place, as the application does, never the origin's beside it (two values, the
    whole body's first, which a client would read the 4 bytes it gets by)."""
    conn = await pulled.warm("/ranged-200.bin", **LONG, **{"Content-Range": f"bytes 0-{len(BODY) - 1}/{len(BODY)}"})
    plain = await pulled.cdn.plain()
    path = f"/{ZONE}/ranged-200.bin"
    clock.now = pulled.stored("/ranged-200.bin").freshness.response_time + 1
    for method in ("GET", "HEAD"):
        served = pulled.served
        fast, slow = await conn.request(path, method, Range="bytes=0-3"), await plain.request(path, method, Range="bytes=0-3")
        assert pulled.served == served + 1
        assert (fast.status, fast.headers.getall("Content-Range"), fast.header("Content-Length")) == (
            206, [f"bytes 0-3/{len(BODY)}"], "4")
        assert fast.body == (BODY[:4] if method == "GET" else b"")
        assert comparable(fast) == comparable(slow)
    whole = await conn.request(path)  # the 200 itself is answered with the origin's fields, as the application does
    assert (whole.status, whole.headers.getall("Content-Range"), whole.body) == (
        200, [f"bytes 0-{len(BODY) - 1}/{len(BODY)}"], BODY)


async def test_an_origins_own_policy_never_lifts_the_sandbox_on_the_default_host(pulled: PullCdn) -> None:
    """As the application answers (tests/edge/routes/test_pull_zones.py): the fill the hit path writes and its
    prepared hits carry the sandbox beside the origin's own policy on the default host, every zone's origin."""
    own = "script-src 'unsafe-inline'"
    pulled.origin.answer("/own-policy.html", b"<script>1</script>", headers={
        **LONG, "Content-Type": "text/html", "Content-Security-Policy": own})
    conn = await pulled.cdn.connect()
    started, served = pulled.cdn.site.hits.fills.started, pulled.served  # type: ignore[union-attr]
    for x_cache in ("MISS", "HIT", "HIT"):
        resp = await conn.request(f"/{ZONE}/own-policy.html")
        assert (resp.status, resp.header("X-Cache")) == (200, x_cache)
        assert resp.headers.getall("Content-Security-Policy") == [own, SANDBOX_CSP]
    assert pulled.cdn.site.hits.fills.started == started + 1  # type: ignore[union-attr]
    assert pulled.served > served


async def test_a_hit_path_answer_ages_with_the_clock(pulled: PullCdn, clock: Clock) -> None:
    conn = await pulled.warm("/ages.bin", **LONG)
    clock.now = pulled.stored("/ages.bin").freshness.response_time + 1
    served = pulled.served
    ages, ttls = [], []
    for _ in range(3):
        answer = await conn.request(f"/{ZONE}/ages.bin")
        ages.append(int(answer.header("Age") or -1))
        ttls.append(int((answer.header("Cache-Status") or "=").rsplit("=", 1)[1]))
        clock.now += 2
    assert [age - ages[0] for age in ages] == [0, 2, 4]
    assert [ttls[0] - ttl for ttl in ttls] == [0, 2, 4]
    assert pulled.served == served + 3


async def test_age_and_ttl_tick_at_their_own_whole_seconds_between_hits(pulled: PullCdn, clock: Clock) -> None:
    conn = await pulled.warm("/ticks.bin", **{"Cache-Control": "max-age=5", "Age": "1"})
    fresh = pulled.stored("/ticks.bin").freshness
    start, served, seen = fresh.response_time, pulled.served, []
    for step in range(14):  # Age and the ttl change at different moments: neither is held past its change
        clock.now = start + step * 0.3
        answer = await conn.request(f"/{ZONE}/ticks.bin")
        seen.append((answer.header("Age"), answer.header("Cache-Status")))
        assert seen[-1] == (str(int(fresh.age(clock.now))),
                            f"assetcdn; hit; ttl={int(fresh.lifetime - fresh.age(clock.now))}"), step
    assert pulled.served == served + 14 and len(set(seen)) >= 4


async def test_a_hit_asking_to_close_is_answered_as_the_application_answers_it_then_closed(pulled: PullCdn,
                                                                                           clock: Clock) -> None:
    conn = await pulled.warm("/close.bin", **LONG)
    plain = await pulled.cdn.plain()
    fresh = pulled.stored("/close.bin").freshness
    clock.now = fresh.response_time + 2.5
    served = pulled.served
    for method in ("GET", "HEAD"):
        fast = await conn.request(f"/{ZONE}/close.bin", method, Connection="close")
        slow = await plain.request(f"/{ZONE}/close.bin", method, Connection="close")
        assert comparable(fast) == comparable(slow)
        assert (fast.header("Age"), fast.header("Connection")) == (str(int(fresh.age(clock.now))), "close")
        assert fast.header("X-Request-ID")
        assert await conn.closed_by_server() and await plain.closed_by_server()
        conn, plain = await pulled.cdn.connect(), await pulled.cdn.plain()
    assert pulled.served == served + 2


async def test_a_target_with_a_fragment_is_the_applications_every_time(pulled: PullCdn, clock: Clock) -> None:
    conn = await pulled.warm("/fragment.bin", **LONG)
    clock.now = pulled.stored("/fragment.bin").freshness.response_time + 1
    served = pulled.served
    answers = [await conn.request(f"/{ZONE}/fragment.bin#part") for _ in range(2)]
    assert pulled.served == served  # never prepared, so never answered on the hit path
    assert (await conn.request(f"/{ZONE}/fragment.bin")).header("X-Cache") == "HIT"
    assert pulled.served == served + 1 and [answer.status for answer in answers] == [answers[0].status] * 2


async def test_a_stale_entry_is_not_answered_as_fresh_on_the_hit_path(pulled: PullCdn, clock: Clock) -> None:
    conn = await pulled.warm("/stale.bin", **{"Cache-Control": "max-age=60"})
    clock.now = pulled.stored("/stale.bin").freshness.response_time + 1
    assert (await conn.request(f"/{ZONE}/stale.bin")).header("X-Cache") == "HIT"
    clock.now += 60
    served = pulled.served
    answer = await conn.request(f"/{ZONE}/stale.bin")
    assert answer.header("X-Cache") == "MISS"  # the application asked the origin again
    assert pulled.served == served and pulled.origin.count("/stale.bin") == 2


async def test_an_entry_the_memory_tier_lets_go_is_freed_though_the_hit_path_served_it(pulled: PullCdn,
                                                                                        clock: Clock) -> None:
    conn = await pulled.warm("/evicted.bin", **LONG)
    clock.now = pulled.stored("/evicted.bin").freshness.response_time + 1
    served = pulled.served
    assert (await conn.request(f"/{ZONE}/evicted.bin")).body == BODY
    assert pulled.served == served + 1  # the hit path answered it, and keeps its prepared head
    key = pull_key(ZONE, "/evicted.bin", "")
    pulled.cdn.node.cache.flush_writes()  # on disk: no longer held by the write-behind queue for its batch
    assert pulled.cdn.node.cache.memory.discard(key)  # what an eviction does (MemoryTier._remove)
    gc.collect()
    # The body and its entry are gone from the worker's memory: the budget counts what is held.
    assert not [obj for obj in gc.get_objects() if isinstance(obj, CachedObject) and obj.key == key]
    assert (await conn.request(f"/{ZONE}/evicted.bin")).body == BODY  # read again from the disk tier


async def test_a_purge_and_new_rules_take_effect_on_the_next_hit(pulled: PullCdn, clock: Clock) -> None:
    conn = await pulled.warm("/purged.bin", **LONG)
    path = f"/{ZONE}/purged.bin"
    assert (await conn.request(path)).header("X-Cache") == "HIT"
    resp = await pulled.cdn.control.post("/api/purge", json={"urls": [path]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    assert (await conn.request(path)).header("X-Cache") == "MISS"
    assert (await conn.request(path)).header("X-Cache") == "HIT"
    resp = await pulled.cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": f"/{ZONE}/*\n  X-Frame-Options: DENY\n"})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return bool(pulled.cdn.node.config.rules.headers)

    await wait_until(applied, "rules reaching the edge")
    served = pulled.served
    answer = await conn.request(path)
    assert (answer.header("X-Cache"), answer.header("X-Frame-Options")) == ("HIT", "DENY")
    assert pulled.served == served + 1




async def test_one_zones_origin_change_keeps_the_other_zones_prepared_heads(pulled: PullCdn, clock: Clock) -> None:
    """An installation of many pull zones changes one at a time: a zone created, or another zone's origin set, keeps
    this zone's prepared heads (its next hit makes none), while the changed zone's own heads go. The second zone
    pulls from the same origin: each zone's hits stay its own."""
    conn = await pulled.warm("/kept-head.bin", **LONG)
    path = f"/{ZONE}/kept-head.bin"
    assert (await conn.request(path)).header("X-Cache") == "HIT"
    hits = pulled.cdn.site.hits
    assert hits is not None

    def held_for(target: str) -> PulledHit | None:
        """The head the hit path holds now for `target` on the connection's Host."""
        assert hits is not None
        view = hits.hosts.get(b"edge.test")
        return None if view is None else view.pulls.get(target.encode())

    held = held_for(path)
    assert held is not None
    node = pulled.cdn.node
    other = "pullfast-other"
    url = str(node.config.pull_zones[ZONE].origin.url)
    resp = await pulled.cdn.control.post("/api/core/zones", headers=ACCOUNT, json={"Name": other,
                                                                                   "Origin": {"Url": url}})
    assert resp.status == 201, await resp.text()
    try:
        async def has(zone: str, fields: dict[str, str]) -> bool:
            found = node.config.pull_zones.get(zone)
            return found is not None and dict(found.origin.request_headers) == fields

        await wait_until(lambda: has(other, {}), "the second zone reaching the edge")
        other_path = f"/{other}/kept-head.bin"
        assert (await conn.request(other_path)).header("X-Cache") == "MISS"

        async def other_kept() -> bool:
            return stored_url(node, other, "/kept-head.bin") is not None

        await wait_until(other_kept, "the second zone's copy stored")
        served = pulled.served
        for asked in (path, other_path):
            answer = await conn.request(asked)
            assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "HIT", BODY)
        assert pulled.served == served + 2
        assert held_for(path) is held  # the new zone's config left it
        other_held = held_for(other_path)
        assert other_held is not None
        resp = await pulled.cdn.control.put(f"/api/core/zones/{other}/origin", headers=ACCOUNT, json={
            "Url": url, "RequestHeaders": {"X-Origin-Secret": "s"}})
        assert resp.status == 200, await resp.text()
        await wait_until(lambda: has(other, {"X-Origin-Secret": "s"}), "the second zone's new origin reaching the edge")
        for asked in (path, other_path):
            answer = await conn.request(asked)
            assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "HIT", BODY)
        assert pulled.served == served + 4
        assert held_for(path) is held  # another zone's change: kept
        assert held_for(other_path) not in (None, other_held)  # its own change: made again
    finally:
        resp = await pulled.cdn.control.delete(f"/api/core/zones/{other}", headers=ACCOUNT)
        assert resp.status == 200, await resp.text()


async def test_a_host_past_the_hosts_kept_lets_only_the_first_hosts_heads_go(pulled: PullCdn, clock: Clock,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Zones on their own hosts (thousands of tenant hosts or custom domains) pass the Hosts a hit server keeps: the
    next new Host lets the Host first seen go with its heads, not every Host's heads."""
    monkeypatch.setattr(hit_server, "MAX_HOSTS", 6)
    hits = pulled.cdn.site.hits
    assert hits is not None
    hits._forget_hosts()  # the Hosts the module's other tests left
    conn = await pulled.warm("/many-hosts.bin", **LONG)
    path = f"/{ZONE}/many-hosts.bin"
    hosts = [f"host-{n}.test" for n in range(7)]

    def held(host: str) -> PulledHit | None:
        assert hits is not None
        view = hits.hosts.get(host.encode())
        return None if view is None else view.pulls.get(path.encode())

    served = pulled.served
    for host in hosts[:6]:
        answer = await conn.request(path, host=host)
        assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "HIT", BODY)
    before = {host: held(host) for host in hosts[:6]}
    assert None not in before.values() and hits.prepared == 6
    answer = await conn.request(path, host=hosts[6])
    assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "HIT", BODY)
    assert pulled.served == served + 7
    assert held(hosts[0]) is None  # the Host first seen went
    assert all(held(host) is before[host] for host in hosts[1:6])  # the others' heads stayed
    assert hits.prepared == 6 and held(hosts[6]) is not None


async def test_the_prepared_heads_are_charged_to_the_memory_budget_what_they_hold(pulled: PullCdn,
                                                                                  clock: Clock) -> None:
    """A URL the hit path answers keeps a prepared head; the memory tier's budget is charged what the heads hold, so
    entries and heads together stay within `edge.memory_cache_mb`."""
    names = [f"/heads/{n:04d}.bin" for n in range(HEADS)]
    for name in names:
        pulled.origin.answer(name, BODY[:1024], headers={"Content-Type": "application/octet-stream", "ETag": '"h"',
                                                         **LONG})
    conn = await pulled.cdn.connect()
    for name in names:
        assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

    async def all_kept() -> bool:
        return all(pulled.stored(name) for name in names) if all(
            stored_url(pulled.cdn.node, ZONE, name) for name in names) else False

    await wait_until(all_kept, "every URL stored")
    clock.now = pulled.stored(names[-1]).freshness.response_time + 1
    hits = pulled.cdn.site.hits
    memory = pulled.cdn.node.cache.memory
    assert hits is not None
    made, charged, served = hits.prepared, memory.heads_bytes, pulled.served
    view = hits.hosts[b"edge.test"]  # the Host the connection sends

    def make_heads() -> None:  # as a hit makes them, without the requests (whose own records and logs would count)
        for name in names:
            head = hits._prepare_pull(view, f"/{ZONE}{name}".encode(), None)
            assert isinstance(head, PulledHit)
            head.whole_head(clock.now, hits.date)  # what its first answer makes

    per_head = traced_per_item(make_heads, HEADS)
    assert hits.prepared == made + HEADS
    charged_per_head = (memory.heads_bytes - charged) / HEADS
    for name in names:  # and the hit path answers from them
        assert (await conn.request(f"/{ZONE}{name}")).body == BODY[:1024]
    assert pulled.served == served + HEADS and hits.prepared == made + HEADS
    assert hits.head_bytes == memory.heads_bytes
    # Charged a little over what tracemalloc counts: the allocators round each block up, which it does not see (by
    # RSS, 50,000 heads take about 2.2 KB each: benchmarks/pull_memory.py --objects 50000 --hit-passes 2).
    assert per_head < charged_per_head < 1.4 * per_head, (per_head, charged_per_head)


@pytest_asyncio.fixture(loop_scope="module")
async def secure(pulled: PullCdn) -> AsyncIterator[tuple[hit_server.HitServer, list[bytes]]]:
    """The https site's hit server beside the plain one, and the request targets it answered from a stream's fields
    (answer_stream gave the answer itself, not a decision for the stream's HTTP/1.1 side)."""
    assert pulled.cdn.site.hits is not None
    server = hit_server.HitServer(pulled.cdn.app, pulled.cdn.site.hits.web_server, secure=True)
    answered: list[bytes] = []
    answer_stream = server.answer_stream

    def recorded(request: Any, head_only: bool, host: bytes, path: bytes) -> Any:
        answer = answer_stream(request, head_only, host, path)
        if isinstance(answer, tuple):
            answered.append(path)
        return answer

    server.answer_stream = recorded  # type: ignore[method-assign]
    yield server, answered
    server.stop()


def comparable_h2(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """`comparable` of an answer over either protocol: without the fields HTTP/2 has none of (RFC 9113 8.2.2)."""
    headers = sorted((k.lower(), v) for k, v in response.headers.items()
                     if k.lower() not in PER_REQUEST | {"connection", "keep-alive", "transfer-encoding"})
    return response.status, headers, response.body


def other_copy(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """`comparable_h2` of an answer from another copy of the URL (its https one, fetched apart): without the
    fields that tell that copy's own age (Age, Date, Cache-Status's ttl)."""
    status, headers, body = comparable_h2(response)
    return status, [(k, v) for k, v in headers if k not in ("age", "date", "cache-status")], body


async def test_a_fresh_hit_over_http_2_is_answered_from_the_streams_fields_as_over_http_1_1(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    server, from_fields = secure
    etag = '"h2"'
    await pulled.warm_secure(server, "/h2.bin", **LONG, ETag=etag, **{"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"})
    assert pulled.cdn.site.hits is not None  # the application's answers over TLS: a hit server that answers none
    application = hit_server.HitServer(pulled.cdn.app, pulled.cdn.site.hits.web_server, secure=True, answer_hits=False)
    plain = MemoryHttp11(application)
    client = H2InProcess(server)
    path = f"/{ZONE}/h2.bin"
    fresh = pulled.stored("/h2.bin", "https").freshness
    clock.now = fresh.response_time + 2.5
    cases: list[tuple[str, dict[str, str], int]] = [
        ("GET", {}, 200), ("HEAD", {}, 200), ("GET", {"If-None-Match": etag}, 304),
        ("GET", {"Range": "bytes=0-9"}, 206), ("GET", {"Range": "bytes=-7"}, 206), ("HEAD", {"Range": "bytes=5-6"}, 206),
        ("GET", {"Range": "bytes=0-1,4-5"}, 200)]
    for method, headers, status in cases:
        from_fields.clear()
        over_h2 = await client.get(path, [(k.lower(), v) for k, v in headers.items()], method)
        over_http_1_1 = await plain.request(path, method, **headers)  # the application's answer
        assert from_fields == [path.encode()], (method, headers)
        assert over_h2.status == status, (method, headers)
        assert comparable_h2(over_h2) == comparable_h2(over_http_1_1), (method, headers)
        assert over_h2.headers["age"] == str(int(fresh.age(clock.now)))
        assert over_h2.headers["x-request-id"]
    # Age and Cache-Status tick with the clock: the fields of the second are made again.
    ages = []
    for _ in range(3):
        clock.now += 1.0
        answer = await client.get(path, [])
        ages.append((answer.headers["age"], answer.headers["cache-status"]))
        assert answer.body == BODY
    assert ages == [(str(int(fresh.age(now))), f"assetcdn; hit; ttl={int(fresh.lifetime - fresh.age(now))}")
                    for now in (clock.now - 2, clock.now - 1, clock.now)]
    application.stop()


async def test_over_http_2_directives_and_stale_entries_go_to_the_application_and_a_miss_is_filled(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    server, from_fields = secure
    await pulled.warm_secure(server, "/h2-stale.bin", **{"Cache-Control": "max-age=5"})
    client = H2InProcess(server)
    path = f"/{ZONE}/h2-stale.bin"
    clock.now = pulled.stored("/h2-stale.bin", "https").freshness.response_time + 1
    assert (await client.get(path, [])).headers["x-cache"] == "HIT" and from_fields == [path.encode()]
    from_fields.clear()
    asked = pulled.origin.count("/h2-stale.bin")
    # Request directives, then a stale entry: each answered by the application, as over HTTP/1.1; then a miss,
    # filled on the hit path by the stream's HTTP/1.1 side (assetcdn/edge/fastpath/pull_fill.py).
    directed = await client.get(path, [("cache-control", "max-age=0")])
    assert directed.status == 200 and directed.body == BODY
    clock.now += 10
    stale = await client.get(path, [])
    assert stale.status == 200 and stale.body == BODY and stale.headers["x-cache"] != "HIT"
    pulled.origin.answer("/h2-miss.bin", b"missed", headers={"Content-Type": "text/plain", **LONG})
    filled = server.fills.filled
    missed = await client.get(f"/{ZONE}/h2-miss.bin", [])
    assert (missed.status, missed.body, missed.headers["x-cache"]) == (200, b"missed", "MISS")

    async def filled_here() -> bool:  # counted once its answer is written, which may be after the client has it
        return server.fills.filled == filled + 1

    await wait_until(filled_here, "the miss filled on the hit path")
    assert from_fields == []
    assert pulled.origin.count("/h2-stale.bin") == asked + 2  # the directive's and the stale entry's revalidations


async def test_a_pull_hits_http_2_fields_are_charged_to_the_memory_budget(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    server, _ = secure
    names = [f"/h2-charged/{n}.bin" for n in range(8)]
    for name in names:
        await pulled.warm_secure(server, name, **LONG)
    clock.now = pulled.stored(names[-1], "https").freshness.response_time + 1
    memory = pulled.cdn.node.cache.memory
    client = H2InProcess(server)
    for name in names:  # the head is held and charged as over HTTP/1.1, with its 304's fields (made per request)
        assert (await client.get(f"/{ZONE}{name}", [("if-none-match", "*")])).status == 304
    charged, held = memory.heads_bytes, server.head_bytes
    heads = [head for view in server.hosts.values() for head in view.pulls.values()]
    assert len(heads) == len(names) and all(head.h2_block is None for head in heads)
    for name in names:
        assert (await client.get(f"/{ZONE}{name}", [])).body == BODY
    made = sum(fields_cost(head.h2_fields) for head in heads)
    assert made > 0 and memory.heads_bytes - charged == server.head_bytes - held == made
    clock.now += 1  # the next second's fields replace the first ones: nothing more is charged
    for name in names:
        assert (await client.get(f"/{ZONE}{name}", [])).body == BODY
    assert memory.heads_bytes - charged == made
    server._forget_hosts()
    assert memory.heads_bytes == charged - held


async def test_the_http_and_https_sites_keep_at_most_hot_heads_max_heads_together(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`edge.hot_heads_max` bounds the prepared heads per worker: its http and https sites' hit servers share it, as
    they share the heads' room in the memory budget, each keeping its part, and both still answer every hit."""
    server, _ = secure
    hits = pulled.cdn.site.hits
    assert hits is not None and pulled.cdn.node.cache.memory.head_holders == 2
    names = [f"/both-sites/{n}.bin" for n in range(4)]
    for name in names:
        await pulled.warm(name, **LONG)
        await pulled.warm_secure(server, name, **LONG)
    clock.now = max(pulled.stored(name, scheme).freshness.response_time for name in names
                    for scheme in ("http", "https")) + 1
    most = 4
    for each in (hits, server):
        monkeypatch.setattr(each, "max_hits", most)
        each._forget_hosts()  # the heads the module's other tests left
    conn, tls = await pulled.cdn.connect(), MemoryHttp11(server)
    served, served_tls = pulled.served, server.served
    for _ in range(2):
        for name in names:
            for client in (conn, tls):
                answer = await client.request(f"/{ZONE}{name}")
                assert (answer.status, answer.header("X-Cache"), answer.body) == (200, "HIT", BODY)
                assert hits.prepared + server.prepared <= most, (hits.prepared, server.prepared)
    assert (pulled.served, server.served) == (served + 2 * len(names), served_tls + 2 * len(names))  # on the hit path
    assert hits.prepared == server.prepared == most // 2


async def test_if_none_match_star_is_a_304_on_both_paths_for_a_response_without_an_etag(pulled: PullCdn,
                                                                                        clock: Clock) -> None:
    """`If-None-Match: *` is false whenever the URL has a current representation (RFC 9110 13.1.2), an ETag or
    not: the hit path answered 304 while the application sent the whole body."""
    conn = await pulled.warm("/star.bin", **LONG)
    plain = await pulled.cdn.plain()
    clock.now = pulled.stored("/star.bin").freshness.response_time + 1
    for method in ("GET", "HEAD"):
        fast = await conn.request(f"/{ZONE}/star.bin", method, **{"If-None-Match": "*"})
        slow = await plain.request(f"/{ZONE}/star.bin", method, **{"If-None-Match": "*"})
        assert comparable(fast) == comparable(slow)
        assert (slow.status, slow.body, slow.header("Content-Length")) == (304, b"", None)
        assert slow.header("Age") == "1" and slow.header("X-Cache") == "HIT"


async def test_a_suffix_range_of_an_empty_body_is_answered_whole_on_both_paths(pulled: PullCdn, clock: Clock) -> None:
    """A suffix range of a stored empty body: a 206 would need a Content-Range for no bytes at all, and both paths
    sent `bytes 0--1/0`, which no client can parse; the Range is ignored instead (RFC 9110 14.2)."""
    pulled.origin.answer("/empty.bin", b"", headers={"Content-Type": "application/octet-stream", **LONG})
    conn = await pulled.cdn.connect()
    assert (await conn.request(f"/{ZONE}/empty.bin")).header("X-Cache") == "MISS"
    await wait_until(lambda: _stored(pulled, "/empty.bin"), "/empty.bin stored")
    plain = await pulled.cdn.plain()
    clock.now = pulled.stored("/empty.bin").freshness.response_time + 1
    served = pulled.served
    for method in ("GET", "HEAD"):
        fast = await conn.request(f"/{ZONE}/empty.bin", method, Range="bytes=-5")
        slow = await plain.request(f"/{ZONE}/empty.bin", method, Range="bytes=-5")
        assert comparable(fast) == comparable(slow)
        assert (slow.status, slow.body, slow.header("Content-Range"), slow.header("Content-Length")) == (
            200, b"", None, "0")
    assert pulled.served == served + 2
    assert (await plain.request(f"/{ZONE}/empty.bin", Range="bytes=0-")).status == 416  # no first byte to start at


async def _stored(pulled: PullCdn, name: str) -> bool:
    return stored_url(pulled.cdn.node, ZONE, name) is not None


async def test_an_origins_hsts_never_reaches_clients_on_the_default_host(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    """HSTS is a whole host's policy (RFC 6797 8.1), and the default host is every zone's: with the edge's own HSTS
    off, one zone's origin set it there for all of them (`includeSubDomains`: for every tenant host below it too,
    which browsers then refuse over plain HTTP for a year), or turned it off with `max-age=0`. On the zone's own
    host it is the origin's own, as over plain HTTP and HTTP/2, on the fill, the hits and the application's answers."""
    server, from_fields = secure
    policy = "max-age=31536000; includeSubDomains"
    reporting = '{"report_to": "zone", "max_age": 31536000, "success_fraction": 1.0}'  # NEL: the host's too
    pulled.origin.answer("/hsts.bin", BODY, headers={
        **LONG, "Content-Type": "application/octet-stream", "ETag": '"s"', "Strict-Transport-Security": policy,
        "NEL": reporting})
    conn = await pulled.cdn.connect()
    plain = await pulled.cdn.plain()
    client = H2InProcess(server)
    path = f"/{ZONE}/hsts.bin"
    fill = await conn.request(path)
    await wait_until(lambda: _stored(pulled, "/hsts.bin"), "/hsts.bin stored")
    clock.now = pulled.stored("/hsts.bin").freshness.response_time + 1
    default_host = {
        "fill": fill, "hit": await conn.request(path), "304": await conn.request(path, **{"If-None-Match": '"s"'}),
        "application's": await plain.request(path, **{"Cache-Control": "max-age=60"}),
        "HTTP/2 fill": await client.get(path, []),  # an https URL's answer is kept apart from plain HTTP's
        "HTTP/2 hit": await client.get(path, []), "HTTP/2 304": await client.get(path, [("if-none-match", '"s"')]),
        "HTTP/2 206": await client.get(path, [("range", "bytes=0-9")])}
    assert from_fields == [path.encode()] * 3
    assert {what: (a.status, a.header("x-cache")) for what, a in default_host.items()} == {
        "fill": (200, "MISS"), "hit": (200, "HIT"), "304": (304, "HIT"), "application's": (200, "HIT"),
        "HTTP/2 fill": (200, "MISS"), "HTTP/2 hit": (200, "HIT"), "HTTP/2 304": (304, "HIT"), "HTTP/2 206": (206, "HIT")}
    assert {what: a.header("strict-transport-security") for what, a in default_host.items()} == \
        dict.fromkeys(default_host)
    assert {what: a.header("nel") for what, a in default_host.items()} == dict.fromkeys(default_host)
    own_host = {"hit": await conn.request("/hsts.bin", host=TENANT_HOST),
                "HTTP/2 hit": await client.get("/hsts.bin", [], authority=TENANT_HOST)}
    assert {what: (a.header("x-cache"), a.header("strict-transport-security")) for what, a in own_host.items()} == \
        dict.fromkeys(own_host, ("HIT", policy))
    assert {what: a.header("nel") for what, a in own_host.items()} == dict.fromkeys(own_host, reporting)


# What an origin says to this CDN alone: its caching directives for surrogates and its purge tags.
SURROGATE_FIELDS = ("surrogate-control", "cache-tag", "surrogate-key")


async def test_the_fields_an_origin_meant_for_the_cdn_reach_no_client_on_any_path(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    """Surrogate-Control, Cache-Tag and Surrogate-Key are the origin's word to the CDN: its caching directives and
    its purge tags, which often name its inner workings (a customer's id, a build). Every answer passed them on to
    browsers: the hit path's fill and hits, the application's answers (from memory and from the disk tier, its 416)
    and HTTP/2's. None of them carries them now, yet the edge still reads them: the copy is kept
    for Surrogate-Control's max-age though Cache-Control says `no-store`, and a purge of either field's tag reaches
    it. CDN-Cache-Control, which RFC 9213 lets a cache pass on, still goes out."""
    server, from_fields = secure
    name = "/surrogate.bin"
    path = f"/{ZONE}{name}"
    pulled.origin.answer(name, BODY, headers={
        "Content-Type": "application/octet-stream", "ETag": '"sc"', "Cache-Control": "no-store",
        "Surrogate-Control": "max-age=600", "Cache-Tag": "customer-4711, build-88",
        "Surrogate-Key": "internal-key", "X-Kept": "kept"})
    conn = await pulled.cdn.connect()
    plain = await pulled.cdn.plain()
    client = H2InProcess(server)
    fill = await conn.request(path)
    await wait_until(lambda: _stored(pulled, name), f"{name} stored")
    clock.now = pulled.stored(name).freshness.response_time + 1
    answers = {
        "fill": fill, "hit": await conn.request(path), "304": await conn.request(path, **{"If-None-Match": '"sc"'}),
        "206": await conn.request(path, Range="bytes=0-9"),
        "application's": await plain.request(path, **{"Cache-Control": "max-age=60"}),
        "application's 416": await plain.request(path, Range="bytes=9999999-"),
        "HTTP/2 fill": await client.get(path, []),  # an https URL's answer is kept apart from plain HTTP's
        "HTTP/2 hit": await client.get(path, []), "HTTP/2 304": await client.get(path, [("if-none-match", '"sc"')]),
        "HTTP/2 206": await client.get(path, [("range", "bytes=0-9")])}
    assert from_fields == [path.encode()] * 3
    key = pull_key(ZONE, name, "")
    pulled.cdn.node.cache.flush_writes()  # on disk: no longer held by the write-behind queue for its batch
    assert pulled.cdn.node.cache.memory.discard(key)  # what an eviction does: the next answer is the disk tier's
    answers["disk"] = await conn.request(path)
    assert {what: (a.status, a.header("x-cache")) for what, a in answers.items()} == {
        "fill": (200, "MISS"), "hit": (200, "HIT"), "304": (304, "HIT"), "206": (206, "HIT"),
        "application's": (200, "HIT"), "application's 416": (416, "HIT"),
        "HTTP/2 fill": (200, "MISS"), "HTTP/2 hit": (200, "HIT"), "HTTP/2 304": (304, "HIT"),
        "HTTP/2 206": (206, "HIT"), "disk": (200, "HIT")}
    assert {what: [field for field in SURROGATE_FIELDS if a.header(field) is not None]
            for what, a in answers.items()} == dict.fromkeys(answers, [])
    assert {what: a.header("x-kept") for what, a in answers.items()} == dict.fromkeys(answers, "kept")
    asked = pulled.origin.count(name)
    for tag in ("build-88", "internal-key"):  # the tags still reach the copy: each purge makes the next a MISS
        resp = await pulled.cdn.control.post("/api/purge", json={"tags": [tag]}, headers=PURGE)
        assert resp.status == 200, await resp.text()
        missed = await conn.request(path)
        assert (missed.header("x-cache"), missed.header("cache-tag")) == ("MISS", None), tag
        await wait_until(lambda: _stored(pulled, name), f"{name} stored again")
    assert pulled.origin.count(name) >= asked + 2


async def test_cdn_cache_control_is_passed_on_to_clients(pulled: PullCdn, clock: Clock) -> None:
    """RFC 9213 lets a cache pass CDN-Cache-Control on (a CDN in front of this one may be what it targets): unlike
    Surrogate-Control, it goes out on the fill and the hits."""
    conn = await pulled.warm("/cdn-cache-control.bin", **{"CDN-Cache-Control": "max-age=600",
                                                          "Surrogate-Control": "max-age=60"})
    clock.now = pulled.stored("/cdn-cache-control.bin").freshness.response_time + 1
    hit = await conn.request(f"/{ZONE}/cdn-cache-control.bin")
    assert (hit.header("X-Cache"), hit.header("CDN-Cache-Control"), hit.header("Surrogate-Control")) == (
        "HIT", "max-age=600", None)


def setting_cookies(*cookies: str) -> Handler:
    """An origin route: a kept answer (ETag "c") that sets `cookies`."""
    async def answer(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=BODY, headers={**LONG, "Content-Type": "application/octet-stream", "ETag": '"c"'})
        for cookie in cookies:
            response.headers.add("Set-Cookie", cookie)
        return response

    return answer


async def filled_on_the_hit_path(cdn: HitCdn, zone: str, conn: RawConnection, host: str, clock: Clock) -> Response:
    """`/cookies.bin` of `zone` asked on `host`, a miss the hit path fills: its answer, once the copy is kept and the
    fill counted (once its answer is out), the clock a second past the copy's arrival."""
    hits = cdn.site.hits
    assert hits is not None
    filled = hits.fills.filled
    fill = await conn.request("/cookies.bin", host=host)

    async def kept() -> bool:
        return stored_url(cdn.node, zone, "/cookies.bin") is not None

    async def filled_here() -> bool:
        return hits.fills.filled == filled + 1

    await wait_until(kept, "/cookies.bin stored")
    await wait_until(filled_here, "the miss filled on the hit path")
    clock.now = stored_url(cdn.node, zone, "/cookies.bin").freshness.response_time + 1  # type: ignore[union-attr]
    return fill


async def test_a_kept_answers_cookies_are_judged_for_each_host_it_goes_out_on(pulled: PullCdn, clock: Clock) -> None:
    """A zone that keeps answers that set cookies (`StoreSetCookie`) has one copy for all its hosts. On its tenant
    host a cookie the origin set with `Domain=<base domain>` went out, on the hit path's fill and hits as in the
    application's answers: browsers then sent it to every zone's tenant host. Each host's answer now carries the
    cookies that host may set: on the tenant host none naming another host, on the default host (every zone's) none
    with a Domain, on the zone's custom domain every one the origin sent but those for the base domain or a domain
    above it."""
    node, hits = pulled.cdn.node, pulled.cdn.site.hits
    assert hits is not None
    zone, domain = "pullfast-cookies", "cookies.pullfast-brand.example"
    url = str(node.config.pull_zones[ZONE].origin.url)
    resp = await pulled.cdn.control.post("/api/core/zones", headers=ACCOUNT, json={
        "Name": zone, "Origin": {"Url": url, "StoreSetCookie": True}})
    assert resp.status == 201, await resp.text()
    try:
        resp = await pulled.cdn.control.post(f"/api/core/zones/{zone}/domains", json={"Hostname": domain},
                                             headers=ACCOUNT)
        assert resp.status == 201, await resp.text()

        async def arrived() -> bool:
            return zone in node.config.pull_zones and node.config.zone_for_host(domain) == zone

        await wait_until(arrived, "the zone and its custom domain reaching the edge")
        tenant = f"{zone}.{node.config.base_domain}"
        tossed, host_only, own = f"a=1; Domain={node.config.base_domain}", "b=2", f"c=3; Domain=.{tenant}"

        pulled.origin.route("/cookies.bin", setting_cookies(tossed, host_only, own))
        conn, plain = await pulled.cdn.connect(), await pulled.cdn.plain()
        fill = await filled_on_the_hit_path(pulled.cdn, zone, conn, tenant, clock)
        served = pulled.served
        path = f"/{zone}/cookies.bin"
        answers = {
            (tenant, "fill"): fill, (tenant, "hit"): await conn.request("/cookies.bin", host=tenant),
            (tenant, "304"): await conn.request("/cookies.bin", host=tenant, **{"If-None-Match": '"c"'}),
            (tenant, "application's"): await plain.request("/cookies.bin", host=tenant),
            (domain, "hit"): await conn.request("/cookies.bin", host=domain),
            (domain, "application's"): await plain.request("/cookies.bin", host=domain),
            ("default", "hit"): await conn.request(path), ("default", "304"): await conn.request(
                path, **{"If-None-Match": '"c"'}),
            ("default", "application's"): await plain.request(path)}
        assert pulled.served == served + 5  # the hits above, on the hit path
        expected = {tenant: [host_only, own], domain: [host_only, own], "default": [host_only]}
        assert {what: (answer.status, answer.header("X-Cache"), answer.headers.getall("Set-Cookie", []))
                for what, answer in answers.items()} == {
            (host, how): (304 if how == "304" else 200, "MISS" if how == "fill" else "HIT", expected[host])
            for host, how in answers}
    finally:
        resp = await pulled.cdn.control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT)
        assert resp.status == 200, await resp.text()


async def test_a_kept_answers_cookie_for_a_domain_holding_the_base_domain_is_left_out_on_custom_domains(
        tmp_path: Path, clock: Clock) -> None:
    """A custom domain beside the base domain (`shop.<parent>` for `cdn.<parent>`) or above it (`<parent>`) passed on
    the kept answer's `Set-Cookie` with `Domain=<parent>` on the hit path's fill and hits, and browsers then sent that
    cookie to every zone's tenant host. Now it is left out there as in the application's answers; the custom domain's
    own and host-only cookies still go out."""
    parent = "pullfast-brand.example"
    async with pull_zone_on_hit_cdn(tmp_path, ZONE, store_set_cookie=True,
                                    ASSETCDN_DOMAINS_BASE_DOMAIN=f"cdn.{parent}") as (cdn, origin):
        node, hits = cdn.node, cdn.site.hits
        assert hits is not None
        beside, above, tenant = f"shop.{parent}", parent, f"{ZONE}.cdn.{parent}"
        for domain in (beside, above):
            resp = await cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain},
                                          headers=ACCOUNT)
            assert resp.status == 201, await resp.text()

        async def arrived() -> bool:
            return all(node.config.zone_for_host(domain) == ZONE for domain in (beside, above))

        await wait_until(arrived, "the custom domains reaching the edge")
        tossed, host_only, shop = f"a=1; Domain=.{parent.upper()}", "b=2", f"c=3; Domain={beside}"

        origin.route("/cookies.bin", setting_cookies(tossed, host_only, shop))
        conn, plain = await cdn.connect(), await cdn.plain()
        fill = await filled_on_the_hit_path(cdn, ZONE, conn, beside, clock)
        served = hits.served
        answers = {
            (beside, "fill"): fill, (beside, "hit"): await conn.request("/cookies.bin", host=beside),
            (beside, "304"): await conn.request("/cookies.bin", host=beside, **{"If-None-Match": '"c"'}),
            (beside, "application's"): await plain.request("/cookies.bin", host=beside),
            (above, "hit"): await conn.request("/cookies.bin", host=above),
            (above, "application's"): await plain.request("/cookies.bin", host=above),
            (tenant, "hit"): await conn.request("/cookies.bin", host=tenant)}
        assert hits.served == served + 4  # the hits above, on the hit path
        expected = {beside: [host_only, shop], above: [host_only, shop], tenant: [host_only]}
        assert {what: (answer.status, answer.header("X-Cache"), answer.headers.getall("Set-Cookie", []))
                for what, answer in answers.items()} == {
            (host, how): (304 if how == "304" else 200, "MISS" if how == "fill" else "HIT", expected[host])
            for host, how in answers}


async def lines(conn: RawConnection, path: str, method: str, fields: list[tuple[str, str]]) -> Response:
    """The answer to a request whose header fields are `fields`, lines of one name repeated as they are given."""
    head = [f"{method} {path} HTTP/1.1", "Host: edge.test", *(f"{name}: {value}" for name, value in fields)]
    await conn.send(("\r\n".join(head) + "\r\n\r\n").encode())
    return await conn.response()


async def test_several_lines_of_a_condition_or_a_range_are_read_as_one_field_on_every_path(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    """Field lines of one name are one comma-separated list (RFC 9110 5.3): `If-None-Match` naming the stored ETag
    on its second line is a 304 (the hit path hands such a request over, and the application read the first line
    only: the whole body, every time). Range, If-Range and If-Modified-Since are no lists: two lines of one are
    the invalid value they make together, so the range is ignored, the If-Range does not hold and the date is
    ignored (13.1.3), where the first line alone was answered. The same over HTTP/1.1 and HTTP/2."""
    modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    conn = await pulled.warm("/lines.bin", **LONG, ETag='"v2"', **{"Last-Modified": modified})
    await pulled.warm_secure(secure[0], "/lines.bin", **LONG, ETag='"v2"', **{"Last-Modified": modified})
    plain = await pulled.cdn.plain()
    client = H2InProcess(secure[0])
    path = f"/{ZONE}/lines.bin"
    clock.now = pulled.stored("/lines.bin").freshness.response_time + 1
    cases: list[tuple[list[tuple[str, str]], int]] = [
        ([("If-None-Match", '"v1"'), ("If-None-Match", '"v2"')], 304),
        ([("If-None-Match", '"v1"'), ("If-None-Match", '"v2"'), ("Range", "bytes=0-9")], 304),
        ([("If-None-Match", '"v1"'), ("If-None-Match", '"v3"')], 200),
        ([("Range", "bytes=0-9"), ("Range", "bytes=20-29")], 200),
        ([("Range", "bytes=0-9"), ("If-Range", '"v2"'), ("If-Range", '"v2"')], 200),
        ([("If-Modified-Since", modified), ("If-Modified-Since", modified)], 200),
        ([("If-Modified-Since", f"{modified}, {modified}")], 200),
        ([("If-Modified-Since", modified)], 304),
    ]
    for method in ("GET", "HEAD"):
        for fields, status in cases:
            fast = await lines(conn, path, method, fields)
            slow = await lines(plain, path, method, fields)
            assert (slow.status, len(slow.body)) == (status, len(BODY) if status == 200 and method == "GET" else 0), (
                method, fields)
            assert comparable(fast) == comparable(slow), (method, fields)
            over_h2 = await client.get(path, [(name.lower(), value) for name, value in fields], method)
            assert other_copy(over_h2) == other_copy(slow), (method, fields)
    assert pulled.origin.count("/lines.bin") == 2  # once per scheme: an https URL is kept apart


async def test_an_etag_holding_a_comma_is_one_entity_tag_of_if_none_match(
        pulled: PullCdn, clock: Clock, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    """An entity-tag's opaque part may hold a comma (RFC 9110 8.8.3: etagc is any visible character but DQUOTE):
    If-None-Match was split at every comma, so `"a,b"` never matched the stored `"a,b"` and a client revalidating
    it got the whole body each time, on every path; `"a"` or `"b"` must not match it either."""
    conn = await pulled.warm("/comma.bin", **LONG, ETag='"a,b"')
    await pulled.warm_secure(secure[0], "/comma.bin", **LONG, ETag='"a,b"')
    plain = await pulled.cdn.plain()
    client = H2InProcess(secure[0])
    path = f"/{ZONE}/comma.bin"
    clock.now = pulled.stored("/comma.bin").freshness.response_time + 1
    served = pulled.served
    for value, status in (('"a,b"', 304), ('W/"a,b"', 304), ('"x", "a,b"', 304), ('"a", "b"', 200), ('"a,b,c"', 200)):
        fast = await conn.request(path, **{"If-None-Match": value})
        slow = await plain.request(path, **{"If-None-Match": value})
        over_h2 = await client.get(path, [("if-none-match", value)])
        assert slow.status == status, value
        assert comparable(fast) == comparable(slow), value
        assert other_copy(over_h2) == other_copy(slow), value
    assert pulled.served == served + 5


async def test_a_range_unit_is_compared_case_insensitively(pulled: PullCdn, clock: Clock) -> None:
    """Range unit names are case-insensitive (RFC 9110 14.1): `Bytes=0-9` is the range `bytes=0-9` is, on both
    paths, not a unit the edge ignores."""
    conn = await pulled.warm("/unit.bin", **LONG)
    plain = await pulled.cdn.plain()
    clock.now = pulled.stored("/unit.bin").freshness.response_time + 1
    for unit in ("Bytes", "BYTES"):
        fast = await conn.request(f"/{ZONE}/unit.bin", Range=f"{unit}=0-9")
        slow = await plain.request(f"/{ZONE}/unit.bin", Range=f"{unit}=0-9")
        assert comparable(fast) == comparable(slow)
        assert (slow.status, slow.body, slow.header("Content-Range")) == (206, BODY[:10], f"bytes 0-9/{len(BODY)}")


CHALLENGE_TOKEN = "pullHost-challenge_token0"
KEY_AUTHORIZATION = CHALLENGE_TOKEN + ".thumbprint-of-the-account-key"


async def push_challenge(cdn: HitCdn, token: str, key_authorization: str) -> None:
    """A TLS state answering the ACME HTTP-01 challenge `token`, pushed to the edge as control pushes one (signed,
    POST /_cluster/tls); its serial above control's own, which the edge may pull meanwhile."""
    (member,) = cdn.control.app[REGISTRY].edges.values()
    body = orjson.dumps(TlsState(1000, {token: key_authorization}, ()).to_message())
    headers = {"Content-Type": "application/json",
               **sign_request(SECRETS.cluster_secret, "POST", PREFIX + TLS_STATE_PATH, body, audience=member.name)}
    async with aiohttp.ClientSession() as http:
        resp = await http.post(member.url + PREFIX + TLS_STATE_PATH, data=body, headers=headers)
        assert resp.status == 200, await resp.text()
    assert cdn.node.tls.challenge(token) == key_authorization


async def test_the_edges_own_paths_on_the_zones_own_host_are_the_edges_never_the_origins(
        pulled: PullCdn, secure: tuple[hit_server.HitServer, list[bytes]]) -> None:
    """ACME challenges, the API, /metrics, the dashboard and the cluster paths are the edge's on every host (a pull
    zone's own host takes every other path for its origin's): the hit path filled them from the origin on the zone's
    tenant host or custom domain, and kept them, so a CA validating the zone's custom domain was answered the
    origin's page (no certificate) and a load balancer's health check on that host the origin's. The hit path, over
    HTTP/1.1 and HTTP/2, answers them as the application does, and the origin is never asked."""
    server, _ = secure
    await push_challenge(pulled.cdn, CHALLENGE_TOKEN, KEY_AUTHORIZATION)
    challenge = f"/.well-known/acme-challenge/{CHALLENGE_TOKEN}"
    expected = {challenge: 200, "/.well-known/acme-challenge/other-token": 404, "/api/health": 200,
                "/metrics": 401, "/_cluster/push": 404}
    for path in expected:
        pulled.origin.answer(path, b"the origin's page", headers={**LONG, "Content-Type": "text/plain"})
    conn = await pulled.cdn.connect()
    client = H2InProcess(server)
    for path, status in expected.items():
        for answer in (await conn.request(path, host=TENANT_HOST), await conn.request(path, host=TENANT_HOST),
                       await client.get(path, [], authority=TENANT_HOST)):
            assert (answer.status, answer.header("x-cache")) == (status, None), path
            assert b"the origin's page" not in answer.body, path
    challenged = await conn.request(challenge, host=TENANT_HOST.upper() + ":80")
    assert (challenged.status, challenged.body) == (200, KEY_AUTHORIZATION.encode())
    assert challenged.header("Cache-Control") == "no-store"
    assert not any(pulled.origin.requests(path) for path in expected)
    # Every other path of that host is the origin's: /.well-known/ beside the challenges too.
    pulled.origin.answer("/.well-known/security.txt", b"Contact: mailto:security@origin.test",
                         headers={**LONG, "Content-Type": "text/plain"})
    own = await conn.request("/.well-known/security.txt", host=TENANT_HOST)
    assert (own.status, own.header("x-cache"), own.body) == (200, "MISS", b"Contact: mailto:security@origin.test")


async def test_a_headers_rule_for_every_path_leaves_the_acme_challenge_answer_as_it_is(pulled: PullCdn) -> None:
    """An ACME challenge's answer is the edge's, not a zone's delivery (docs/https.md: `text/plain`, `Cache-Control:
    no-store`): a `_headers` rule for `/*` gave it, on a pull zone's own host and everywhere, the rule's year of
    `public` caching and its other fields, so that a shared cache on the way could keep a token's 404, or an answer
    the CA needs fresh, for a year. Its answer, 200 or 404, keeps its own fields whatever the rules say."""
    await push_challenge(pulled.cdn, CHALLENGE_TOKEN, KEY_AUTHORIZATION)
    resp = await pulled.cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": "/*\n  Cache-Control: public, max-age=31536000\n  X-Rule: applied\n"})
    assert resp.status == 200, await resp.text()
    pulled.origin.answer("/ruled.txt", b"the origin's page", headers={**LONG, "Content-Type": "text/plain"})
    conn = await pulled.cdn.connect()

    async def applied() -> bool:
        return (await conn.request("/ruled.txt", host=TENANT_HOST)).header("X-Rule") == "applied"

    await wait_until(applied, "rules reaching the edge")
    challenge = f"/.well-known/acme-challenge/{CHALLENGE_TOKEN}"
    for path, status in ((challenge, 200), ("/.well-known/acme-challenge/other-token", 404)):
        for host in (TENANT_HOST, "localhost"):
            answer = await conn.request(path, host=host)
            assert answer.status == status, (path, host)
            assert (answer.header("Cache-Control"), answer.header("X-Rule")) == ("no-store", None), (path, host)
    assert not pulled.origin.requests(challenge)


async def test_a_rules_etag_is_the_one_conditions_are_compared_with_on_both_paths(pulled: PullCdn, clock: Clock) -> None:
    """A `_headers` rule may set or detach a pull zone path's ETag, and the answer then carries the rule's: the
    conditions must be compared with that one, the ETag its clients hold (docs/api-guide.md, rules). Both paths
    compared them with the origin's stored ETag: a client sending back the rule's ETag never got a 304 (nor its
    range under If-Range), while one sending the origin's got a 304 naming another ETag; a detached ETag still
    matched the origin's."""
    conn = await pulled.warm("/etag-rule.bin", **LONG, ETag='"v1"')
    await pulled.warm("/etag-detached.bin", **LONG, ETag='"v1"')
    resp = await pulled.cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers",
        "Content": f'/{ZONE}/etag-rule.bin\n  ETag: "by-rule"\n/{ZONE}/etag-detached.bin\n  ! ETag\n'})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return (await conn.request(f"/{ZONE}/etag-rule.bin")).header("ETag") == '"by-rule"'

    await wait_until(applied, "rules reaching the edge")
    plain = await pulled.cdn.plain()
    clock.now = pulled.stored("/etag-rule.bin").freshness.response_time + 1
    path, detached = f"/{ZONE}/etag-rule.bin", f"/{ZONE}/etag-detached.bin"
    served = pulled.served
    for value, status in (('"by-rule"', 304), ('W/"by-rule"', 304), ('"v1"', 200)):
        fast = await conn.request(path, **{"If-None-Match": value})
        slow = await plain.request(path, **{"If-None-Match": value})
        assert (slow.status, slow.header("ETag")) == (status, '"by-rule"'), value
        assert comparable(fast) == comparable(slow), value
    for value, status in (('"v1"', 200), ("*", 304)):
        fast = await conn.request(detached, **{"If-None-Match": value})
        slow = await plain.request(detached, **{"If-None-Match": value})
        assert (slow.status, slow.header("ETag")) == (status, None), value
        assert comparable(fast) == comparable(slow), value
    assert pulled.served == served + 5
    # The application's own conditions (the hit path hands them over): If-Range and a request's directives.
    ranged = await conn.request(path, **{"Range": "bytes=0-9", "If-Range": '"by-rule"'})
    assert (ranged.status, ranged.body) == (206, BODY[:10])
    whole = await conn.request(path, **{"Range": "bytes=0-9", "If-Range": '"v1"'})
    assert (whole.status, whole.body) == (200, BODY)
    directed = await conn.request(path, **{"If-None-Match": '"by-rule"', "Cache-Control": "max-stale=60"})
    assert (directed.status, directed.body, directed.header("X-Cache")) == (304, b"", "HIT")
    assert (await conn.request(path, **{"If-None-Match": '"v1"', "Cache-Control": "max-stale=60"})).status == 200
    assert [seen.method for seen in pulled.origin.requests("/etag-rule.bin")] == ["GET"]
