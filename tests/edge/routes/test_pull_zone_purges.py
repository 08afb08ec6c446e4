"""Purges of a pull zone through a real control and edge app and an origin the tests script (the `pull`
fixture, tests/support/origins.py): by prefix, soft (a conditional request answered 304 keeps the body), and
by URL on the zone's tenant host, a custom domain or percent-encoded; what a client of the edge sees, what the
origin saw, and what each cache tier holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from multidict import CIMultiDict

from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.cache.tags import pull_path_tag
from assetcdn.edge.states.freshness import MAX_TAG_BYTES
from assetcdn.edge.states.keys import pull_key
from assetcdn.shared.openapi import document
from tests.control.expect import expect_error
from tests.support.cdn import PURGE
from tests.support.control import ACCOUNT
from tests.support.images import solid_png
from tests.support.origins import LONG, TENANT_HOST, ZONE, Pull, add_pull_zone, wait_stale
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(patient_pull: Pull) -> Pull:
    """The patient pull zone (tests/edge/routes/conftest.py): no test here is about the first-byte time, which a
    loaded machine's loop delays took from origins that answer at once (a 504), and from those that hold a head
    until a purge is acknowledged."""
    return patient_pull


async def purge(pull: Pull, body: dict[str, Any]) -> dict[str, Any]:
    resp = await pull.cdn.control.post("/api/purge", json=body, headers=PURGE)
    answer: dict[str, Any] = await resp.json()
    assert resp.status == 200, answer
    assert answer["edges"]["acknowledged"] == ["edge-t"], answer  # answered once the edge applied it
    return answer


async def cached(pull: Pull, name: str, host: str | None = None) -> None:
    """`name` asked twice: a miss, then a hit (the first request's flight ends once its response is stored, so
    the second waits for that: a client has the whole body before the edge finished storing it)."""
    headers = {"Host": host} if host else {}
    for x_cache in ("MISS", "HIT"):
        resp = await pull.cdn.edge.get(f"/{ZONE}{name}" if host is None else name, headers=headers)
        await resp.read()
        assert resp.headers["X-Cache"] == x_cache, name


OTHER = "pulled-too"  # a second pull zone in front of the same origin: its answers carry the same tags


async def other_zone(pull: Pull) -> str:
    """OTHER, added to the module's edge by the first test that asks for it."""
    if OTHER not in pull.cdn.node.config.pull_zones:
        await add_pull_zone(pull.cdn, OTHER, {"Url": str(pull.cdn.node.config.pull_zones[ZONE].origin.url)})
    return OTHER


async def x_cache(pull: Pull, target: str) -> str:
    resp = await pull.cdn.edge.get(target)
    await resp.read()
    assert resp.status == 200, target
    return resp.headers["X-Cache"]


def tiers(pull: Pull, path: str) -> tuple[bool, bool]:
    """Whether the memory tier and the disk tier hold the response of the zone's `path`."""
    cache, key = pull.cdn.node.cache, pull_key(ZONE, path, "")
    cache.flush_writes()  # a fill reaches the disk tier in the writer's next batch
    return key in cache.memory, cache.disk.get(key, load_limit=0) is not None


async def test_a_prefix_purge_drops_the_paths_under_it_from_every_tier_only(pull: Pull) -> None:
    under = ("/pre/a/1.txt", "/pre/a/deep/2.txt")
    beside = ("/pre/ab.txt", "/pre/b/3.txt")
    for name in (*under, *beside):
        pull.origin.answer(name, name.encode(), headers=LONG)
        await cached(pull, name)
        assert tiers(pull, name) == (True, True)
    answer = await purge(pull, {"prefixes": [f"/{ZONE}/pre/a/"]})
    assert (answer["purged"], answer["mode"], answer["soft"]) == ([f"/{ZONE}/pre/a/"], "prefixes", False)
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": len(under)}
    assert [tiers(pull, name) for name in (*under, *beside)] == [(False, False)] * 2 + [(True, True)] * 2
    assert [(await pull.get(name)).headers["X-Cache"] for name in (*under, *beside)] == ["MISS", "MISS", "HIT", "HIT"]
    assert [pull.origin.count(name) for name in (*under, *beside)] == [2, 2, 1, 1]


