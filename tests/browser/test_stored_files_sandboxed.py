"""Uploaded SVG and HTML opened in headless Chromium on the edge's CDN path (top-level navigation,
the origin that also serves /api) get no cookie and no API: their own scripts do not run, and even
script the test injects into the document is refused both.

The origin holds a session cookie first (`cdn_session`, as the dashboard's sign-in will set), and a
plain JSON page of the same origin can read it: the same check that passes there fails on the
stored files only because of what the edge sends with them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser.headless_chromium import HeadlessChromium
from tests.edge.routes.conftest import ZONE, CdnFactory

pytestmark = pytest.mark.browser

COOKIE, SECRET = "cdn_session", "s3ssion-t0ken-of-an-operator"
# What a hostile file tries, synchronously (so it has finished when the document has loaded):
# read the cookie, and call the API with the browser's credentials.
ATTACK = """
window.__attack = {};
try { window.__attack.cookie = document.cookie; } catch (e) { window.__attack.cookie = 'blocked: ' + e.name; }
try {
  var xhr = new XMLHttpRequest();
  xhr.open('GET', '/api/core/zones', false);
  xhr.withCredentials = true;
  xhr.send();
  window.__attack.api = xhr.status + ' ' + xhr.responseText;
} catch (e) { window.__attack.api = 'blocked: ' + e.name; }
"""
HOSTILE = {
    f"{ZONE}/v1/logos/hostile.svg": (
        '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><script><![CDATA['
        + ATTACK + ']]></script><rect width="40" height="40" fill="#c00"/></svg>').encode(),
    f"{ZONE}/v1/titles/hostile.html": (
        "<!doctype html><html><head><title>hostile</title></head><body><p>hello</p><script>"
        + ATTACK + "</script></body></html>").encode(),
}
# The same attempt made by the test from inside the loaded document (DevTools evaluates it there).
PROBE = """(async () => {
  const out = {};
  try { out.cookie = document.cookie; } catch (e) { out.cookie = 'blocked: ' + e.name; }
  try {
    const resp = await fetch('/api/core/zones', {credentials: 'include'});
    out.api = resp.status + ' ' + await resp.text();
  } catch (e) { out.api = 'blocked: ' + e.name; }
  return out;
})()"""


async def own_result(browser: HeadlessChromium) -> Any:
    return await browser.evaluate("window.__attack === undefined ? null : JSON.stringify(window.__attack)")


async def test_uploaded_svg_and_html_get_no_cookie_and_no_api(chromium: str, make_cdn: CdnFactory,
                                                             tmp_path: Path) -> None:
    cdn = await make_cdn()
    for path, body in HOSTILE.items():
        await cdn.upload(path, body)
    origin = str(cdn.edge.make_url("")).rstrip("/")
    browser = HeadlessChromium(chromium, tmp_path / "profile")
    try:
        await browser.open("about:blank")
        await browser.command("Network.enable")
        await browser.set_cookie(origin + "/", COOKIE, SECRET)

        # Control: an ordinary page of this origin does see the cookie and reaches the API.
        await browser.navigate(f"{origin}/api/health")
        seen = await browser.evaluate(PROBE)
        assert SECRET in seen["cookie"], seen
        assert seen["api"].startswith("401 "), seen  # answered (no key): the page could read it

        for path in HOSTILE:
            url = f"{origin}/{path}"
            await browser.navigate(url)
            ran = await own_result(browser)
            assert ran is None, f"the stored file's own script ran on {path}: {ran}"
            probe = await browser.evaluate(PROBE)
            assert probe["cookie"].startswith("blocked: "), (path, probe)
            assert probe["api"].startswith("blocked: "), (path, probe)
            assert SECRET not in json.dumps(probe)
    finally:
        await browser.close()
