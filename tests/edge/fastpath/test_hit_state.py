"""What a hit depends on, over raw sockets against a real edge: overwrites, purges and deletes take
effect on the next request (also under concurrent load), `_headers` and `_redirects` rules, the head
deadline and idle limit, large bodies sent from the disk tier's file, and exact metrics and
delivery-log counts."""

from __future__ import annotations

import asyncio
import contextlib
import os

from assetcdn.edge.cache.tags import path_tag
from tests.support.cdn import ZONE
from tests.support.control import ACCOUNT, METRICS
from tests.support.footprint import traced_per_item
from tests.support.hit_cdn import READ_S, HitCdn, HitCdnFactory, RawConnection, request_bytes
from tests.support.images import LOGO_SVG
from tests.support.wait import wait_until

FILE = f"{ZONE}/v1/banners/data.bin"


async def cached(make_hit_cdn: HitCdnFactory, body: bytes, **env: str) -> tuple[HitCdn, RawConnection]:
    cdn = await make_hit_cdn(**env)
    await cdn.upload(FILE, body)
    conn = await cdn.connect()
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "MISS"
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "HIT"
    return cdn, conn


async def test_overwrite_purge_and_delete_take_effect_on_the_next_request(make_hit_cdn: HitCdnFactory) -> None:
    cdn, conn = await cached(make_hit_cdn, b"version one")
    await cdn.upload(FILE, b"version two")
    answer = await conn.request(f"/{FILE}")
    assert (answer.body, answer.header("X-Cache")) == (b"version two", "MISS")
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "HIT"
    await cdn.purge({"urls": [f"/{FILE}"]})
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "MISS"
    await cdn.purge({"tags": ["type-banners"]})
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "MISS"
    await cdn.purge({"purge_everything": True})
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "MISS"
    await cdn.delete(FILE)
    assert (await conn.request(f"/{FILE}")).status == 404


async def test_a_purge_made_by_another_worker_reaches_this_workers_hits(make_hit_cdn: HitCdnFactory) -> None:
    cdn, conn = await cached(make_hit_cdn, b"shared bytes")
    # Another worker of the node purges: it records the purge in the node's shared log only.
    cdn.node.cache.disk.purge_tags([path_tag(FILE)])
    cdn.node.cache._purges.record("tags", [path_tag(FILE)])
    assert (await conn.request(f"/{FILE}")).header("X-Cache") == "MISS"


async def test_under_concurrent_load_every_request_after_an_overwrite_gets_the_new_bytes(
        make_hit_cdn: HitCdnFactory) -> None:
    cdn, _ = await cached(make_hit_cdn, b"old" * 1000)
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, bytes, str]] = []
    stop = asyncio.Event()

    async def hammer() -> None:
        conn = await cdn.connect()
        while not stop.is_set():
            sent = loop.time()
            answer = await conn.request(f"/{FILE}")
            assert answer.status == 200
            seen.append((sent, answer.body, answer.header("X-Cache") or ""))
        conn.close()

    workers = [asyncio.create_task(hammer()) for _ in range(8)]
    await asyncio.sleep(0.3)
    await cdn.upload(FILE, b"new" * 1000)  # returns once this edge holds the new manifest entry
    switched = loop.time()
    await asyncio.sleep(0.3)
    purge_sent = loop.time()
    await cdn.purge({"urls": [f"/{FILE}"]})  # answered once the edge applied it
    purged = loop.time()
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.gather(*workers)
    after = [(body, cache) for sent, body, cache in seen if sent > switched]
    assert after and all(body == b"new" * 1000 for body, _ in after)
    assert sum(1 for sent, _, _ in seen if sent < switched) > 8  # the load really ran before the switch
    # The purge emptied the cache while requests kept coming: one of them (sent after the purge was,
    # possibly before its answer arrived here) missed and refilled it; a body brought back from the
    # disk tier by a concurrent hit would have kept answering HIT instead.
    assert any(cache == "MISS" for sent, _, cache in seen if sent > purge_sent)
    assert any(sent > purged for sent, _, _ in seen)


async def test_header_rules_and_redirects_apply_on_the_hit_path(make_hit_cdn: HitCdnFactory) -> None:
    cdn, conn = await cached(make_hit_cdn, b"ruled")
    rules = f"/{ZONE}/v1/banners/*\n  X-Frame-Options: DENY\n  ! Cache-Tag\n"
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": "_headers", "Content": rules})
    assert resp.status == 200, await resp.text()
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_redirects", "Content": f"/old.bin /{FILE} 301\n/{ZONE}/v1/banners/moved.bin /{FILE} 302\n"})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return bool(cdn.node.config.rules.headers) and bool(cdn.node.config.rules.redirects)

    await wait_until(applied, "rules reaching the edge")
    plain = await cdn.plain()
    for headers in ({}, {"If-None-Match": "*"}, {"Range": "bytes=0-1"}):
        fast, slow = await conn.request(f"/{FILE}", **headers), await plain.request(f"/{FILE}", **headers)
        assert fast.header("X-Frame-Options") == "DENY" and "Cache-Tag" not in fast.headers
        assert fast.header("Content-Security-Policy") == slow.header("Content-Security-Policy")
        assert sorted(fast.headers.getall("Content-Security-Policy", [])) == sorted(
            slow.headers.getall("Content-Security-Policy", []))
        assert (fast.status, fast.header("Content-Type"), fast.body) == (slow.status, slow.header("Content-Type"),
                                                                         slow.body)
    assert fast.header("X-Cache") == "HIT"
    moved = await conn.request("/old.bin")
    assert (moved.status, moved.header("Location")) == (301, f"/{FILE}")
    moved = await conn.request(f"/{ZONE}/v1/banners/moved.bin")
    assert moved.status == 302