async def test_a_prefix_on_the_tenant_host_names_the_zones_paths(pull: Pull) -> None:
    pull.origin.answer("/hosted/x.txt", b"x", headers=LONG)
    pull.origin.answer("/kept/x.txt", b"x", headers=LONG)
    for name in ("/hosted/x.txt", "/kept/x.txt"):
        await cached(pull, name)
    await purge(pull, {"prefixes": [f"https://{TENANT_HOST}/hosted/"]})
    assert [(await pull.get(name)).headers["X-Cache"] for name in ("/hosted/x.txt", "/kept/x.txt")] == ["MISS", "HIT"]


async def test_a_soft_purge_revalidates_with_the_origin_and_keeps_the_body(pull: Pull) -> None:
    bodies = {"/soft/etag.txt": b"tagged by etag", "/soft/dated.txt": b"tagged by date"}
    validators = {"/soft/etag.txt": ("ETag", "If-None-Match", '"v1"'),
                  "/soft/dated.txt": ("Last-Modified", "If-Modified-Since", "Tue, 01 Dec 2026 10:00:00 GMT")}

    def conditional(name: str) -> Any:
        field, condition, value = validators[name]

        async def handle(request: web.Request) -> web.StreamResponse:
            if request.headers.get(condition) == value:
                return web.Response(status=304, headers={**LONG, field: value})
            return web.Response(body=bodies[name], headers={**LONG, field: value})

        return handle

    for name in bodies:
        pull.origin.route(name, conditional(name))
        await cached(pull, name)
    answer = await purge(pull, {"prefixes": [f"/{ZONE}/soft/"], "soft": True})
    assert (answer["mode"], answer["soft"], answer["edges"]["entriesRemoved"]) == ("prefixes", True, {"edge-t/0": 2})
    # Kept on disk (marked stale), out of the memory tier.
    assert [tiers(pull, name) for name in bodies] == [(False, True)] * 2
    for name, body in bodies.items():
        resp = await pull.get(name)
        assert (await resp.read(), resp.headers["X-Cache"]) == (body, "REVALIDATED"), name
        assert "fwd-status=304" in resp.headers["Cache-Status"]
        field, condition, value = validators[name]
        assert [seen.headers.get(condition) for seen in pull.origin.requests(name)] == [None, value]
        resp = await pull.get(name)  # the 304 made it fresh again
        assert (await resp.read(), resp.headers["X-Cache"]) == (body, "HIT")
        assert pull.origin.count(name) == 2


async def test_a_soft_purge_of_a_tag_or_a_url_revalidates_too(pull: Pull) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"same"':
            return web.Response(status=304, headers={**LONG, "ETag": '"same"', "Cache-Tag": "softly"})
        return web.Response(body=b"same", headers={**LONG, "ETag": '"same"', "Cache-Tag": "softly"})

    pull.origin.route("/soft/by-tag.txt", handle)
    await cached(pull, "/soft/by-tag.txt")
    for body in ({"tags": ["softly"], "soft": True}, {"urls": [f"/{ZONE}/soft/by-tag.txt"], "soft": True}):
        await purge(pull, body)
        resp = await pull.get("/soft/by-tag.txt")
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"same", "REVALIDATED"), body
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests("/soft/by-tag.txt")] == [
        None, '"same"', '"same"']


async def test_a_url_purge_names_a_path_on_the_tenant_host_or_a_custom_domain(pull: Pull) -> None:
    domain = "purges.pulled-brand.example"
    resp = await pull.cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()

    async def domain_arrived() -> bool:
        return pull.cdn.node.config.zone_for_host(domain) == ZONE

    await wait_until(domain_arrived, "the custom domain reaching the edge")
    names = ("/hosts/tenant.txt", "/hosts/domain.txt", "/hosts/kept.txt")
    for name in names:
        pull.origin.answer(name, b"hosted", headers=LONG)
        await cached(pull, name, TENANT_HOST)
    await purge(pull, {"urls": [f"https://{TENANT_HOST}/hosts/tenant.txt", f"http://{domain.upper()}:8080/hosts/domain.txt"]})
    assert [(await pull.get(name)).headers["X-Cache"] for name in names] == ["MISS", "MISS", "HIT"]


