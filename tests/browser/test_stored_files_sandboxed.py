"""Uploaded SVG and HTML opened in headless Chromium on the edge's CDN path (top-level navigation,
the origin that also serves /api) get no cookie and no API: their own scripts do not run, and even
script the test injects into the document is refused both.

The origin holds a session cookie first (`cdn_session`, as the dashboard's sign-in sets), and a
plain JSON page of the same origin can read it: the same check that passes there fails on the
stored files only because of what the edge sends with them.

`_headers` rules that would make the browser run a file as HTML (`Content-Type: text/plain,
text/html`, or two Content-Type lines) are refused, and error answers that quote a path never run
either. On the dashboard's own origin, where the session is honoured, no uploaded `.js` or `.html`
runs: storage downloads are inert there and CDN paths are not served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assetcdn.control.identity.service import SESSIONS
from tests.browser.headless_chromium import HeadlessChromium
from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import ACCOUNT, serve_dashboard
from tests.support.sockets import loopback_listener
from tests.support.wait import wait_until

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
try {
  var mint = new XMLHttpRequest();
  mint.open('POST', '/api/tokens', false);
  mint.setRequestHeader('Content-Type', 'application/json');
  mint.send(JSON.stringify({name: 'stolen', scopes: ['storage:write']}));
  window.__attack.mint = mint.status;
} catch (e) { window.__attack.mint = 'blocked: ' + e.name; }
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


HTML_AS_TEXT = ("<!doctype html><html><head><title>hostile</title></head><body><script>"
                + ATTACK + "</script></body></html>").encode()


@pytest.mark.parametrize("rule", ["Content-Type: text/plain, text/html",
                                  "Content-Type: text/plain\n  Content-Type: text/html"])
async def test_header_rules_and_error_answers_cannot_turn_the_sandbox_off(chromium: str, make_cdn: CdnFactory,
                                                                          tmp_path: Path, rule: str) -> None:
    cdn = await make_cdn()
    path = f"{ZONE}/v1/titles/notes.txt"
    await cdn.upload(path, HTML_AS_TEXT)
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": f"/{ZONE}/v1/*\n  X-Robots-Tag: noindex\n  {rule}\n"})
    if resp.status == 200:  # published: wait for the edge to apply it, so the browser sees what it does
        async def applied() -> bool:
            return bool(cdn.node.config.rules.headers)
        await wait_until(applied, "the rules reaching the edge")
    else:
        assert resp.status == 400, await resp.text()
    origin = str(cdn.edge.make_url("")).rstrip("/")
    browser = HeadlessChromium(chromium, tmp_path / "profile")
    try:
        await browser.open("about:blank")
        await browser.set_cookie(origin + "/", COOKIE, SECRET)
        for url in (f"{origin}/{path}",
                    # An error answer that quotes the path: its markup never runs.
                    f"{origin}/{ZONE}/v1/titles/%3Cimg%20src=x%20onerror=window.__attack=document.cookie%3E.txt",
                    f"{origin}/{ZONE}/v1/titles/%3Cimg%20src=x%20onerror=window.__attack=document.cookie%3E/"):
            await browser.navigate(url)
            assert await own_result(browser) is None, f"script ran on {url}"
    finally:
        await browser.close()


async def test_on_the_dashboard_origin_uploaded_files_cannot_act_with_the_session(
        chromium: str, make_cdn: CdnFactory, tmp_path: Path) -> None:
    listener = loopback_listener()
    dashboard = f"http://127.0.0.1:{listener.getsockname()[1]}"
    cdn = await make_cdn(ASSETCDN_SERVER_DASHBOARD_PORT=str(listener.getsockname()[1]))
    await serve_dashboard(cdn.control.server, listener)
    html, script = f"{ZONE}/v1/titles/evil.html", f"{ZONE}/v1/titles/evil.js"
    await cdn.upload(html, HOSTILE[f"{ZONE}/v1/titles/hostile.html"])
    await cdn.upload(script, ATTACK.encode())
    session = cdn.control.app[SESSIONS].issue()
    edge = str(cdn.edge.make_url("")).rstrip("/")
    browser = HeadlessChromium(chromium, tmp_path / "profile")
    try:
        await browser.open("about:blank")
        await browser.set_cookie(dashboard + "/", COOKIE, session)
        # The session works on the dashboard's origin: its page opens and the API answers it.
        await browser.navigate(f"{dashboard}/dashboard/")
        await browser.wait_for("!!document.querySelector('#nav a')")
        assert await browser.evaluate("fetch('/api/tokens').then(r => r.status)") == 200
        # Script the dashboard's CSP allows ('self') cannot be an upload: a <script> naming the storage
        # download (as an injection into the page would) is refused, and CDN paths are not served here.
        loaded = await browser.evaluate(f"""new Promise(done => {{
            const tag = document.createElement('script');
            tag.src = '/api/storage/{script}';
            tag.onload = () => done('loaded'); tag.onerror = () => done('refused');
            document.head.append(tag);
        }})""")
        assert loaded == "refused" and await own_result(browser) is None
        assert await browser.evaluate(f"fetch('/{html}').then(r => r.status)") == 404
        # Opened on the dashboard's origin, the stored page is a download: it never renders there.
        navigation = await browser.command("Page.navigate", url=f"{dashboard}/api/storage/{html}")
        assert navigation.get("errorText") == "net::ERR_ABORTED", navigation  # handed to the download manager
        assert await browser.evaluate("location.href") != f"{dashboard}/api/storage/{html}"
        assert await own_result(browser) is None
        # On the edge (the browser sends it the cookie too): sandboxed, and the session opens nothing.
        await browser.navigate(f"{edge}/{html}")
        assert await own_result(browser) is None
        probe = await browser.evaluate(PROBE)
        assert probe["api"].startswith("blocked: "), probe
        await browser.navigate(f"{edge}/api/tokens")
        assert json.loads(await browser.evaluate("document.body.innerText"))["error"]["code"] == "Unauthorized"
    finally:
        await browser.close()
    listed = await (await cdn.control.get("/api/tokens", headers=ACCOUNT)).json()
    assert listed["Count"] == 0  # nothing was minted with the operator's session
