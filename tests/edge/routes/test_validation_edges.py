"""Validation edges seen through an edge: paths with a newline reach control (and its 400, or the
delete of a zone named that way); numbers in query strings are ASCII digits and nothing more."""

from __future__ import annotations

from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.routes.zones import zone_scaffold
from tests.control.expect import expect_error
from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import ACCESS, ACCOUNT
from tests.support.images import solid_png

IMAGE = f"{ZONE}/v1/banners/red.png"


async def test_api_paths_with_a_newline_reach_control(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/logos/x.svg%0A", data=b"<svg/>", headers=ACCESS)
    await expect_error(resp, 400, "InvalidPath")
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/logos/.GIT/x.svg", data=b"<svg/>", headers=ACCESS)
    await expect_error(resp, 400, "InvalidPath")
    # A zone that the old name pattern let in ("nlzone\n") can be deleted through the edge.
    await cdn.control.app[PUBLISHER].commit(zone_scaffold("nlzone\n"), "a zone the old pattern let through")
    resp = await cdn.edge.delete("/api/core/zones/nlzone%0A", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    listed = await (await cdn.edge.get("/api/core/zones", headers=ACCOUNT)).json()
    assert [z["Name"] for z in listed] == [ZONE]


async def test_placeholder_numbers_are_ascii_digits_only(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(IMAGE, solid_png(64, 32, (200, 20, 20)))
    assert (await cdn.edge.get(f"/api/lqip?url=/{IMAGE}&size=16")).status == 200
    # str.isdigit() accepts superscripts, which int() refuses: these answered 500.
    for query in ("size=%C2%B2", "blur=%C2%B9", "size=1%C2%B2"):
        resp = await cdn.edge.get(f"/api/lqip?url=/{IMAGE}&{query}")
        await expect_error(resp, 400, "InvalidParameter")


async def test_image_numbers_are_digits_alone_and_read_parameters_come_once(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(IMAGE, solid_png(64, 32, (200, 20, 20)))
    # `+` in a query is a space: w=+5 and w=%205 are " 5", and %2B5 is "+5"; none is the number the reference
    # documents (digits), and each made a variant of its own URL, cached a year.
    for number in ("+5", "%205", "5%20", "%2B5"):
        resp = await cdn.edge.get(f"/api/transform?url=/{IMAGE}&w={number}")
        body = await resp.json()
        assert resp.status == 400 and "Invalid parameter 'w'" in body["error"], (number, body)
        await expect_error(await cdn.edge.get(f"/api/lqip?url=/{IMAGE}&size={number}"), 400, "InvalidParameter")
    # A parameter given twice is ambiguous: the first one was taken, silently.
    for query in (f"url=/{IMAGE}&w=5&w=6", f"url=/{IMAGE}&url=/{ZONE}/v1/banners/other.png&w=5",
                  f"url=/{IMAGE}&w=5&format=png&format=webp"):
        resp = await cdn.edge.get(f"/api/transform?{query}")
        body = await resp.json()
        assert resp.status == 400 and "more than once" in body["error"], (query, body)
    resp = await cdn.edge.get(f"/api/lqip?url=/{IMAGE}&size=16&size=32")
    assert (await expect_error(resp, 400, "InvalidParameter"))["error"]["target"] == "size"
    resp = await cdn.edge.get(f"/api/auto?path=/{ZONE}/v1/banners/red&path=/{ZONE}/v1/banners/blue")
    assert resp.status == 400 and "more than once" in (await resp.json())["error"]
    # The documented forms answer as before, and a parameter the endpoint does not read may repeat (a cache buster).
    assert (await cdn.edge.get(f"/api/transform?url=/{IMAGE}&w=05&v=1&v=2")).status == 200
    assert (await cdn.edge.get(f"/api/lqip?url=/{IMAGE}&size=&v=1&v=2")).status == 200
    assert (await cdn.edge.get(f"/api/auto?path=/{ZONE}/v1/banners/red&v=1&v=2")).status == 200