async def test_a_url_purge_names_a_path_however_its_escapes_are_spelt(pull: Pull) -> None:
    # As requested (the client sends what yarl makes of it: upper-case escapes) and as purged.
    spelt = {"/enc/caf%C3%A9.txt": f"/{ZONE}/enc/café.txt",
             "/enc/a~b.txt": f"https://{TENANT_HOST}/enc/a%7eb.txt",
             "/enc/sp%20ace.txt": f"/{ZONE}/enc/sp%20ace.txt",
             "/enc/kept%C3%A9.txt": None}
    for name in spelt:
        pull.origin.answer(name, b"encoded", headers=LONG)
        await cached(pull, name)
    answer = await purge(pull, {"urls": [url for url in spelt.values() if url]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 3}
    assert [(await pull.get(name)).headers["X-Cache"] for name in spelt] == ["MISS", "MISS", "MISS", "HIT"]


async def test_a_tag_purge_of_one_vary_variant_leaves_the_others_cached(pull: Pull) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        lang = request.headers.get("Accept-Language", "none")
        return web.Response(body=lang.encode(), headers={**LONG, "Vary": "Accept-Language", "Cache-Tag": f"lang-{lang}"})

    pull.origin.route("/vary/langs.txt", handle)
    for lang in ("en", "fr"):  # fr stored last: the URL's own entry is written with each variant
        for x_cache in ("MISS", "HIT"):
            resp = await pull.get("/vary/langs.txt", headers={"Accept-Language": lang})
            assert resp.headers["X-Cache"] == x_cache, lang
    answer = await purge(pull, {"tags": ["lang-fr"]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}  # the fr variant, nothing else
    seen = {lang: (await pull.get("/vary/langs.txt", headers={"Accept-Language": lang})).headers["X-Cache"]
            for lang in ("en", "fr")}
    assert seen == {"en": "HIT", "fr": "MISS"}
    # A URL purge takes every variant, and counts them: the URL's own entry (which fields select one) is no copy.
    await pull.get("/vary/langs.txt", headers={"Accept-Language": "fr"})
    answer = await purge(pull, {"urls": [f"/{ZONE}/vary/langs.txt"]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 2}
    seen = {lang: (await pull.get("/vary/langs.txt", headers={"Accept-Language": lang})).headers["X-Cache"]
            for lang in ("en", "fr")}
    assert seen == {"en": "MISS", "fr": "MISS"}


async def test_a_response_naming_more_tags_than_the_bound_is_passed_on_not_stored(pull: Pull) -> None:
    many = [",".join(f"tag-{line}-{n}" for n in range(600)) for line in range(3)]  # 3 lines of about 6 KB
    assert sum(map(len, many)) > MAX_TAG_BYTES >= sum(map(len, many[:2]))

    def tagged(lines: list[str]) -> Any:
        async def handle(_request: web.Request) -> web.StreamResponse:
            headers = CIMultiDict(LONG)
            for i, line in enumerate(lines):
                headers.add("Cache-Tag" if i % 2 else "Surrogate-Key", line)
            return web.Response(body=b"tagged", headers=headers)

        return handle

    pull.origin.route("/tags/over.txt", tagged(many))
    pull.origin.route("/tags/within.txt", tagged(many[:2]))
    for _ in range(2):  # each request goes to the origin: a copy kept without some tags would outlive their purge
        resp = await pull.get("/tags/over.txt")
        assert (resp.status, resp.headers["X-Cache"]) == (200, "PASS")
        assert resp.headers["Cache-Status"] == "assetcdn; fwd=uri-miss; detail=too-many-tags"
    assert pull.origin.count("/tags/over.txt") == 2
    await cached(pull, "/tags/within.txt")
    answer = await purge(pull, {"tags": ["tag-1-599"]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
    assert (await pull.get("/tags/within.txt")).headers["X-Cache"] == "MISS"


async def test_a_double_quote_in_an_origin_tag_is_one_of_its_characters_not_the_start_of_a_quoted_list(
        pull: Pull) -> None:
    """Cache-Tag and Surrogate-Key are lists of tags separated by commas or spaces, with no quoted strings (the fields
    Cloudflare and Fastly read): a tag holding a `"` (an inch mark) took every comma after it for part of one tag,
    so the tags the origin listed after it were not kept and their purge left the copy cached, in either tier."""
    listed = {"/tags/inch.txt": ("Cache-Tag", 'screen-27", quoted-sale,quoted-other'),
              "/tags/inch-key.txt": ("Surrogate-Key", 'screen-27",quoted-sale')}
    for name, (field, value) in listed.items():
        pull.origin.answer(name, b"tagged", headers={**LONG, field: value})
        await cached(pull, name)
    answer = await purge(pull, {"tags": ["quoted-sale"]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 2}
    assert [tiers(pull, name) for name in listed] == [(False, False)] * 2
    assert [(await pull.get(name)).headers["X-Cache"] for name in listed] == ["MISS", "MISS"]
    await purge(pull, {"tags": ["quoted-other"]})
    assert [(await pull.get(name)).headers["X-Cache"] for name in listed] == ["MISS", "HIT"]


async def test_a_tag_purge_made_while_a_304_confirms_a_copy_the_304_retags_keeps_that_copy_out(
        patient_pull: Pull) -> None:
    """The stored copy carries `Cache-Tag: before`; its revalidation is under way when `before` is purged, and the
    origin's 304 (asked before the purge) names the copy `after`: the copy the purge was made for is not stored
    again under the 304's head, so the next request asks the origin rather than being that copy's HIT."""
    pull = patient_pull  # its origin holds the revalidation until the purge is acknowledged
    name = "/retagged/by-304.txt"
    purged = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            await purged.wait()
            return web.Response(status=304, headers={**LONG, "ETag": '"v1"', "Cache-Tag": "after"})
        if len(pull.origin.requests(name)) > 2:
            return web.Response(body=b"deployed", headers={**LONG, "ETag": '"v2"', "Cache-Tag": "after"})
        return web.Response(body=b"before the purge", headers={"Cache-Control": "max-age=0", "ETag": '"v1"',
                                                                "Cache-Tag": "before"})

    pull.origin.route(name, handle)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    revalidating = asyncio.create_task(pull.get(name))

    async def asked_again() -> bool:
        return pull.origin.count(name) == 2

    await wait_until(asked_again, "the revalidation under way")
    try:
        await purge(pull, {"tags": ["before"]})
    finally:
        purged.set()
    assert (await revalidating).status == 200
    resp = await pull.get(name)
    assert (await resp.read(), resp.headers["X-Cache"]) == (b"deployed", "MISS")
    assert pull.origin.count(name) == 3


@pytest.mark.parametrize("lifetime", ["max-age=1", "max-age=1, stale-while-revalidate=600"])
async def test_a_purge_done_just_after_the_look_up_is_not_undone_by_the_304_that_confirms_the_copy(
        pull: Pull, lifetime: str) -> None:
    """A purge (another worker's, a thread of this one) that removes the stale copy right after a request looked it
    up, before the revalidation it starts was sent (for stale-while-revalidate, the task that sends it runs only
    after the stale answer): the 304, asked after the purge, confirmed the copy, which was stored again with the
    304's lifetime, the purge undone. The purges counted are those since the look-up, so it stays purged."""
    name = "/purged-at-look-up.txt" if "stale" not in lifetime else "/purged-at-look-up-swr.txt"
    deployed: list[bool] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={**LONG, "ETag": '"v1"'})
        if deployed:
            return web.Response(body=b"deployed", headers={**LONG, "ETag": '"v2"'})
        return web.Response(body=b"before the purge", headers={"Cache-Control": lifetime, "ETag": '"v1"'})

    pull.origin.route(name, handle)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    await asyncio.sleep(1.1)  # stale (max-age=1)
    cache, key = pull.cdn.node.cache, pull_key(ZONE, name, "")
    real_get = cache.get

    def get_then_purge(looked_up: str) -> CachedObject | None:
        found = real_get(looked_up)
        if looked_up == key and not deployed:
            deployed.append(True)
            cache.purge_tags([pull_path_tag(ZONE, name)])  # as a purge's thread does, at that moment
        return found

    cache.get = get_then_purge  # type: ignore[method-assign,assignment]
    try:
        answer = await pull.get(name)
    finally:
        del cache.get
    assert (answer.status, await answer.read()) == (200, b"before the purge")  # looked up before the purge

    async def revalidated() -> bool:
        return pull.origin.count(name) >= 2

    await wait_until(revalidated, "the revalidation")
    await asyncio.sleep(0.2)  # its 304 taken in by now
    resp = await pull.get(name)
    assert (await resp.read(), resp.headers["X-Cache"]) == (b"deployed", "MISS")
    assert pull.origin.count(name) == 3


@pytest.mark.parametrize(("failure", "soft"), [("503", False), ("no answer", False), ("503", True)])
async def test_a_copy_purged_while_its_revalidation_waits_for_a_failing_origin_is_not_answered_stale(
        patient_pull: Pull, failure: str, soft: bool) -> None:
    """A stale copy within stale-if-error is being revalidated when a purge removes it (acknowledged by the edge);
    then the origin fails the revalidation (a 503, or no answer). The client's answer was the purged copy, `STALE`,
    after the purge that removed it was done: it is the origin's 503, or 502, as for no copy. A soft purge keeps the
    copy, stale-if-error counted from the purge: that copy still answers."""
    pull = patient_pull  # its origin holds the revalidation until the purge is acknowledged
    name = f"/purged-while-failing-{failure.replace(' ', '-')}{'-soft' if soft else ''}.txt"
    go = asyncio.Event()
    go.set()

    async def handle(request: web.Request) -> web.StreamResponse:
        if pull.origin.count(name) == 1:
            return web.Response(body=b"before the purge", headers={
                "ETag": '"v1"', "Cache-Control": "max-age=1, stale-if-error=600"})
        await go.wait()
        if failure == "503":
            return web.Response(status=503, body=b"down")
        assert request.transport is not None
        request.transport.write(b"no HTTP at all\r\n\r\n")  # no status line: the origin gave no answer
        request.transport.close()
        return web.Response()

    pull.origin.route(name, handle)
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"

    await wait_stale(pull.cdn.node, ZONE, name)
    go.clear()
    revalidating = asyncio.ensure_future(pull.get(name))

    async def asked_again() -> bool:
        return pull.origin.count(name) == 2

    await wait_until(asked_again, "the revalidation under way")
    try:
        await purge(pull, {"urls": [f"/{ZONE}{name}"], "soft": soft})
    finally:
        go.set()
    resp = await revalidating
    if soft:
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, b"before the purge", "STALE")
        return
    assert await resp.read() != b"before the purge"
    if failure == "503":
        assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (503, b"down", "PASS")
    else:
        await expect_error(resp, 502, "OriginUnreachable")


async def test_a_url_purge_reaches_a_copy_kept_before_a_redirect_of_its_path(pull: Pull) -> None:
    """A copy cached before a `_redirects` rule sent its path elsewhere: the rule answers the path's requests, not
    the copy, which stays on the edge. A purge of the URL named nothing (a redirect was taken to name nothing cached),
    so once the rule went, the purged copy was a HIT again."""
    name = "/redirected/old.txt"
    pull.origin.answer(name, b"before the redirect", headers=LONG)
    await cached(pull, name)
    await pull.redirects(f"/{ZONE}{name} /{ZONE}/redirected/new.txt 301\n")
    try:
        resp = await pull.cdn.edge.get(f"/{ZONE}{name}", allow_redirects=False)
        assert resp.status == 301
        answer = await purge(pull, {"urls": [f"/{ZONE}{name}"]})
        assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
    finally:
        await pull.redirects("")
    pull.origin.answer(name, b"after the redirect", headers=LONG)
    resp = await pull.get(name)
    assert (await resp.read(), resp.headers["X-Cache"]) == (b"after the redirect", "MISS")


async def test_a_url_purge_reaches_a_copy_kept_before_a_rewrite_of_its_path_and_what_it_serves_now(pull: Pull) -> None:
    """A `_redirects` rewrite (200) serves another path's response at a URL: a purge of the URL names that path's
    copies, what its clients get now, and also the URL's own, kept before the rule came: once the rule went, those
    came back as a HIT though the URL was purged."""
    name, target = "/rewritten/old.txt", "/rewritten/new.txt"
    pull.origin.answer(name, b"before the rewrite", headers=LONG)
    pull.origin.answer(target, b"the rewrite's", headers=LONG)
    await cached(pull, name)
    await pull.redirects(f"/{ZONE}{name} /{ZONE}{target} 200\n")
    try:
        await cached(pull, target)
        resp = await pull.get(name)
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"the rewrite's", "HIT")
        answer = await purge(pull, {"urls": [f"/{ZONE}{name}"]})
        assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 2}
        resp = await pull.get(name)
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"the rewrite's", "MISS")
    finally:
        await pull.redirects("")
    pull.origin.answer(name, b"after the rewrite", headers=LONG)
    resp = await pull.get(name)
    assert (await resp.read(), resp.headers["X-Cache"]) == (b"after the rewrite", "MISS")


async def test_a_purge_naming_a_url_its_redirect_cannot_map_still_purges_and_is_acknowledged(pull: Pull) -> None:
    """A URL whose `_redirects` rule cannot build a location on its host (`/go//evil.example` under `/go/* /:splat`,
    400 InvalidPath to a request) raised that 400 in the edge's reading of the purge: the edge refused the whole push
    (400 to control), so the purge's other URLs were never purged (their copies still a HIT), the purge never
    acknowledged, and the edge stayed at the generation before it."""
    name = "/beside-unmappable.txt"
    pull.origin.answer(name, b"cached", headers=LONG)
    await cached(pull, name)
    await pull.redirects(f"/{ZONE}/go/* /:splat 302\n")
    try:
        answer = await purge(pull, {"urls": [f"/{ZONE}{name}", f"/{ZONE}/go//evil.example"]})
        assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
        resp = await pull.get(name)
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"cached", "MISS")
    finally:
        await pull.redirects("")


