"""`Vary` and the secondary cache key of a pull zone (RFC 9111 4.1) through a real control and edge app and an
origin the tests script (the `pull` fixture, tests/support/origins.py): which stored response a request
selects when the origin's Vary changes from one response to the next; what a client sees and what the origin
was asked."""

from __future__ import annotations

import pytest
import pytest_asyncio
from aiohttp import web

from tests.support.origins import LONG, Pull

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pull(patient_pull: Pull) -> Pull:
    """The patient pull zone (tests/edge/routes/conftest.py): no origin here withholds its head, and no test is about
    the first-byte time, which a loaded machine's loop delays took from origins that answer at once (a 504)."""
    return patient_pull


async def test_variants_of_an_earlier_vary_are_never_selected_once_the_url_has_had_another_response(
        pull: Pull) -> None:
    """The origin answered per Accept-Language (fr, en kept), then without Vary (kept as the URL's response,
    answered to everyone), then per Accept-Language again. The edge selected the fr and en variants of the first
    time again and answered them as HITs: content older than the response those clients were answered in between,
    which the origin had replaced. Likewise when the Vary names other fields in between. Each time the URL's
    entry is written where it did not name the same fields, the variants under the earlier one are retired."""
    served = {"vary": "Accept-Language"}
    versions: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        vary = served["vary"]
        versions.append(vary)
        if not vary:
            return web.Response(text=f"v{len(versions)} for all", headers=LONG)
        return web.Response(text=f"v{len(versions)} {request.headers.get('Accept-Language', '-')}",
                            headers={**LONG, "Vary": vary})

    pull.origin.route("/vary/changes.txt", handle)

    async def asked(lang: str, **headers: str) -> tuple[str, str]:
        resp = await pull.get("/vary/changes.txt", headers={"Accept-Language": lang, **headers})
        assert resp.status == 200
        return resp.headers["X-Cache"], await resp.text()

    assert [await asked(lang) for lang in ("fr", "en", "fr")] == [
        ("MISS", "v1 fr"), ("MISS", "v2 en"), ("HIT", "v1 fr")]
    served["vary"] = ""
    assert [await asked(lang) for lang in ("de", "fr", "en")] == [
        ("MISS", "v3 for all"), ("HIT", "v3 for all"), ("HIT", "v3 for all")]
    served["vary"] = "Accept-Language"
    assert await asked("de", **{"Cache-Control": "no-cache"}) == ("MISS", "v4 de")
    assert [await asked(lang) for lang in ("fr", "en", "de", "fr")] == [
        ("MISS", "v5 fr"), ("MISS", "v6 en"), ("HIT", "v4 de"), ("HIT", "v5 fr")]
    # Another field list in between retires them too: the origin's Vary named Accept-Encoding for a while.
    served["vary"] = "Accept-Encoding"
    assert await asked("it", **{"Cache-Control": "no-cache"}) == ("MISS", "v7 it")
    served["vary"] = "Accept-Language"
    assert await asked("it", **{"Cache-Control": "no-cache"}) == ("MISS", "v8 it")
    assert [await asked(lang) for lang in ("fr", "it")] == [("MISS", "v9 fr"), ("HIT", "v8 it")]
    assert pull.origin.count("/vary/changes.txt") == 9


async def test_a_304_that_begins_to_vary_the_url_confirms_the_stored_response_for_its_own_request_only(
        pull: Pull) -> None:
    """An English-only origin (one response, no Vary, always revalidated) adds a French version and varies on
    Accept-Language: the English one keeps its ETag, so an English client's revalidation is answered 304 with
    `Vary: Accept-Language` and ten minutes of freshness. The edge took that 304 into the stored head as for
    any 304, and the copy stored for every request (no variant of any field) then answered French clients as a
    HIT, in English, for those ten minutes. The 304 confirms the copy for the request it answered only: that
    request is answered with it, and the copy is dropped, so the next requests are asked for whole and kept per
    Accept-Language (not revalidated one by one, as a copy left stale would be)."""
    varies = {"now": False}

    async def handle(request: web.Request) -> web.StreamResponse:
        lang = request.headers.get("Accept-Language", "en") if varies["now"] else "en"
        headers = {"ETag": f'"{lang}-1"', "Cache-Control": "max-age=0"}
        if varies["now"]:
            headers.update({**LONG, "Vary": "Accept-Language"})
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
        return web.Response(text=f"in {lang}", headers=headers)

    pull.origin.route("/vary/begins.txt", handle)

    async def asked(lang: str) -> tuple[str, str]:
        resp = await pull.get("/vary/begins.txt", headers={"Accept-Language": lang})
        assert resp.status == 200
        return resp.headers["X-Cache"], await resp.text()

    assert await asked("en") == ("MISS", "in en")
    varies["now"] = True
    assert await asked("en") == ("REVALIDATED", "in en")
    assert [await asked(lang) for lang in ("fr", "fr", "en", "en", "fr")] == [
        ("MISS", "in fr"), ("HIT", "in fr"), ("MISS", "in en"), ("HIT", "in en"), ("HIT", "in fr")]
    assert [seen.headers.get("If-None-Match") for seen in pull.origin.requests("/vary/begins.txt")] == [
        None, '"en-1"', None, None]


async def test_a_field_that_is_no_list_selects_its_variant_by_its_value_as_sent(pull: Pull) -> None:
    """The origin answers per User-Agent, a field that is no comma-separated list: `Tool, Kit/1` and `Tool,Kit/1`
    are two values it may tell apart. The edge read every field Vary names as a list, so the second client got the
    first one's variant as a HIT. A list field (Accept-Language) is still one variant whatever its spacing."""
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"for {request.headers.get('User-Agent')} in "
                                 f"{request.headers.get('Accept-Language')}",
                            headers={**LONG, "Vary": "User-Agent, Accept-Language"})

    pull.origin.route("/vary/agent.txt", handle)

    async def asked(agent: str, lang: str) -> tuple[str, str]:
        resp = await pull.get("/vary/agent.txt", headers={"User-Agent": agent, "Accept-Language": lang})
        assert resp.status == 200
        return resp.headers["X-Cache"], await resp.text()

    assert await asked("Tool, Kit/1", "fr, en") == ("MISS", "for Tool, Kit/1 in fr, en")
    assert await asked("Tool,Kit/1", "fr, en") == ("MISS", "for Tool,Kit/1 in fr, en")
    assert await asked("Tool, Kit/1", "fr,en") == ("HIT", "for Tool, Kit/1 in fr, en")
    assert await asked("Tool,Kit/1", "fr ,  en") == ("HIT", "for Tool,Kit/1 in fr, en")
    assert pull.origin.count("/vary/agent.txt") == 2