async def test_a_head_that_never_completes_is_cut_off_and_idle_connections_end(make_hit_cdn: HitCdnFactory) -> None:
    cdn, conn = await cached(make_hit_cdn, b"x", ASSETCDN_SERVER_HEADER_TIMEOUT_S="1")
    assert await conn.closed_by_server()  # idle after its last answer, past the deadline
    slow = await cdn.connect()
    await slow.send(b"GET /" + FILE.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: ")

    async def drip() -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(40):
                await asyncio.sleep(0.2)
                await slow.send(b"a")

    dripping = asyncio.create_task(drip())

    async def cut_off() -> bool:
        try:
            return await asyncio.wait_for(slow.reader.read(), READ_S) == b""
        except ConnectionResetError:  # closed, and a byte dripped after it came back reset: cut off all the same
            return True

    try:
        assert await cut_off()
    finally:
        dripping.cancel()
    fresh = await cdn.connect()
    assert (await fresh.request(f"/{FILE}")).status == 200  # and others are served as before


async def test_a_body_larger_than_the_memory_tier_is_sent_from_its_file(make_hit_cdn: HitCdnFactory) -> None:
    body = os.urandom(3 * 1024 * 1024 + 5)
    cdn, conn = await cached(make_hit_cdn, body)
    assert cdn.node.cache.memory.bytes < len(body)  # not held in memory
    await conn.send(request_bytes(f"/{FILE}") + request_bytes(f"/{FILE}", Range="bytes=1000-2099999")
                    + request_bytes(f"/{FILE}", "HEAD") + request_bytes(f"/{FILE}"))
    answers = [await conn.response() for _ in range(4)]
    assert [a.status for a in answers] == [200, 206, 200, 200]
    assert answers[0].body == body and answers[3].body == body
    assert answers[1].body == body[1000:2100000]
    assert answers[2].header("Content-Length") == str(len(body)) and answers[2].body == b""
    assert {a.header("X-Cache") for a in answers} == {"HIT"}
    # The application's own delivery of the same file (a STALE hit, a variant's source) streams it
    # from the file through the executor: whole, and any range of it.
    plain = await cdn.plain()
    await plain.send(request_bytes(f"/{FILE}") + request_bytes(f"/{FILE}", Range="bytes=3000000-"))
    whole, tail = await plain.response(), await plain.response()
    assert (whole.status, whole.body == body, tail.status, tail.body) == (200, True, 206, body[3000000:])
    # Purged while cached: the file is gone, the next request fetches it again.
    await cdn.purge({"urls": [f"/{FILE}"]})
    answer = await conn.request(f"/{FILE}")
    assert (answer.header("X-Cache"), answer.body == body) == ("MISS", True)


def _metric(text: str, name: str, *labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(label in line for label in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_hits_are_counted_exactly_in_metrics_and_the_delivery_log(make_hit_cdn: HitCdnFactory) -> None:
    # No flush during the test: what was counted is read where the edge holds it.
    cdn, conn = await cached(make_hit_cdn, b"counted" * 10, ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600")
    plain = await cdn.plain()
    before = await plain.request("/metrics", Authorization=METRICS["Authorization"])
    cdn.node.deliveries.counts.clear()
    cdn.node.deliveries.deliveries.close()
    cdn.node.deliveries.deliveries.closed.clear()
    await conn.send(request_bytes(f"/{FILE}") * 5 + request_bytes(f"/{FILE}", "HEAD")
                    + request_bytes(f"/{FILE}", If_None_Match="*", CF_IPCountry="de"))
    [await conn.response() for _ in range(7)]
    after = await plain.request("/metrics", Authorization=METRICS["Authorization"])
    text_before, text_after = before.body.decode(), after.body.decode()

    def grew(name: str, *labels: str) -> float:
        return _metric(text_after, name, *labels) - _metric(text_before, name, *labels)

    route = 'route="/{path}"'
    assert grew("assetcdn_requests_total", route, 'method="GET"', 'status="200"') == 5
    assert grew("assetcdn_requests_total", route, 'method="HEAD"', 'status="200"') == 1
    assert grew("assetcdn_requests_total", route, 'method="GET"', 'status="304"') == 1
    assert grew("assetcdn_request_seconds_count", route) == 7
    assert grew("assetcdn_edge_cache_total", 'result="HIT"') == 7
    assert grew("assetcdn_bytes_served_total", 'process="edge"') == 5 * 70
    deliveries = cdn.node.deliveries
    counted = {(key[2], key[3], key[4], key[5]): tuple(value) for key, value in deliveries.counts.items()}
    assert counted == {(FILE, "XX", 200, "HIT"): (6, 5 * 70), (FILE, "DE", 304, "HIT"): (1, 0)}
    assert {key[1] for key in deliveries.counts} == {ZONE}
    deliveries.deliveries.close()  # the second's sample: every delivery, as they are fewer than the budget
    records = [entry for entry, rate in deliveries.deliveries.closed if rate == 1.0]
    assert [(r[1], r[2], r[3], r[4]) for r in records] == [("GET", FILE, 200, "HIT")] * 5 + [
        ("HEAD", FILE, 200, "HIT"), ("GET", FILE, 304, "HIT")]
    assert len({r[5] for r in records}) == 7 and all(r[6] == "127.0.0.1" for r in records)


async def test_svg_hits_keep_nosniff_and_the_sandbox(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn()
    path = f"{ZONE}/v1/logos/logo.svg"
    await cdn.upload(path, LOGO_SVG)
    conn = await cdn.connect()
    for expected in ("MISS", "HIT"):
        answer = await conn.request(f"/{path}")
        assert answer.header("X-Cache") == expected
        assert answer.header("X-Content-Type-Options") == "nosniff"
        assert "sandbox" in (answer.header("Content-Security-Policy") or "")


async def test_prepared_hits_stay_within_their_bound_across_hosts(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn(ASSETCDN_EDGE_HOT_HEADS_MAX="2")
    files = {f"{ZONE}/v1/banners/{i}.bin": f"body {i}".encode() for i in range(3)}
    for path, body in files.items():
        await cdn.upload(path, body)
    conn = await cdn.connect()
    hits = cdn.site.hits
    assert hits is not None
    for _ in range(3):
        for host in ("a.test", "b.test", "c.test"):
            for path, body in files.items():
                answer = await conn.request(f"/{path}", host=host)
                assert (answer.status, answer.body) == (200, body)
                assert hits.prepared <= 2
    assert hits.served >= 20  # still answered on the hit path, prepared again as needed


async def test_the_prepared_heads_are_charged_to_the_memory_budget_what_they_hold(make_hit_cdn: HitCdnFactory) -> None:
    """A stored zone's path the hit path answers keeps a prepared head; the memory tier's budget is charged what the
    heads hold (by tracemalloc: within three fifths over, as the 304's head is made only on use and counted ahead).
    The heads are made as a hit makes them, without the requests (whose own records and logs would be counted)."""
    cdn = await make_hit_cdn()
    files = {f"{ZONE}/v1/heads/{i:03d}.bin": f"head {i}".encode() * 50 for i in range(60)}
    for path, body in files.items():
        await cdn.upload(path, body)
    conn = await cdn.connect()
    for path in files:
        assert (await conn.request(f"/{path}")).header("X-Cache") == "MISS"  # stored; its next hit prepares it
    hits, memory = cdn.site.hits, cdn.node.cache.memory
    assert hits is not None
    made, charged = hits.prepared, memory.heads_bytes
    view = hits.hosts[b"edge.test"]  # the Host the connection sends

    def make_heads() -> None:
        for path in files:
            assert hits._prepare(view, f"/{path}".encode()) is not None

    per_head = traced_per_item(make_heads, len(files))
    assert hits.prepared == made + len(files)
    served = hits.served
    for path, body in files.items():  # and the hit path answers from them
        assert (await conn.request(f"/{path}")).body == body
    assert hits.served == served + len(files) and hits.prepared == made + len(files)
    charged_per_head = (memory.heads_bytes - charged) / len(files)
    assert per_head < charged_per_head < 1.6 * per_head, (per_head, charged_per_head)


async def test_the_prepared_heads_stay_within_their_share_of_a_small_memory_budget(make_hit_cdn: HitCdnFactory) -> None:
    """With many Host values the heads would be many: past their room in the budget (a quarter) the oldest go,
    and the entries and the heads together stay within `edge.memory_cache_mb`."""
    cdn = await make_hit_cdn(ASSETCDN_EDGE_MEMORY_CACHE_MB="1")
    files = {f"{ZONE}/v1/banners/{i}.bin": f"body {i}".encode() for i in range(3)}
    for path, body in files.items():
        await cdn.upload(path, body)
    conn = await cdn.connect()
    hits, memory = cdn.site.hits, cdn.node.cache.memory
    assert hits is not None
    for n in range(200):
        for path, body in files.items():
            assert (await conn.request(f"/{path}", host=f"h{n}.test")).body == body
        assert hits.head_bytes <= memory.heads_room // memory.head_holders
        assert memory.heads_bytes <= memory.heads_room
        assert memory.bytes + memory.heads_bytes <= memory.max_bytes
    assert 40 < hits.prepared < 600  # the oldest went, the Hosts seen longest ago first: the rest stay
    assert hits.served > 500  # still answered on the hit path