@pytest.mark.parametrize("name", ["a%2Fb.txt", "a%3Fb.txt", "a%2541.txt"])
async def test_a_url_purge_of_a_rewritten_url_with_escapes_reaches_what_its_requests_get(pull: Pull, name: str) -> None:
    """A request's path is matched against `_redirects` as sent, a purge URL's path was matched decoded: `%2F` read as
    `/`, `%3F` as the start of a query, `%25` as `%`, so the rewrite named another path than the one the URL's
    requests are answered from, and that copy stayed a HIT after the purge of the very URL they asked for."""
    source, target = "/rewritten-escapes/", "/rewritten-escapes-target/"
    pull.origin.answer(target + name, b"the rewrite's", headers=LONG)
    await pull.redirects(f"/{ZONE}{source}* /{ZONE}{target}:splat 200\n")
    try:
        await cached(pull, source + name)
        answer = await purge(pull, {"urls": [f"/{ZONE}{source}{name}"]})
        assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
        resp = await pull.get(source + name)
        assert (await resp.read(), resp.headers["X-Cache"]) == (b"the rewrite's", "MISS")
    finally:
        await pull.redirects("")


@pytest.mark.parametrize("withheld", ['no-cache="Cache-Tag"', 'private="Surrogate-Key"'])
async def test_a_tag_the_origin_withholds_from_clients_still_purges_the_copy_once_a_304_confirmed_it(
        pull: Pull, withheld: str) -> None:
    """A qualified no-cache="..." or private="..." keeps the origin's tag field out of the stored head, so clients
    never see it; the copy is tagged all the same, and stays so when a 304 (naming the tags again, or not)
    confirms it: read from the updated head alone, its tags went with the first revalidation, and a purge of
    them no longer reached it (a HIT of the copy the purge was made for)."""
    field = withheld.split('"')[1]
    for repeated in (True, False):
        name = f"/withheld/{field}-{repeated}.txt"
        tag = f"withheld-{field}-{repeated}".lower()
        head = {"Cache-Control": f"max-age=600, {withheld}", "ETag": '"w"'}

        async def handle(request: web.Request, head: dict[str, str] = head, tag: str = tag,
                         repeated: bool = repeated) -> web.StreamResponse:
            if request.headers.get("If-None-Match") == '"w"':
                return web.Response(status=304, headers={**head, field: tag} if repeated else head)
            return web.Response(body=b"withheld", headers={**head, field: tag})

        pull.origin.route(name, handle)
        await cached(pull, name)
        await purge(pull, {"urls": [f"/{ZONE}{name}"], "soft": True})
        assert (await pull.get(name)).headers["X-Cache"] == "REVALIDATED"
        resp = await pull.get(name)
        assert (resp.headers["X-Cache"], resp.headers.get(field)) == ("HIT", None), name
        await purge(pull, {"tags": [tag]})
        resp = await pull.get(name)
        assert (resp.headers["X-Cache"], await resp.read()) == ("MISS", b"withheld"), name
        assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests(name)] == [None, '"w"', None]


