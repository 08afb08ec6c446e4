"""A pull zone's URL stored anew by one worker of an edge is what its other workers serve from then on.

The workers of an edge share the disk tier; each keeps its own memory tier of copies. When one worker stores a
newer response under a URL another worker holds in memory (a fill a client's `no-cache` asked for, a 304's
refreshed head), the other worker must not go on answering from its older copy: RFC 9111 section 4 has a cache use
the most recent of the responses it stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from email.utils import formatdate
from functools import partial
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.disk import DiskBusy
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.tags import pull_path_tag
from assetcdn.edge.shield import SHIELD_CACHE, rendezvous
from assetcdn.edge.states.growing import GROWING_DIR
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import FLIGHTS, flight_key
from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn
from tests.support.origins import ZONE, ScriptedOrigin, held_answer, pull_zone_on_hit_cdn
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def two_workers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-siblings"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600") as both:
        yield both


def own_shield(cdn: HitCdn, stem: str) -> str:
    """A path the hit site's worker is the shield of: it asks the origin itself, not its sibling."""
    names = (f"/{stem}-{i}.txt" for i in itertools.count())
    return next(name for name in names if cdn.node.shields.shield_for(pull_path_tag(ZONE, name)) is None)


def siblings_path(cdn: HitCdn, stem: str) -> str:
    """A path the fleet's choice gives to the hit site worker's sibling, whatever `[origin] shield_siblings` says."""
    peers = cdn.node.shields.peers()
    names = (f"/{stem}-{i}.txt" for i in itertools.count())
    return next(name for name in names
                if (peer := rendezvous(pull_path_tag(ZONE, name), peers)) is not None and peer.name != cdn.node.name)


async def on_disk(cdn: HitCdn, name: str, etag: str, stored_after: float = 0.0) -> None:
    """Returns once the shared disk tier holds `name`'s response of `etag`, stored after `stored_after` (a small
    fill's body may reach its client before its batch is written)."""
    key = pull_key(ZONE, name, "")

    async def written() -> bool:
        obj = cdn.node.cache.disk.get(key, load_limit=0)
        return obj is not None and obj.etag == etag and obj.stored_at > stored_after

    await wait_until(written, f"{name} on disk")