@pytest.mark.parametrize(("withheld", "other"), [("Cache-Tag", "Surrogate-Key"), ("Surrogate-Key", "Cache-Tag")])
async def test_a_304_naming_the_other_tag_field_keeps_the_tags_of_the_field_the_origin_withholds(
        pull: Pull, withheld: str, other: str) -> None:
    """A 304's fields replace the stored fields of the same name only (RFC 9111 3.2): one naming tags in the other
    field leaves the copy the tags of the field it does not name, as it does when that field is in the stored head.
    The copy's withheld field (a qualified no-cache="...") is in no head, and those tags went with the 304: a purge
    of them left the copy cached (a HIT of what the purge was made for)."""
    name = f"/withheld-other/{withheld}.txt"
    kept, added = f"kept-{withheld}".lower(), f"added-{other}".lower()
    head = {"Cache-Control": f'max-age=600, no-cache="{withheld}"', "ETag": '"w"'}

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"w"':
            return web.Response(status=304, headers={**head, other: added})
        return web.Response(body=b"withheld", headers={**head, withheld: kept})

    pull.origin.route(name, handle)
    await cached(pull, name)
    await purge(pull, {"urls": [f"/{ZONE}{name}"], "soft": True})
    assert (await pull.get(name)).headers["X-Cache"] == "REVALIDATED"
    assert (await pull.get(name)).headers["X-Cache"] == "HIT"
    answer = await purge(pull, {"tags": [kept]})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"
    await purge(pull, {"urls": [f"/{ZONE}{name}"], "soft": True})
    assert (await pull.get(name)).headers["X-Cache"] == "REVALIDATED"
    await purge(pull, {"tags": [added]})  # and the 304's own tags
    assert (await pull.get(name)).headers["X-Cache"] == "MISS"


async def test_the_answers_edges_are_as_the_openapi_document_describes_them(pull: Pull) -> None:
    answer = await purge(pull, {"tags": ["no-such-tag"]})
    schema = document()["paths"]["/api/purge"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    edges = schema["properties"]["edges"]
    assert set(answer["edges"]) == set(edges["properties"])
    # acknowledged, pending and total count edge nodes; entriesRemoved and latencyMs are keyed by worker.
    assert (answer["edges"]["acknowledged"], answer["edges"]["pending"], answer["edges"]["total"]) == (["edge-t"], [], 1)
    assert list(answer["edges"]["entriesRemoved"]) == list(answer["edges"]["latencyMs"]) == ["edge-t/0"]
    assert "<node>/<worker>" in edges["description"]


async def test_a_tag_purge_within_a_zone_leaves_another_zones_copies_of_the_tag_cached(pull: Pull) -> None:
    """Two zones' origins tag a page `home`: a purge of `home` within one zone removes that zone's copy (and counts
    it), the other zone's stays a HIT, as Cloudflare and Fastly purge a tag within one zone or service."""
    other, name = await other_zone(pull), "/scoped/home.html"
    pull.origin.answer(name, b"home page", headers={**LONG, "Cache-Tag": "home"})
    for zone in (ZONE, other):
        assert [await x_cache(pull, f"/{zone}{name}") for _ in range(2)] == ["MISS", "HIT"], zone
    answer = await purge(pull, {"tags": ["home"], "zone": other})
    assert (answer["purged"], answer["mode"], answer["zone"]) == (["home"], "tags", other)
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
    assert [await x_cache(pull, f"/{zone}{name}") for zone in (ZONE, other)] == ["HIT", "MISS"]


async def test_a_soft_tag_purge_within_a_zone_marks_that_zones_copy_stale_only(pull: Pull) -> None:
    other, name = await other_zone(pull), "/scoped/soft-home.html"

    async def handle(request: web.Request) -> web.StreamResponse:
        fields = {**LONG, "ETag": '"home"', "Cache-Tag": "soft-home"}
        if request.headers.get("If-None-Match") == '"home"':
            return web.Response(status=304, headers=fields)
        return web.Response(body=b"home page", headers=fields)

    pull.origin.route(name, handle)
    for zone in (ZONE, other):
        assert [await x_cache(pull, f"/{zone}{name}") for _ in range(2)] == ["MISS", "HIT"], zone
    answer = await purge(pull, {"tags": ["soft-home"], "zone": ZONE, "soft": True})
    assert answer["edges"]["entriesRemoved"] == {"edge-t/0": 1}
    assert [await x_cache(pull, f"/{zone}{name}") for zone in (ZONE, other)] == ["REVALIDATED", "HIT"]
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests(name)] == [None, None, '"home"']