async def test_a_response_one_worker_fetches_again_replaces_the_copy_its_sibling_serves(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The sibling read version one from the shared disk tier; a client's `no-cache` on the first worker stores
    version two: the sibling answers version two from then on, not the copy it held."""
    cdn, origin = two_workers
    name = own_shield(cdn, "fetched-again")
    origin.answer(name, b"version one", headers={"Cache-Control": "max-age=600", "ETag": '"1"'})
    here, there = await cdn.plain(), await cdn.sibling()
    assert (await here.request(f"/{ZONE}{name}")).body == b"version one"
    await on_disk(cdn, name, '"1"')
    held = await there.request(f"/{ZONE}{name}")
    assert (held.header("X-Cache"), held.body) == ("HIT", b"version one")
    origin.answer(name, b"version two", headers={"Cache-Control": "max-age=600", "ETag": '"2"'})
    again = await here.request(f"/{ZONE}{name}", Cache_Control="no-cache")
    assert again.body == b"version two"
    await on_disk(cdn, name, '"2"')
    after = await there.request(f"/{ZONE}{name}")
    assert (after.header("X-Cache"), after.body) == ("HIT", b"version two")
    assert origin.count(name) == 2
    here.close()
    there.close()


async def test_a_head_one_worker_refreshes_by_a_304_is_the_one_its_sibling_serves(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """Both workers hold a response fresh for a second; once stale, the first worker's revalidation gets a 304 that
    makes it fresh for ten minutes: the sibling answers it as a hit, without asking the origin again."""
    cdn, origin = two_workers
    name = own_shield(cdn, "refreshed")
    confirmed = {"Cache-Control": "max-age=600", "ETag": '"same"'}

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"same"':
            return web.Response(status=304, headers=confirmed)
        return web.Response(body=b"the same body", headers={"Cache-Control": "max-age=2", "ETag": '"same"'})

    origin.route(name, answer)
    here, there = await cdn.plain(), await cdn.sibling()
    assert (await here.request(f"/{ZONE}{name}")).body == b"the same body"
    await on_disk(cdn, name, '"same"')
    held = (await there.request(f"/{ZONE}{name}")).header("X-Cache")
    # A loaded machine may take the two seconds of freshness before the sibling reads it: it revalidates itself
    # then (one more origin request), and holds a copy all the same.
    assert held in ("HIT", "REVALIDATED")
    await asyncio.sleep(3.1)
    asked = time.time()
    refreshed = await here.request(f"/{ZONE}{name}")
    assert (refreshed.header("X-Cache"), refreshed.body) == ("REVALIDATED", b"the same body")
    await on_disk(cdn, name, '"same"', asked)
    after = await there.request(f"/{ZONE}{name}")
    assert (after.header("X-Cache"), after.body) == ("HIT", b"the same body")
    assert origin.count(name) == 2 + (held == "REVALIDATED")
    here.close()
    there.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sibling_shield(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    """Two workers, the second the configured shield of every path (tests/support/origins.py `sibling_as_shield`)."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-sibling-shield"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600", sibling_shield=True) as both:
        yield both


async def test_a_shield_leaves_the_cookies_of_its_answer_to_the_asking_worker_to_judge(
        sibling_shield: tuple[HitCdn, ScriptedOrigin]) -> None:
    """Which cookies an origin may set is judged for the host a client asked (pull.client_headers): a shield's
    answer to another worker carries every one, so that a client on the zone's custom domain gets them all through
    a shield too, and one on the tenant host none naming another host."""
    cdn, origin = sibling_shield
    domain = "cookies.pulled-siblings.example"
    resp = await cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    nodes = [app[NODE] for app in (cdn.app, *cdn.siblings)]

    async def arrived() -> bool:
        return all(node.config.zone_for_host(domain) == ZONE for node in nodes)

    await wait_until(arrived, "the custom domain reaching both workers")
    names = (f"/shielded-cookies-{i}.txt" for i in itertools.count())
    name = next(name for name in names if cdn.node.shields.shield_for(pull_path_tag(ZONE, name)) is not None)
    base = cdn.node.config.base_domain
    tenant = f"{ZONE}.{base}"
    # `a` names the custom domain's parent (its own choice there, another host on the tenant host), `d` the base
    # domain (every zone's tenant host: dropped on both).
    cookies = ["a=1; Domain=pulled-siblings.example", "b=2", f"c=3; Domain={tenant}", f"d=4; Domain={base}"]

    async def setting(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=b"cookies", headers={"Cache-Control": "max-age=600"})
        for cookie in cookies:
            response.headers.add("Set-Cookie", cookie)
        return response

    origin.route(name, setting)
    conn = await cdn.plain()
    answers = {host: await conn.request(name, host=host) for host in (domain, tenant)}
    assert {host: (answer.status, answer.header("X-Cache"), answer.headers.getall("Set-Cookie", []))
            for host, answer in answers.items()} == {domain: (200, "PASS", cookies[:3]),
                                                     tenant: (200, "PASS", cookies[1:3])}
    # Both came through the sibling, the shield: its member of Cache-Status before this worker's.
    assert all(answer.headers.getall("Cache-Status")[0].startswith(SHIELD_CACHE) for answer in answers.values())
    assert origin.count(name) == 2
    conn.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def unshielded(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    """Two workers that each ask the origin themselves (`[origin] shield = "off"`): their fills of one URL run at once."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-siblings-unshielded"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600", ASSETCDN_ORIGIN_SHIELD="off") as both:
        yield both


async def test_a_304_landing_after_a_sibling_stored_a_newer_response_leaves_the_newer_one_stored(
        unshielded: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The first worker's revalidation of version one is confirmed by a 304 the origin sent before it changed, which
    lands once the sibling has stored version two: that 304 answers its own request only (RFC 9111 4.3.4: it selects
    no stored response, version two's ETag is another), and both workers answer version two from then on."""
    cdn, origin = unshielded
    name = "/confirmed-late.txt"
    current = [1]
    asked, confirm = asyncio.Event(), asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        version = current[0]
        if request.headers.get("If-None-Match") == '"1"' and version == 1:
            asked.set()
            await confirm.wait()  # decided while version one was current, delivered late
            return web.Response(status=304, headers={"Cache-Control": "max-age=600", "ETag": '"1"'})
        return web.Response(body=b"version %d" % version, headers={
            "Cache-Control": "max-age=1" if version == 1 else "max-age=600", "ETag": f'"{version}"'})

    origin.route(name, answer)
    here, there = await cdn.plain(), await cdn.sibling()
    assert (await here.request(f"/{ZONE}{name}")).body == b"version 1"
    await on_disk(cdn, name, '"1"')
    await asyncio.sleep(2.1)  # stale on both workers
    confirming = asyncio.create_task(here.request(f"/{ZONE}{name}"))
    await asyncio.wait_for(asked.wait(), 10)
    current[0] = 2
    replaced = await there.request(f"/{ZONE}{name}")
    assert (replaced.header("X-Cache"), replaced.body) == ("MISS", b"version 2")
    await on_disk(cdn, name, '"2"')
    confirm.set()
    confirmed = await confirming
    assert (confirmed.header("X-Cache"), confirmed.body) == ("REVALIDATED", b"version 1")
    again = await cdn.plain()
    answers = [await conn.request(f"/{ZONE}{name}") for conn in (there, again, there)]
    assert [(resp.header("X-Cache"), resp.body) for resp in answers] == [("HIT", b"version 2")] * 3
    assert origin.count(name) == 3
    for conn in (here, there, again):
        conn.close()


async def test_a_304_asked_for_before_a_siblings_newer_fill_does_not_replace_it_once_both_are_written(
        unshielded: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The sibling's revalidation of version one is asked for, and answered 304, before the first worker's fill of
    version two; the 304 lands while that fill waits for its disk batch, and is stored first. Version two is the
    newer response, stored last: both workers answer it from then on, not the copy the late 304 confirmed."""
    cdn, origin = unshielded
    name = "/overtaken.txt"
    current = [1]
    asked, confirm = asyncio.Event(), asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        version = current[0]
        if request.headers.get("If-None-Match") == '"1"' and version == 1:
            decided = formatdate(time.time(), usegmt=True)  # its Date: not after version two's
            asked.set()
            await confirm.wait()  # decided while version one was current, delivered late
            return web.Response(status=304, headers={"Cache-Control": "max-age=600", "ETag": '"1"', "Date": decided})
        return web.Response(body=b"version %d" % version, headers={
            "Cache-Control": "max-age=1" if version == 1 else "max-age=600", "ETag": f'"{version}"'})

    origin.route(name, answer)
    here, there = await cdn.plain(), await cdn.sibling()
    assert (await here.request(f"/{ZONE}{name}")).body == b"version 1"
    await on_disk(cdn, name, '"1"')
    await asyncio.sleep(2.1)  # stale on both workers
    confirming = asyncio.create_task(there.request(f"/{ZONE}{name}"))
    await asyncio.wait_for(asked.wait(), 10)
    current[0] = 2
    # The first worker's disk batches are handed to its writer only once the 304 is stored (its writer thread is the
    # sibling's too, in this process: a batch held inside it would hold up the 304's write as well).
    writes = cdn.node.cache._writes
    submit, held = writes._submit, asyncio.Event()
    writers: list[Any] = []

    def hold(writer: Any) -> None:
        writers.append(writer)
        held.set()

    writes._submit = hold  # type: ignore[method-assign]
    try:
        filling = asyncio.create_task(here.request(f"/{ZONE}{name}", Cache_Control="no-cache"))
        await asyncio.wait_for(held.wait(), 10)  # version two waits for its batch
        confirm.set()
        confirmed = await confirming
        assert (confirmed.header("X-Cache"), confirmed.body) == ("REVALIDATED", b"version 1")
    finally:
        writes._submit = submit  # type: ignore[method-assign]
        for writer in writers:
            submit(writer)
    filled = await filling
    assert (filled.header("X-Cache"), filled.body) == ("MISS", b"version 2")
    await on_disk(cdn, name, '"2"')
    again = await cdn.plain()
    answers = [await conn.request(f"/{ZONE}{name}") for conn in (there, again, there)]
    assert [(resp.header("X-Cache"), resp.body) for resp in answers] == [("HIT", b"version 2")] * 3
    assert origin.count(name) == 3
    for conn in (here, there, again):
        conn.close()


async def test_a_response_one_worker_cannot_write_to_disk_leaves_its_sibling_no_older_copy_to_serve(
        two_workers: tuple[HitCdn, ScriptedOrigin], monkeypatch: pytest.MonkeyPatch) -> None:
    """The sibling holds version one (read from the shared disk tier); a client's `no-cache` on the first worker
    fetches version two, which the disk tier refuses to store (the database busy past its timeout). Version one is
    no longer the URL's current response: once the first worker writes again (another fill), the sibling answers
    version two, not its copy of version one."""
    cdn, origin = two_workers
    name = own_shield(cdn, "unwritten")
    key = pull_key(ZONE, name, "")
    origin.answer(name, b"version one", headers={"Cache-Control": "max-age=600", "ETag": '"1"'})
    here, there = await cdn.plain(), await cdn.sibling()
    assert (await here.request(f"/{ZONE}{name}")).body == b"version one"
    await on_disk(cdn, name, '"1"')
    held = await there.request(f"/{ZONE}{name}")
    assert (held.header("X-Cache"), held.body) == ("HIT", b"version one")
    disk = cdn.node.cache.disk
    batch, put_many, tried = disk._batch, disk.put_many, threading.Event()

    def refused(entries: Sequence[CachedObject], *rest: Any, **named: Any) -> None:
        if any(obj.key == key for obj in entries):
            raise DiskBusy(errno.EBUSY, "no write transaction after 3 attempts (database is locked)")
        batch(entries, *rest, **named)

    def put_then_tell(entries: Sequence[CachedObject], current: Any = None) -> list[CachedObject]:
        try:
            return put_many(entries, current)
        finally:
            if any(obj.key == key for obj in entries):
                tried.set()

    monkeypatch.setattr(disk, "_batch", refused)
    monkeypatch.setattr(disk, "put_many", put_then_tell)
    origin.answer(name, b"version two", headers={"Cache-Control": "max-age=600", "ETag": '"2"'})
    again = await here.request(f"/{ZONE}{name}", Cache_Control="no-cache")
    assert again.body == b"version two"

    async def written_or_refused() -> bool:
        return tried.is_set()

    await wait_until(written_or_refused, "the first worker's disk batch of version two")
    monkeypatch.undo()
    other = own_shield(cdn, "written-next")
    origin.answer(other, b"another", headers={"Cache-Control": "max-age=600", "ETag": '"a"'})
    assert (await here.request(f"/{ZONE}{other}")).body == b"another"
    await on_disk(cdn, other, '"a"')
    after = await there.request(f"/{ZONE}{name}")
    assert (after.status, after.body) == (200, b"version two")
    here.close()
    there.close()


async def test_a_response_older_by_its_date_stored_last_does_not_replace_the_newer_one(
        unshielded: tuple[HitCdn, ScriptedOrigin], monkeypatch: pytest.MonkeyPatch) -> None:
    """The sibling stores version two, dated now. A client's `no-cache` on the first worker is then answered with
    version one, dated a minute earlier (what a shield's copy under way, or an origin's lagging replica, sends):
    that client gets it, but the workers keep the most recent response by its Date (RFC 9111 4), not the one
    stored last: both answer version two from then on."""
    cdn, origin = unshielded
    name = "/dated.txt"
    now = time.time()
    current = [2]

    async def answer(_request: web.Request) -> web.StreamResponse:
        version = current[0]
        return web.Response(body=b"version %d" % version, headers={
            "Cache-Control": "max-age=600", "ETag": f'"{version}"',
            "Date": formatdate(now if version == 2 else now - 60, usegmt=True)})

    origin.route(name, answer)
    here, there = await cdn.plain(), await cdn.sibling()
    newer = await there.request(f"/{ZONE}{name}")
    assert (newer.header("X-Cache"), newer.body) == ("MISS", b"version 2")
    await on_disk(cdn, name, '"2"')
    key = pull_key(ZONE, name, "")
    writes = cdn.node.cache._writes
    put, done = writes._put, threading.Event()

    def put_then_tell(entries: list[CachedObject]) -> None:
        try:
            put(entries)
        finally:
            if any(obj.key == key for obj in entries):
                done.set()

    monkeypatch.setattr(writes, "_put", put_then_tell)
    current[0] = 1
    older = await here.request(f"/{ZONE}{name}", Cache_Control="no-cache")
    assert (older.header("X-Cache"), older.body) == ("MISS", b"version 1")

    async def settled() -> bool:
        return done.is_set()

    await wait_until(settled, "the first worker's disk batch of version one")
    monkeypatch.undo()
    answers = [await conn.request(f"/{ZONE}{name}") for conn in (there, here, there)]
    assert [(resp.header("X-Cache"), resp.body) for resp in answers] == [("HIT", b"version 2")] * 3
    assert origin.count(name) == 2
    here.close()
    there.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def siblings_unshielded(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    """Two workers that do not shield one another (`[origin] shield_siblings = false`), shielding on otherwise."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-siblings-off"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600",
                                    ASSETCDN_ORIGIN_SHIELD_SIBLINGS="false") as both:
        yield both


async def test_a_worker_fetches_a_path_its_sibling_shields_and_the_sibling_serves_it(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """A path the fleet's choice gives to the sibling is fetched from the origin by the worker the client reached, with
    no shield hop inside the edge (no shield member in Cache-Status); the sibling then answers it from the shared disk
    tier, the origin asked once."""
    await fetched_here_served_there(*two_workers)


async def test_with_shield_siblings_off_a_worker_fetches_a_path_its_sibling_shields_and_the_sibling_serves_it(
        siblings_unshielded: tuple[HitCdn, ScriptedOrigin]) -> None:
    """As with the default: `[origin] shield_siblings` only says whether the workers take turns at a URL's fill."""
    await fetched_here_served_there(*siblings_unshielded)


async def fetched_here_served_there(cdn: HitCdn, origin: ScriptedOrigin) -> None:
    name = siblings_path(cdn, "by-sibling")
    origin.answer(name, b"fetched here", headers={"Cache-Control": "max-age=600", "ETag": '"here"'})
    here, there = await cdn.plain(), await cdn.sibling()
    first = await here.request(f"/{ZONE}{name}")
    assert (first.status, first.header("X-Cache"), first.body) == (200, "MISS", b"fetched here")
    assert not first.headers.getall("Cache-Status")[0].startswith(SHIELD_CACHE)
    await on_disk(cdn, name, '"here"')
    held = await there.request(f"/{ZONE}{name}")
    assert (held.header("X-Cache"), held.body) == ("HIT", b"fetched here")
    assert origin.count(name) == 1
    here.close()
    there.close()


@pytest.mark.parametrize("site", ["hit path", "application"])
async def test_a_url_both_workers_miss_at_once_is_fetched_once(
        two_workers: tuple[HitCdn, ScriptedOrigin], site: str) -> None:
    """The first worker's fill of a new URL is under way (the origin holds its body back) when the sibling misses it
    too: the sibling waits for that fill and answers from what it stored, so the origin is asked once
    (assetcdn/edge/cache/fill_lock.py)."""
    await both_miss_at_once(*two_workers, site, shared=True)


async def test_with_shield_siblings_off_a_url_both_workers_miss_at_once_is_fetched_by_each(
        siblings_unshielded: tuple[HitCdn, ScriptedOrigin]) -> None:
    """`[origin] shield_siblings = false`: each worker asks the origin itself."""
    await both_miss_at_once(*siblings_unshielded, "application", shared=False)


async def both_miss_at_once(cdn: HitCdn, origin: ScriptedOrigin, site: str, *, shared: bool) -> None:
    name = own_shield(cdn, f"at-once-{shared}-{site.replace(' ', '-')}")
    body = b"one fill for the edge " * 200
    release = origin.hold(name, body, {"Cache-Control": "max-age=600", "ETag": '"once"',
                                       "Content-Type": "text/plain"})
    here = await (cdn.connect() if site == "hit path" else cdn.plain())
    there = await cdn.sibling()
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))

    async def asked() -> bool:
        return origin.count(name) == 1

    await wait_until(asked, "the first worker's origin request")
    waiting = asyncio.create_task(there.request(f"/{ZONE}{name}"))
    if shared:
        # The sibling waits for the fill under way: no origin request of its own, no answer before the body is in.
        await asyncio.sleep(0.3)
        assert origin.count(name) == 1 and not waiting.done()
    else:
        async def asked_twice() -> bool:
            return origin.count(name) == 2

        await wait_until(asked_twice, "the sibling's own origin request")
    release.set()
    first, second = await filling, await waiting
    assert (first.status, first.header("X-Cache"), first.body) == (200, "MISS", body)
    assert (second.status, second.body) == (200, body)
    assert second.header("X-Cache") == ("HIT" if shared else "MISS")
    assert origin.count(name) == (1 if shared else 2)
    here.close()
    there.close()


async def test_a_fill_the_sibling_waits_for_that_stores_nothing_sends_it_to_the_origin(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The first worker's fill is of an answer no cache may keep (`private`): the sibling that waited for it finds
    nothing stored once that fill lets go of the URL, and asks the origin itself (its answer, not an error)."""
    cdn, origin = two_workers
    name = own_shield(cdn, "private-at-once")
    body = b"for one client " * 100
    release = origin.hold(name, body, {"Cache-Control": "private", "Content-Type": "text/plain"})
    here, there = await cdn.plain(), await cdn.sibling()
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))

    async def asked(times: int) -> bool:
        return origin.count(name) == times

    await wait_until(partial(asked, 1), "the first worker's origin request")
    waiting = asyncio.create_task(there.request(f"/{ZONE}{name}"))
    await wait_until(partial(asked, 2), "the sibling's own origin request")
    release.set()
    answers = [await filling, await waiting]
    assert [(answer.status, answer.header("X-Cache"), answer.body) for answer in answers] == [(200, "PASS", body)] * 2
    here.close()
    there.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def impatient(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    """Two workers sharing fills that wait a second for an origin's head."""
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-siblings-impatient"), ZONE, workers=2,
                                    ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S="3600",
                                    ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="1") as both:
        yield both


async def test_a_fill_the_origin_never_answers_is_the_failure_of_the_sibling_waiting_for_it(
        impatient: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The first worker's fill gets no head from the origin within its first-byte time: the sibling that waited for
    that fill answers 504 with it, as the first worker's client is answered, without a request of its own to the
    origin that just failed (which would keep its client twice as long)."""
    cdn, origin = impatient
    name = own_shield(cdn, "never-answered")
    silent = asyncio.Event()

    async def never(_request: web.Request) -> web.StreamResponse:
        await silent.wait()
        return web.Response(body=b"too late")

    origin.route(name, never)
    here, there = await cdn.plain(), await cdn.sibling()
    try:
        filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))

        async def asked() -> bool:
            return origin.count(name) == 1

        await wait_until(asked, "the first worker's origin request")
        waiting = asyncio.create_task(there.request(f"/{ZONE}{name}"))
        answers = [await filling, await waiting]
        assert [answer.status for answer in answers] == [504, 504]
        assert all("detail=origin-timeout" in (answer.header("Cache-Status") or "") for answer in answers)
        assert origin.count(name) == 1
    finally:
        silent.set()
        here.close()
        there.close()


LARGE = bytes(range(256)) * (8 * 1024)  # 2 MB: past the 1 MB a fill holds in memory, its waiters streamed


@pytest.mark.parametrize("ending", ["whole", "cut"])
@pytest.mark.parametrize("site", ["hit path", "application"])
async def test_a_request_on_the_other_worker_is_sent_a_large_fill_as_it_is_read(
        two_workers: tuple[HitCdn, ScriptedOrigin], site: str, ending: str) -> None:
    """The first worker's fill of a 2 MB body has read 1.5 MB and the origin holds the rest: a request for the URL on
    the other worker, waiting for that fill, is sent its head and those bytes meanwhile (read from the file the
    filling worker publishes, assetcdn/edge/states/growing.py), then the rest; or, when the origin cuts the body
    short, is cut short with it. The origin is asked once, and nothing published is left behind."""
    cdn, origin = two_workers
    name = own_shield(cdn, f"large-{ending}-{site.replace(' ', '-')}")
    held = len(LARGE) * 3 // 4
    release = origin.hold(name, LARGE, {"Cache-Control": "max-age=600", "ETag": '"large"', "Content-Type": "video/mp4"},
                          first=held, cut=ending == "cut")
    here = await (cdn.connect() if site == "hit path" else cdn.plain())
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))

    async def asked() -> bool:
        return origin.count(name) == 1

    try:
        await wait_until(asked, "the first worker's origin request")
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{cdn.sibling_ports[0]}/{ZONE}{name}") as waiter:
            assert (waiter.status, waiter.headers["X-Cache"], waiter.headers["Content-Length"]) == (
                200, "HIT", str(len(LARGE)))
            assert waiter.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; collapsed"
            assert await asyncio.wait_for(waiter.content.readexactly(held), 30) == LARGE[:held]
            release.set()
            if ending == "cut":
                with pytest.raises(aiohttp.ClientPayloadError):
                    await waiter.read()
            else:
                assert await waiter.read() == LARGE[held:]
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await filling
    finally:
        release.set()
        here.close()
    assert origin.count(name) == 1
    published = cdn.node.config_file.parent / GROWING_DIR  # in the cache directory the workers share

    async def unpublished() -> bool:
        return not any(published.iterdir())

    await wait_until(unpublished, "the published fill's files removed")


async def test_a_request_of_another_variant_on_the_other_worker_is_not_held_by_a_large_fill(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """The first worker's fill of a 2 MB body that varies on Accept-Language (fr) has read 1.5 MB, the origin holding
    the rest: a request for the en variant on the other worker, which that fill does not answer, asks the origin for
    its own at once (as one of the filling worker's own requests does), not once the whole fr body is stored. The
    published fill it looked at is not held open once it is over."""
    cdn, origin = two_workers
    before = published_descriptors()
    name = own_shield(cdn, "large-variant")
    held = len(LARGE) * 3 // 4
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        lang = request.headers.get("Accept-Language", "-")
        headers = {"Cache-Control": "max-age=600", "ETag": f'"{lang}"', "Vary": "Accept-Language",
                   "Content-Type": "video/mp4"}
        if lang != "fr":
            return web.Response(body=f"the {lang} variant".encode(), headers=headers)
        return await held_answer(LARGE, headers, held, release)(request)

    origin.route(name, answer)
    here = await cdn.plain()
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}", Accept_Language="fr"))

    async def asked() -> bool:
        return origin.count(name) == 1

    try:
        await wait_until(asked, "the first worker's origin request")
        async with aiohttp.ClientSession() as http:
            async def other() -> tuple[int, bytes]:
                async with http.get(f"http://127.0.0.1:{cdn.sibling_ports[0]}/{ZONE}{name}",
                                    headers={"Accept-Language": "en"}) as resp:
                    return resp.status, await resp.read()

            # Bounds only a request that waits for the fr fill to end: before, it was answered once the origin's idle
            # time had ended that fill (the fr client's answer cut short), the origin holding its body back until now.
            assert await asyncio.wait_for(other(), 30) == (200, b"the en variant")
        release.set()
        first = await filling
        assert (first.status, first.body) == (200, LARGE)
    finally:
        release.set()
        here.close()
    assert origin.count(name) == 2

    async def let_go() -> bool:  # both workers run in this process
        return published_descriptors() <= before

    await wait_until(let_go, "the published fill's descriptors closed")


def published_descriptors() -> int:
    """How many descriptors of this process are open on files of a published fill (`GROWING_DIR`)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sum(f"/{GROWING_DIR}/" in link for link in links)


async def test_a_client_gone_while_the_other_worker_reads_a_large_fill_for_it_leaves_nothing_open(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """A client on the other worker reading the first worker's large fill as it grows goes after 100 KB: once the fill
    is over, neither worker holds a published file open, and none is left in the cache directory; the first client
    gets the whole body."""
    cdn, origin = two_workers
    name = own_shield(cdn, "large-gone")
    held = len(LARGE) * 3 // 4
    before = published_descriptors()
    release = origin.hold(name, LARGE, {"Cache-Control": "max-age=600", "Content-Type": "video/mp4"}, first=held)
    here = await cdn.plain()
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))

    async def asked() -> bool:
        return origin.count(name) == 1

    try:
        await wait_until(asked, "the first worker's origin request")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{cdn.sibling_ports[0]}/{ZONE}{name}") as gone:
                assert gone.headers["X-Cache"] == "HIT"
                assert await asyncio.wait_for(gone.content.readexactly(100_000), 30) == LARGE[:100_000]
                assert gone.connection is not None
                gone.connection.transport.abort()  # type: ignore[union-attr]
        release.set()
        first = await filling
        assert (first.status, first.body) == (200, LARGE)
    finally:
        release.set()
        here.close()
    published = cdn.node.config_file.parent / GROWING_DIR

    async def nothing_left() -> bool:
        return published_descriptors() <= before and not any(published.iterdir())

    await wait_until(nothing_left, "the published fill closed and removed")


async def test_a_request_on_the_other_worker_after_a_purge_is_not_answered_from_a_large_fill_asked_before_it(
        two_workers: tuple[HitCdn, ScriptedOrigin]) -> None:
    """A purge of the URL published while the first worker reads its large body: a request on the other worker after
    it is not answered from the fill that worker publishes (the purge mark its head names is older than the edge's,
    which its workers share), but waits for it and then asks the origin itself, as one of the filling worker does."""
    cdn, origin = two_workers
    name = own_shield(cdn, "large-purged")
    held = len(LARGE) * 3 // 4
    release = origin.hold(name, LARGE, {"Cache-Control": "max-age=600", "Content-Type": "video/mp4"}, first=held)
    here = await cdn.plain()
    filling = asyncio.create_task(here.request(f"/{ZONE}{name}"))
    published = cdn.node.config_file.parent / GROWING_DIR

    async def read_under_way() -> bool:  # published: its body is being read
        return origin.count(name) == 1 and any(path.suffix == ".head" for path in published.iterdir())

    async def later() -> tuple[int, str, bytes]:
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{cdn.sibling_ports[0]}/{ZONE}{name}") as resp:
            return resp.status, resp.headers["X-Cache"], await resp.read()

    sibling = cdn.siblings[0]
    key = flight_key(pull_key(ZONE, name, ""), sibling[NODE].config.pull_zones[ZONE])
    try:
        await wait_until(read_under_way, "the first worker's fill published")
        await cdn.purge({"urls": [f"http://edge.test/{ZONE}{name}"]})
        waiting = asyncio.create_task(later())

        async def joined() -> bool:
            return sibling[FLIGHTS].joined(key) == 1

        await wait_until(joined, "the request after the purge waiting for the fill")
        assert not waiting.done()
        release.set()
        first = await filling
        assert (first.status, first.body) == (200, LARGE)
        assert await waiting == (200, "MISS", LARGE)
    finally:
        release.set()
        here.close()
    assert origin.count(name) == 2