async def test_a_fill_under_way_is_kept_when_a_tag_purge_within_another_zone_is_made_meanwhile(pull: Pull) -> None:
    """The fill's answer carries the tag, but the purge names another zone's copies: it is stored (the next request
    a HIT), where a purge naming it (the same tag unscoped, or within its zone) keeps it out."""
    other, name = await other_zone(pull), "/scoped/held.bin"
    body = bytes(range(256)) * 8
    release = pull.origin.hold(name, body, {**LONG, "Cache-Tag": "held-home"})
    filling = asyncio.create_task(pull.get(name))

    async def fill_asked() -> bool:
        return pull.origin.count(name) == 1

    await wait_until(fill_asked, "the fill under way")
    try:
        await purge(pull, {"tags": ["held-home"], "zone": other})
    finally:
        release.set()
    first = await filling
    assert (first.status, first.headers["X-Cache"]) == (200, "MISS")
    resp = await pull.get(name)
    assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, body, "HIT")
    assert pull.origin.count(name) == 1


async def test_a_tag_purge_within_a_zone_reaches_its_image_variants_only(patient_pull: Pull) -> None:
    pull = patient_pull  # its subject is not the 1 s first byte, which a loaded machine took from a source fetch
    other, name = await other_zone(pull), "/scoped/picture.png"
    pull.origin.answer(name, solid_png(40, 30, (200, 30, 30)),
                       headers={**LONG, "Content-Type": "image/png", "Cache-Tag": "home-picture"})

    def variant(zone: str) -> str:
        return f"/api/transform?url=/{zone}{name}&w=20&format=png"

    for zone in (ZONE, other):
        assert [await x_cache(pull, variant(zone)) for _ in range(2)] == ["MISS", "HIT"], zone
    await purge(pull, {"tags": ["home-picture"], "zone": ZONE})
    assert [await x_cache(pull, variant(zone)) for zone in (ZONE, other)] == ["MISS", "HIT"]
