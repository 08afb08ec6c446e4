"""The dashboard in headless Chromium, through a real edge in front of a real control plane.

An operator's day: sign in with the password, register a passkey on Chromium's virtual
authenticator (CDP WebAuthn), sign out, sign in with the passkey, create a zone, drop an image
into it, see it previewed, purge it and see each edge's acknowledgement, see the request in the
live tail; on the way, every other view is opened and checked, and a screenshot of each is taken
(into ASSETCDN_SCREENSHOTS_DIR when set, e.g. docs/screenshots, else into the test's directory).
A second test plays a stock video's HLS preview with the vendored hls.js, a third a zone's own playlist from the
edge's CDN path (another origin than the dashboard's).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pyvips
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.control.analytics.hits import Hit
from assetcdn.control.analytics.service import ANALYTICS
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.records.request_log import control_entry
from assetcdn.control.records.service import REQUEST_LOG
from assetcdn.control.storage.service import GIT
from assetcdn.control.video.demo import write_synthetic_video
from assetcdn.control.video.service import VIDEO_INGEST
from assetcdn.control.webhooks.service import WEBHOOK_DELIVERIES
from assetcdn.edge.app import EdgeIdentity
from assetcdn.edge.app_keys import NODE
from assetcdn.shared.config import load_settings
from tests.browser.dashboard_driver import DashboardBrowser
from tests.control.identity.signin_client import PASSWORD, SIGNIN_SECRETS
from tests.support.control import ACCESS, ACCOUNT, serve_dashboard
from tests.support.sockets import loopback_listener
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

ZONE = "gallery"
IMAGE = "sunset.png"
SECRETS = dataclasses.replace(SIGNIN_SECRETS, webhook_secret_key="test-webhook-secret-key")


@dataclass
class Site:
    base: str          # http://localhost:<dashboard port>: the dashboard's own origin (passkeys need a domain name)
    edge_url: str      # http://127.0.0.1:<edge port>: the edge's public URL (where files are delivered)
    control: TestServer
    edge: TestServer
    receiver: str      # http://127.0.0.1:<port>: /ok answers 204, /down 503 (webhook targets)
    received: dict[str, int]  # delivery attempts each of them received
    delivered: set[str]       # the deliveries /ok received (X-Webhook-Delivery): delivery is at least once, and
                              # an attempt answered after the sender's timeout on a loaded machine comes again


async def create_zone(site: Site, client: ClientSession) -> None:
    """The zone ZONE, made through control's API (AccountKey)."""
    resp = await client.post(site.control.make_url("/api/core/zones"), json={"Name": ZONE}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    configured = os.environ.get("ASSETCDN_SCREENSHOTS_DIR")
    return Path(configured) if configured else tmp_path / "screenshots"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    """Control (with its dashboard listener) plus one edge; their ports are chosen before control starts,
    so the edge's public URL and the dashboard's port are in control's configuration."""
    listener, dashboard_listener = loopback_listener(), loopback_listener()
    port, dashboard_port = listener.getsockname()[1], dashboard_listener.getsockname()[1]
    settings = load_settings(environ={"ASSETCDN_SERVER_PUBLIC_URL": f"http://127.0.0.1:{port}",
                                      "ASSETCDN_SERVER_DASHBOARD_PORT": str(dashboard_port),
                                      "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
                                      "ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2",
                                      # webhook targets on loopback, and dead letters after two quick retries
                                      "ASSETCDN_WEBHOOKS_ALLOW_LOOPBACK": "true",
                                      "ASSETCDN_WEBHOOKS_RETRY_DELAYS_S": "0.1,0.1"})
    received = {"ok": 0, "down": 0}
    delivered: set[str] = set()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        name = request.match_info["name"]
        received[name] += 1
        if name == "ok":
            delivered.add(request.headers["X-Webhook-Delivery"])
        return web.Response(status=204 if name == "ok" else 503)

    receiver = web.Application()
    receiver.router.add_post("/{name:ok|down}", answer)
    receiver_server = TestServer(receiver)
    await receiver_server.start_server()
    control_server = TestServer(control.app.create_app(settings, SECRETS, tmp_path / "data"))
    await control_server.start_server()
    await serve_dashboard(control_server, dashboard_listener)
    identity = EdgeIdentity(name="edge-0", worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_server = TestServer(edge.app.create_app(settings, SECRETS, identity), socket_factory=lambda *_: listener)
    await edge_server.start_server()

    async def registered() -> bool:
        return bool(control_server.app[REGISTRY].live_edges())

    try:
        await wait_until(registered, "the edge registering with control")
        yield Site(f"http://localhost:{dashboard_port}", f"http://127.0.0.1:{port}", control_server, edge_server,
                   str(receiver_server.make_url("")).rstrip("/"), received, delivered)
    finally:
        await edge_server.close()
        await control_server.close()
        await receiver_server.close()



@pytest.fixture
async def browser(chromium: str, tmp_path: Path) -> AsyncIterator[DashboardBrowser]:
    instance = DashboardBrowser(chromium, tmp_path / "profile")
    try:  # a failed start still stops the Chromium it launched
        await instance.open("about:blank")
        yield instance
    finally:
        await instance.close()


def png(width: int = 640, height: int = 400) -> bytes:
    """A sunset-like gradient with a disc: an image whose preview is plainly visible."""
    x, y = pyvips.Image.xyz(width, height).bandsplit()
    sky = (y / height * 180).cast("uchar")
    red = (255 - sky * 0.2).cast("uchar")
    green = (90 + sky * 0.6).cast("uchar")
    blue = (60 + sky).cast("uchar")
    image = red.bandjoin([green, blue])
    disc = ((x - width * 0.5) ** 2 + (y - height * 0.62) ** 2) < (height * 0.2) ** 2
    image = disc.ifthenelse([255, 214, 102], image)
    return bytes(image.pngsave_buffer(compression=6))


async def seed_past_traffic(site: Site) -> None:
    """Four weeks of earlier deliveries (before today), so that the charts have a history to show.
    Today's numbers are the real requests this test makes."""
    rng = random.Random(11)
    paths = [(f"{ZONE}/v1/logos/{IMAGE}", 6590), (f"{ZONE}/v1/banners/hero.webp", 48200),
             (f"{ZONE}/v1/icons/icon-192.png", 3100), ("stocks/images/mountains.avif", 91000)]
    countries = ["DE", "US", "FR", "JP", "BR", "GB", "XX"]
    today = time.time() // 86400 * 86400
    hits = []
    for day in range(1, 29):
        for _ in range(rng.randint(40, 90) + (28 - day) * 3):
            path, size = rng.choices(paths, weights=[8, 4, 2, 1])[0]
            status = rng.choices([200, 304, 404], weights=[90, 6, 4])[0]
            hits.append(Hit(timestamp=today - day * 86400 + rng.randint(0, 86399),
                            path=path if status != 404 else f"{ZONE}/v1/logos/missing.png", zone=path.split("/")[0],
                            status=status, bytes=size if status == 200 else 0,
                            cache=rng.choices(["HIT", "MISS"], weights=[min(60 + 40 * (28 - day) // 28, 95), 25])[0],
                            country=rng.choices(countries, weights=[9, 7, 4, 3, 2, 2, 1])[0]))
    await site.control.app[ANALYTICS].record_hits(hits)


async def sign_in_with_password(page: DashboardBrowser, base: str) -> None:
    await page.goto(f"{base}/dashboard/login")
    await page.fill("#password", PASSWORD)
    await page.js("document.querySelector('#password-form button[type=submit]').click()")
    await page.wait_for("location.pathname !== '/dashboard/login' && document.readyState === 'complete'")


async def open_view(page: DashboardBrowser, base: str, route: str, ready: str) -> None:
    await page.goto(f"{base}/dashboard/#/{route}")
    await page.wait_for(ready)


async def test_an_operators_day(site: Site, browser: DashboardBrowser, shots: Path) -> None:
    page, base = browser, site.base
    await seed_past_traffic(site)

    # Not signed in: the dashboard sends to the sign-in page.
    await page.command("Page.navigate", url=f"{base}/dashboard/")
    await page.wait_for("location.pathname === '/dashboard/login' && !!document.getElementById('password')")

    # 1. Password, then a passkey from the Passkeys view on the virtual authenticator.
    await sign_in_with_password(page, base)
    await page.command("WebAuthn.enable")
    await page.command("WebAuthn.addVirtualAuthenticator", options={
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
        "isUserVerified": True, "automaticPresenceSimulation": True})
    await open_view(page, base, "passkeys", "!!document.querySelector('#new-passkey-add:not([disabled])')"
                                            " && !!document.querySelector('#passkey-table .empty')")
    await page.fill("#new-passkey-name", "Virtual key")
    await page.click("#new-passkey-add")
    await page.wait_for("!!document.querySelector('#passkey-table tr[data-name=\"Virtual key\"]')")

    # 2. Sign out: back to the sign-in page, and the API no longer answers the browser.
    await page.click("#sign-out")
    await page.wait_for("location.pathname === '/dashboard/login' && document.readyState === 'complete'")
    assert await page.js("fetch('/api/dashboard/status').then(r => r.status)") == 401

    # 3. Sign in with the passkey: the dashboard opens.
    await page.wait_for("!!window.assetcdnPasskeys && !document.getElementById('passkey-signin').disabled")
    await page.click("#passkey-signin")
    await page.wait_for("location.pathname === '/dashboard/' && !!document.querySelector('#nav a.active')")

    # 4. Create a zone (and a second one); a name the API refuses is explained next to the form.
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    for name in (ZONE, "brand", "old-site", "dashboard"):
        await page.fill("#zone-name", name)
        await page.click("#zone-create button[type=submit]")
        if name == "dashboard":
            await page.wait_for("document.getElementById('zone-error').textContent.includes('reserved')")
        else:
            await page.wait_for(f"!!document.querySelector('#zone-list tr[data-zone=\"{name}\"]')")

    # 4b. Give "brand" an origin in its origin panel: it becomes a pull zone (the API says so, and its row);
    # then stop pulling. The origin is a name under .example (never looked up here: no edge asks it anything).
    await page.click("#zone-list tr[data-zone=\"brand\"] button[data-action=origin]")
    await page.wait_for("!!document.querySelector('#origin-form') && "
                        "document.getElementById('origin-state').textContent.includes('stored files')")
    await page.fill("#origin-url", "https://origin.example.com/assets")
    await page.fill("#origin-headers", "X-Origin-Secret: s3cret")
    await page.click("#origin-form button[type=submit]")
    await page.wait_for("document.getElementById('origin-state').textContent.includes('pulls from https://origin.example.com/assets')"
                        " && document.querySelector('#zone-list tr[data-zone=\"brand\"] td.kind').textContent.includes('pull')")
    origin = await page.js("fetch('/api/core/zones/brand/origin').then(r => r.json())")
    assert origin["Origin"]["Url"] == "https://origin.example.com/assets"
    assert origin["Origin"]["RequestHeaders"] == {"X-Origin-Secret": "(set)"}   # never shown back
    # Its Files view says it pulls, and offers no upload (the API would refuse it: 409 PullZone).
    await open_view(page, base, "files/brand/v1", "!!document.querySelector('#pull-notice')")
    assert "https://origin.example.com/assets" in await page.text("#pull-notice")
    assert await page.js("document.getElementById('upload-button').disabled") is True
    await open_view(page, base, "zones", "!!document.querySelector('#zone-list tr[data-zone=\"brand\"]')")
    await page.click("#zone-list tr[data-zone=\"brand\"] button[data-action=origin]")
    await page.wait_for("!!document.querySelector('#origin-form') && "
                        "document.getElementById('origin-state').textContent.includes('pulls from')")
    await page.click("#origin-remove")
    await page.wait_for("!!document.querySelector('dialog[open]')")
    await page.click("dialog button[data-action=true]")
    await page.wait_for("document.getElementById('origin-state').textContent.includes('stored files')")
    assert await page.js("fetch('/api/core/zones/brand/origin').then(r => r.status)") == 404

    # 5. Drop an image into v1/logos: the upload shows progress and the file appears.
    await open_view(page, base, f"files/{ZONE}/v1/logos", "!!document.querySelector('#file-list .empty')")
    image = png()
    await page.js(f"""(() => {{
        const bytes = Uint8Array.from(atob({json.dumps(base64.b64encode(image).decode())}), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], {json.dumps(IMAGE)}, {{type: 'image/png'}}));
        const zone = document.getElementById('dropzone');
        for (const type of ['dragenter', 'dragover', 'drop']) {{
            zone.dispatchEvent(new DragEvent(type, {{dataTransfer: transfer, bubbles: true, cancelable: true}}));
        }}
    }})()""")
    await page.wait_for(f"document.querySelector('#uploads [data-name=\"{IMAGE}\"]')?.dataset.state === 'done'")
    assert await page.js(f"document.querySelector('#uploads [data-name=\"{IMAGE}\"] progress').value") == 1
    await page.wait_for(f"!!document.querySelector('#file-list tr[data-name=\"{IMAGE}\"]')")

    # 6. Preview: the image is loaded from its CDN URL through the edge.
    await page.click(f"#file-list tr[data-name=\"{IMAGE}\"] button.link")
    await page.wait_for("(() => { const img = document.getElementById('preview-image');"
                        " return !!img && img.complete && img.naturalWidth === 640; })()")
    cdn_path = f"/{ZONE}/v1/logos/{IMAGE}"
    assert await page.js("new URL(document.getElementById('preview-image').src).pathname") == cdn_path
    assert await page.js("new URL(document.getElementById('preview-image').src).origin") == site.edge_url
    assert await page.text("#preview-url") == f"{site.edge_url}{cdn_path}"
    await page.screenshot(shots / "files.png")

    # 7. Purge it from the preview: the edge acknowledged, with its latency.
    await page.click("#preview-purge")
    await page.wait_for(f"document.getElementById('purge-urls')?.value === {json.dumps(cdn_path)}")
    await page.click("#purge-submit")
    await page.wait_for("!!document.querySelector('#purge-edges tr[data-edge=\"edge-0\"]')")
    cells = await page.js("[...document.querySelectorAll('#purge-edges tr[data-edge=\"edge-0\"] td')]"
                          ".map(td => td.textContent)")
    assert cells[0] == "edge-0" and cells[1] == "acknowledged"
    assert int(cells[2]) >= 1  # the cached copy the preview put on the edge was dropped
    assert cells[3].endswith(" ms") and float(cells[3].split()[0]) >= 0
    await page.screenshot(shots / "purge.png")

    # 8. The live tail shows the next request for it (a cache miss after the purge) as it happens:
    # a new row, pushed by the event stream (rows of the page loaded first are not 'fresh').
    await open_view(page, base, "logs", "document.getElementById('tail-state')?.textContent === 'live'")
    # The row is told apart by the request id the edge answered with (an earlier delivery of the
    # same path, e.g. the preview's, may reach the tail at any time within the shipping interval).
    async with ClientSession() as client, client.get(site.edge_url + cdn_path) as resp:
        status, request_id = resp.status, resp.headers.get("X-Request-ID")
    assert status == 200 and request_id
    row_selector = f"#tail-rows tr[data-code=\"delivery\"][data-request-id={json.dumps(request_id)}]"
    await page.wait_for(f"document.querySelectorAll({json.dumps(row_selector)}).length === 1")
    row = await page.js(f"(() => {{ const tr = document.querySelector({json.dumps(row_selector)});"
                        " return [tr.className, tr.dataset.path, ...[...tr.children].map(td => td.textContent)]; })()")
    assert row[1] == cdn_path
    row = [row[0], *row[2:]]
    assert row[0] == "fresh" and row[3] == "edge-0/0" and row[5] == "200" and row[7] == "MISS"
    await page.screenshot(shots / "logs.png")

    # The other views, each checked for its content.
    await open_view(page, base, "rules?file=_redirects", "!!document.getElementById('rules-text')")
    await page.fill("#rules-text", "/old-logo.png /gallery/v1/logos/sunset.png 301\n/broken\n/docs/* /gallery/v1/:splat 302\n")
    await page.click("#rules-save")
    await page.wait_for("!!document.querySelector('#rule-errors li[data-line=\"2\"]')")
    assert await page.js("document.querySelector('.editor .gutter div.error')?.textContent") == "2"
    await page.screenshot(shots / "rules.png")

    # The refused file was not saved: leaving the editor asks first, and the draft is discarded.
    await page.js("location.hash = '#/analytics?days=30'")
    await page.wait_for("document.querySelector('dialog[open] h2')?.textContent === 'Discard unsaved changes?'")
    await page.click("dialog[open] button[data-action=true]")
    await page.wait_for("!!document.querySelector('[data-kpi=requests] .value')"
                        " && !!document.querySelector('[data-chart=requests] rect.bar')")
    assert int((await page.text("[data-kpi=requests] .value")).replace(",", "")) > 1000
    assert await page.js(f"[...document.querySelectorAll('[data-chart=top-assets] .text')].some(e => e.textContent === {json.dumps(cdn_path)})")
    await page.screenshot(shots / "analytics.png", full_page=True)

    await open_view(page, base, "tokens", "!!document.querySelector('#token-list .empty')")
    await page.fill("#token-name", "ci-uploads")
    await page.js("for (const s of ['storage:read', 'storage:write', 'purge:write'])"
                  " document.querySelector(`#token-scopes input[value='${s}']`).checked = true")
    await page.click("#token-form button[type=submit]")
    await page.wait_for("/^cdnsk_[0-9a-f]{40}$/.test(document.getElementById('token-secret')?.value || '')")
    await page.screenshot(shots / "tokens.png")
    await page.js("document.querySelector('dialog button[data-action=true]').click()")
    await page.wait_for("!!document.querySelector('#token-list tr[data-id]') && !document.querySelector('dialog')")

    await open_view(page, base, "health", "!!document.querySelector('#edge-nodes [data-edge=\"edge-0\"]')")
    assert await page.text("[data-kpi=edges] .value") == "1 / 1"
    await page.screenshot(shots / "health.png")

    # Webhooks: register a working and a failing receiver; a purge's event reaches the first and
    # becomes a dead letter of the second, which is replayed.
    await open_view(page, base, "webhooks", "!!document.querySelector('#webhook-list .empty')")
    for target in ("ok", "down"):
        await page.fill("#webhook-url", f"{site.receiver}/{target}")
        await page.click("#webhook-form button[type=submit]")
        await page.wait_for("/^whsec_/.test(document.getElementById('webhook-secret')?.value || '')")
        await page.js("document.querySelector('dialog button[data-action=true]').click()")
        await page.wait_for(f"[...document.querySelectorAll('#webhook-list tr[data-id] td:first-child')]"
                            f".some(td => td.textContent === {json.dumps(f'{site.receiver}/{target}')})"
                            " && !document.querySelector('dialog')")
    status = await page.js("fetch('/api/purge', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                           f" body: JSON.stringify({{tags: ['project-{ZONE}']}})}}).then(r => r.status)")
    assert status == 200
    await page.wait_for("!!document.querySelector('#webhook-detail tr[data-state=dead] button')")  # 'down' is shown
    attempts = site.received["down"]
    assert attempts == 3  # the first attempt and two retries
    await page.click("#webhook-detail tr[data-state=dead] button")
    await page.wait_for("[...document.querySelectorAll('.toast')].some(t => t.textContent === 'purge.completed queued again')")

    async def replayed() -> bool:
        return site.received["down"] == 2 * attempts

    await wait_until(replayed, "the replayed dead letter being delivered (and failing) again")
    await page.wait_for("!!document.querySelector('#webhook-detail tr[data-state=dead] button')")  # dead again
    await page.screenshot(shots / "webhooks.png", full_page=True)
    await page.js(f"[...document.querySelectorAll('#webhook-list tr[data-id]')].find(tr => tr.firstChild.textContent"
                  f" === {json.dumps(f'{site.receiver}/ok')}).querySelector('td.actions button').click()")
    await page.wait_for("!!document.querySelector('#webhook-detail tr[data-state=delivered]')")
    assert len(site.delivered) == 1
    assert await page.js("document.querySelector('#webhook-detail tr[data-state=delivered] code').textContent") \
        == "purge.completed"

    # Zones again: deleting one asks for its name to be typed; the file is counted; a custom domain
    # is added in the zone's domain panel.
    await open_view(page, base, "zones", f"!!document.querySelector('#zone-list tr[data-zone=\"{ZONE}\"]')")
    await page.click("#zone-list tr[data-zone=\"old-site\"] button[data-action=delete]")
    await page.wait_for("!!document.querySelector('dialog[open] input')")
    await page.click("dialog button[data-action=true]")  # not typed yet: nothing happens
    assert await page.js("!!document.querySelector('dialog[open]')")
    await page.fill("dialog input", "old-site")
    await page.click("dialog button[data-action=true]")
    await page.wait_for("!document.querySelector('#zone-list tr[data-zone=\"old-site\"]') && !document.querySelector('dialog')")
    assert await page.text(f"#zone-list tr[data-zone=\"{ZONE}\"] td:nth-child(2)") == "1"
    await page.click(f"#zone-list tr[data-zone=\"{ZONE}\"] td.actions button")
    await page.fill("#domain-hostname", "assets.gallery.test")
    await page.click("#domain-add button[type=submit]")
    await page.wait_for("[...document.querySelectorAll('#zone-domains td b')].some(b => b.textContent === 'assets.gallery.test')")
    await page.screenshot(shots / "zones.png")

    # The passkey that signed in: used just now.
    await open_view(page, base, "passkeys", "!!document.querySelector('#passkey-table tr[data-name=\"Virtual key\"]')")
    assert (await page.text("#passkey-table tr[data-name=\"Virtual key\"] td:nth-child(4)")).endswith(" ago")
    await page.click("#passkey-table tr[data-name=\"Virtual key\"] td.actions button")  # Rename
    await page.fill("dialog input", "Laptop (virtual)")
    await page.click("dialog button[data-action=rename]")
    await page.wait_for("!!document.querySelector('#passkey-table tr[data-name=\"Laptop (virtual)\"]')")
    await page.screenshot(shots / "passkeys.png")
    await page.click("#passkey-table tr[data-name=\"Laptop (virtual)\"] td.actions button.danger")  # Remove
    await page.click("dialog button[data-action=true]")
    await page.wait_for("!!document.querySelector('#passkey-table .empty')")
    assert (await page.js("fetch('/api/passkeys').then(r => r.json())"))["passkeys"] == []

    assert page.problems == []


async def test_a_stock_video_previews_as_hls(site: Site, browser: DashboardBrowser, tmp_path: Path) -> None:
    """The preview of stocks/videos/<name>.mp4 plays the edge's HLS stream with the vendored hls.js."""
    clip = write_synthetic_video(tmp_path / "nature.mp4", "nature", seconds=3, width=192, height=108, fps=10, audio=True)
    async with ClientSession() as client:
        resp = await client.put(site.control.make_url("/api/storage/stocks/videos/nature.mp4"),
                                data=clip.read_bytes(), headers=ACCESS)
        assert resp.status == 201, await resp.text()
    await site.control.app[VIDEO_INGEST].wait_idle()

    async def index_arrived() -> bool:
        return site.edge.app[NODE].replica.get("stocks/videos/nature/hls/index.json") is not None

    await wait_until(index_arrived, "the HLS index reaching the edge")
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "files/stocks/videos?file=nature.mp4", "!!document.getElementById('preview-video')")
    await page.wait_for("document.getElementById('preview-video').dataset.ready === 'hls'")
    await page.js("document.getElementById('preview-video').play()")
    await page.wait_for("document.getElementById('preview-video').currentTime > 1")
    assert await page.js("document.getElementById('preview-video').videoHeight") == 108
    assert page.problems == []


async def test_a_zones_playlist_previews_as_hls_from_the_edge(site: Site, browser: DashboardBrowser,
                                                               tmp_path: Path) -> None:
    """The preview of a zone's .m3u8 loads it, and its segment, from the edge's CDN path with hls.js: another origin
    than the dashboard's, whose answers now say any origin may read them (Access-Control-Allow-Origin: *). Without it
    hls.js saw a network error and the preview never played."""
    clip = write_synthetic_video(tmp_path / "nature.mp4", "nature", seconds=3, width=192, height=108, fps=10, audio=True)
    async with ClientSession() as client:
        await create_zone(site, client)
        resp = await client.put(site.control.make_url("/api/storage/stocks/videos/nature.mp4"),
                                data=clip.read_bytes(), headers=ACCESS)
        assert resp.status == 201, await resp.text()
        await site.control.app[VIDEO_INGEST].wait_idle()
        # A rendition the ingest made (one MPEG-TS file of the whole clip), as the zone's own one-segment playlist.
        resp = await client.get(site.control.make_url("/api/storage/stocks/videos/nature/hls/index.json"), headers=ACCESS)
        rendition = json.loads(await resp.read())["renditions"][-1]["file"]
        resp = await client.get(site.control.make_url(f"/api/storage/stocks/videos/nature/hls/{rendition}"), headers=ACCESS)
        segment = await resp.read()
        playlist = (b"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:4\n#EXT-X-PLAYLIST-TYPE:VOD\n"
                    b"#EXTINF:3.000,\nclip.ts\n#EXT-X-ENDLIST\n")
        for name, data in (("clip.ts", segment), ("clip.m3u8", playlist)):
            resp = await client.put(site.control.make_url(f"/api/storage/{ZONE}/v1/videos/{name}"), data=data,
                                    headers=ACCESS)
            assert resp.status == 201, await resp.text()

    async def arrived() -> bool:
        return site.edge.app[NODE].replica.get(f"{ZONE}/v1/videos/clip.m3u8") is not None

    await wait_until(arrived, "the playlist reaching the edge")
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, f"files/{ZONE}/v1/videos?file=clip.m3u8", "!!document.getElementById('preview-video')")
    await page.wait_for("document.getElementById('preview-video').dataset.ready === 'hls'")
    await page.js("document.getElementById('preview-video').play()")
    await page.wait_for("document.getElementById('preview-video').currentTime > 1")
    assert page.problems == []


async def test_purge_by_prefix_and_soft(site: Site, browser: DashboardBrowser) -> None:
    """The Purge view offers every kind of purge the API has: a prefix, and soft (marked stale) for any of them;
    the result says what the API did."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "purge", "!!document.querySelector('#purge-mode button[data-mode=prefixes]')")
    await page.click("#purge-mode button[data-mode=prefixes]")
    await page.fill("#purge-prefixes", f"/{ZONE}/v1/logos/\n\n")
    await page.js("document.getElementById('purge-soft').click()")
    await page.click("#purge-submit")
    await page.wait_for("!!document.querySelector('#purge-edges tr[data-edge=\"edge-0\"]')")
    result = await page.text("#purge-result")
    assert f"/{ZONE}/v1/logos/ (and every path under it) (soft: marked stale)" in result
    assert "(soft)" in await page.text("#purge-history")

    # Soft applies to the other kinds too (the box stays ticked across them); unticked, a purge is a hard one.
    await page.click("#purge-mode button[data-mode=urls]")
    await page.fill("#purge-urls", f"/{ZONE}/v1/logos/{IMAGE}")
    await page.click("#purge-submit")
    await page.wait_for("document.querySelectorAll('#purge-history tbody tr').length === 2")
    assert f"/{ZONE}/v1/logos/{IMAGE} (soft)" in await page.text("#purge-history tbody tr:first-child")
    await page.js("document.getElementById('purge-soft').click()")
    await page.click("#purge-submit")
    await page.wait_for("document.querySelectorAll('#purge-history tbody tr').length === 3")
    assert "soft" not in await page.text("#purge-history tbody tr:first-child")
    assert "soft" not in await page.text("#purge-result")

    # A prefix that names no zone is refused, with the API's reason and the prefix.
    await page.click("#purge-mode button[data-mode=prefixes]")
    await page.fill("#purge-prefixes", "/no-slash")
    await page.click("#purge-submit")
    await page.wait_for("document.getElementById('purge-error').textContent.includes('/no-slash')")
    assert "Prefixes must be" in await page.text("#purge-error")
    assert page.problems == []


async def put_on_edge(site: Site, cdn_path: str, data: bytes) -> None:
    """Stores a file through control's storage API and returns once the edge holds it."""
    async with ClientSession() as client:
        resp = await client.put(site.control.make_url(f"/api/storage/{cdn_path}"), data=data, headers=ACCESS)
        assert resp.status == 201, await resp.text()

    async def arrived() -> bool:
        return site.edge.app[NODE].replica.get(cdn_path) is not None

    await wait_until(arrived, f"{cdn_path} reaching the edge")


async def x_cache(site: Site, cdn_path: str) -> str:
    async with ClientSession() as client, client.get(f"{site.edge_url}/{cdn_path}") as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["X-Cache"]


async def test_purge_tags_within_one_zone(site: Site, browser: DashboardBrowser) -> None:
    """The Purge view's tag mode purges in every zone by default, or within the zone chosen: the other zone's
    copy stays a HIT, the result names the zone, and the API's 404 (a zone deleted since the view was opened) and
    400 (a zone whose name predates the name rules) are shown as the view's other errors. Another mode never
    sends the zone chosen for tags."""
    async with ClientSession() as client:
        for name in (ZONE, "brand", "gone"):
            resp = await client.post(site.control.make_url("/api/core/zones"), json={"Name": name}, headers=ACCOUNT)
            assert resp.status == 201, await resp.text()
    await site.control.app[GIT].commit({"clients/Old_Site/v1/logos/old.png": png(32, 20)}, "a zone named before the rules")
    paths = {zone: f"{zone}/v1/logos/{IMAGE}" for zone in (ZONE, "brand")}
    for path in paths.values():
        await put_on_edge(site, path, png(64, 40))
        assert [await x_cache(site, path), await x_cache(site, path)] == ["MISS", "HIT"]

    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "purge?tag=all-assets", "!!document.querySelector('#purge-zone option[value=gone]')")
    options = await page.js("[...document.querySelectorAll('#purge-zone option')].map(o => [o.value, o.textContent])")
    assert options == [["", "All zones"], ["Old_Site", "Old_Site"], ["brand", "brand"], [ZONE, ZONE], ["gone", "gone"]]
    assert await page.js("document.getElementById('purge-zone').value") == ""
    assert await page.js("document.getElementById('purge-zone').labels[0].textContent.startsWith('Zone')")

    # Within one zone: that zone's copy is gone, the other zone's is still a HIT.
    await page.fill("#purge-zone", ZONE)
    await page.click("#purge-submit")
    await page.wait_for("!!document.querySelector('#purge-edges tr[data-edge=\"edge-0\"]')")
    assert "Purged: all-assets in zone gallery" in await page.text("#purge-result")
    assert "all-assets in zone gallery" in await page.text("#purge-history tbody tr:first-child")
    removed = await page.text("#purge-edges tr[data-edge=\"edge-0\"] td:nth-child(3)")
    assert int(removed) >= 1
    assert [await x_cache(site, paths[ZONE]), await x_cache(site, paths["brand"])] == ["MISS", "HIT"]

    # All zones (the default) sends no zone: both copies go.
    await page.fill("#purge-zone", "")
    await page.click("#purge-submit")
    await page.wait_for("document.querySelectorAll('#purge-history tbody tr').length === 2")
    assert "zone" not in await page.text("#purge-result")
    assert [await x_cache(site, paths[ZONE]), await x_cache(site, paths["brand"])] == ["MISS", "MISS"]

    # A zone chosen for tags is not sent with URLs (the API refuses a zone beside them).
    await page.fill("#purge-zone", ZONE)
    await page.click("#purge-mode button[data-mode=urls]")
    await page.fill("#purge-urls", f"/{paths['brand']}")
    await page.click("#purge-submit")
    await page.wait_for("document.querySelectorAll('#purge-history tbody tr').length === 3 "
                        "|| !!document.getElementById('purge-error').textContent")
    assert await page.text("#purge-error") == ""
    assert "zone" not in await page.text("#purge-result")

    # A zone deleted since the view listed it: the API's 404, as the view shows its other errors.
    async with ClientSession() as client:
        resp = await client.delete(site.control.make_url("/api/core/zones/gone"), headers=ACCOUNT)
        assert resp.status in (200, 204), await resp.text()
    await page.click("#purge-mode button[data-mode=tags]")
    await page.fill("#purge-zone", "gone")
    await page.click("#purge-submit")
    await page.wait_for("!!document.getElementById('purge-error').textContent")
    assert await page.text("#purge-error") == "Zone 'gone' does not exist"
    # A zone whose name predates the name rules: the API's 400 (such a zone is purged by prefix or URL).
    await page.fill("#purge-zone", "Old_Site")
    await page.click("#purge-submit")
    await page.wait_for("document.getElementById('purge-error').textContent.includes('zone name')")
    assert await page.text("#purge-error") == '"zone" must be a zone name (^[a-z0-9-]{2,64}$)'
    assert await page.js("document.querySelectorAll('#purge-history tbody tr').length") == 3
    assert page.problems == []


async def open_origin_panel(page: DashboardBrowser, base: str, zone: str, state: str) -> None:
    await open_view(page, base, "zones", f"!!document.querySelector('#zone-list tr[data-zone=\"{zone}\"]')")
    await page.click(f"#zone-list tr[data-zone=\"{zone}\"] button[data-action=origin]")
    await page.wait_for(f"!!document.querySelector('#origin-form') && "
                        f"document.getElementById('origin-state').textContent.includes({json.dumps(state)})")


async def make_zone_in_form(page: DashboardBrowser, name: str, origin: str | None = None) -> None:
    """Fills the Zones view's form for a new zone (its origin URL too, when given) and submits it; returns once the
    zone's row is listed."""
    await page.fill("#zone-name", name)
    if origin is not None:
        await page.fill("#zone-origin", origin)
    await page.click("#zone-create button[type=submit]")
    await page.wait_for(f"!!document.querySelector('#zone-list tr[data-zone={json.dumps(name)}]')")


async def field_labels(page: DashboardBrowser, *ids: str) -> dict[str, str | None]:
    """{a field's id: the text of its label as shown (without the field's value: a label holds its field), or None
    when it has no label shown}: what names the field once it holds a value and its placeholder is gone."""
    labels: dict[str, str | None] = await page.js(
        f"Object.fromEntries({json.dumps(list(ids))}.map(id => {{"
        " const field = document.getElementById(id), label = field.labels[0];"
        " return [id, label && label.getClientRects().length ? label.innerText.replace(field.value, '').trim() : null]; }))")
    return labels


async def level(page: DashboardBrowser, field: str, button: str) -> bool:
    """Whether two elements (CSS selectors), a field and its form's button, end level on screen (within a pixel)."""
    return bool(await page.js(f"(() => {{ const [field, button] = [{json.dumps(field)}, {json.dumps(button)}]"
                              ".map(q => document.querySelector(q).getBoundingClientRect());"
                              " return Math.abs(field.bottom - button.bottom) <= 1; })()"))


async def test_a_zones_panels_take_the_focus_and_give_it_back(site: Site, browser: DashboardBrowser) -> None:
    """A zone's Origin or Domains panel, opened from its row with Enter, appeared below the list with the focus left on
    the row (the panel a row's worth of Tabs away), and its Close removed the panel with the focus in it, so the focus
    fell to the page's start. The panel takes the focus (its heading: no on-screen keyboard opens on a phone), and
    Close gives it back to the row's button that opened it."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "zones", f"!!document.querySelector('#zone-list tr[data-zone=\"{ZONE}\"]')")
    for action, ready, heading in (("origin", "#origin-form", f"Origin of {ZONE}"),
                                   ("domains", "#domain-add", f"Domains of {ZONE}")):
        opener = f"document.querySelector('#zone-list tr[data-zone=\"{ZONE}\"] button[data-action={action}]')"
        await page.js(f"{opener}.focus()")
        await page.press("Enter")
        await page.wait_for(f"!!document.querySelector('{ready}')")
        await page.wait_for(f"document.activeElement.textContent === {json.dumps(heading)}")
        await page.press("Tab")
        assert await page.js("document.getElementById('zone-domains').contains(document.activeElement)")
        await page.js("[...document.querySelectorAll('#zone-domains button')].find(b => b.textContent === 'Close').focus()")
        await page.press("Enter")
        await page.wait_for(f"!document.querySelector('{ready}')")
        assert await page.js(f"document.activeElement === {opener}")
    assert page.problems == []


async def test_the_origin_panels_fields_are_labelled(site: Site, browser: DashboardBrowser) -> None:
    """The origin panel's URL, Host header and request headers were named by their placeholders alone, which go as soon
    as a field holds a value: the panel of a pull zone showed its URL and an unnamed field and box. Each field has a
    label of its own, shown above it."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await make_zone_in_form(page, "site", "https://origin.test")
    await open_origin_panel(page, base, "site", "pulls from https://origin.test")
    labels = await field_labels(page, "origin-url", "origin-host", "origin-headers")
    assert labels == {"origin-url": "Origin URL", "origin-host": "Host header (optional)",
                      "origin-headers": "Request headers (optional), one per line"}
    assert await page.cut_off() == []
    assert page.problems == []


async def test_the_zone_creation_fields_are_labelled(site: Site, browser: DashboardBrowser) -> None:
    """The Zones card's fields for a new zone, its name and its origin URL, were named by their placeholders alone,
    which go as soon as a field holds a value: a name typed stood beside an unnamed field, and nothing said the origin
    was optional once typed. Each has a label of its own, shown above it, with Create zone level with the fields; on
    a phone too."""
    labels = {"zone-name": "Zone name", "zone-origin": "Origin URL (optional)"}
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await page.fill("#zone-name", "site")
    await page.fill("#zone-origin", "https://origin.test")
    assert await field_labels(page, *labels) == labels
    assert await level(page, "#zone-origin", "#zone-create button[type=submit]")
    await page.as_phone()
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await page.fill("#zone-name", "site")
    assert await field_labels(page, *labels) == labels
    assert await page.cut_off() == []
    assert page.problems == []


async def test_the_domain_field_is_labelled(site: Site, browser: DashboardBrowser) -> None:
    """A zone's Domains panel named its field for a new domain by its placeholder alone, gone once a hostname is
    typed. It has a label of its own, shown above it, with Add domain level with the field."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await make_zone_in_form(page, "site")
    await page.click("#zone-list tr[data-zone=\"site\"] button[data-action=domains]")
    await page.wait_for("!!document.querySelector('#domain-hostname')")
    await page.fill("#domain-hostname", "assets.site.test")
    assert await field_labels(page, "domain-hostname") == {"domain-hostname": "Hostname"}
    assert await level(page, "#domain-hostname", "#domain-add button[type=submit]")
    assert page.problems == []


async def test_origin_headers_retyped_in_another_spelling_are_not_dropped(site: Site, browser: DashboardBrowser) -> None:
    """A request header typed again under another case or with `_` for `-` is the same header to the API: saving
    replaces its value without asking whether to remove it. (The origin is a name under .test, never looked up.)"""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await make_zone_in_form(page, "site", "https://origin.test/assets")
    await open_origin_panel(page, base, "site", "pulls from https://origin.test/assets")
    await page.fill("#origin-headers", "X-Origin-Secret: one\nX-Api-Key: two")
    await page.click("#origin-form button[type=submit]")
    await page.wait_for("document.getElementById('origin-state').textContent.includes('X-Origin-Secret, X-Api-Key')")

    await page.fill("#origin-headers", "x-origin-secret: three\nX_Api_Key: four")
    await page.click("#origin-form button[type=submit]")
    await page.wait_for("document.getElementById('origin-state').textContent.includes('x-origin-secret, X_Api_Key')"
                        " || !!document.querySelector('dialog[open]')")
    assert not await page.js("!!document.querySelector('dialog[open]')"), await page.text("dialog[open]")
    origin = await page.js("fetch('/api/core/zones/site/origin').then(r => r.json())")
    assert origin["Origin"]["RequestHeaders"] == {"x-origin-secret": "(set)", "X_Api_Key": "(set)"}

    # One left out is still named before it is removed.
    await page.fill("#origin-headers", "X-ORIGIN-SECRET: five")
    await page.click("#origin-form button[type=submit]")
    await page.wait_for("!!document.querySelector('dialog[open]')")
    assert await page.text("dialog[open] h2") == "Remove X_Api_Key?"
    assert page.problems == []


async def test_origin_header_named_twice_is_refused_not_half_saved(site: Site, browser: DashboardBrowser) -> None:
    """Two lines for one request header (in any spelling the API takes for the same name) are refused next to the
    form, as the API refuses them, instead of one value being saved and the other silently lost."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    await make_zone_in_form(page, "twice", "https://origin.test")
    for lines in ("X-Token: first\nX-Token: second", "X-Token: first\nx_token: second"):
        await open_origin_panel(page, base, "twice", "pulls from https://origin.test")
        await page.fill("#origin-headers", lines)
        await page.click("#origin-form button[type=submit]")
        await page.wait_for("document.getElementById('origin-error').textContent.includes('named twice')")
        origin = await page.js("fetch('/api/core/zones/twice/origin').then(r => r.json())")
        assert origin["Origin"]["RequestHeaders"] == {}
    assert page.problems == []


SET_ORIGIN_ELSEWHERE = """fetch('/api/core/zones/{zone}/origin', {{method: 'PUT', headers: {{'Content-Type': 'application/json'}},
    body: JSON.stringify({body})}}).then(r => r.status)"""


async def test_origin_panel_acts_on_the_origin_as_it_is_now(site: Site, browser: DashboardBrowser) -> None:
    """An origin changed elsewhere (another tab, another operator) after the panel was shown: saving still asks
    before dropping the request headers set meanwhile, and Stop pulling stops the origin set meanwhile."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    for name, origin in (("mirror", "https://origin.test"), ("later", "")):  # "later" with no origin
        await make_zone_in_form(page, name, origin)

    await open_origin_panel(page, base, "mirror", "pulls from https://origin.test.")
    body = json.dumps({"Url": "https://origin.test", "RequestHeaders": {"X-Origin-Secret": "s3cret"}})
    assert await page.js(SET_ORIGIN_ELSEWHERE.format(zone="mirror", body=body)) == 200
    await page.fill("#origin-url", "https://other.origin.test")
    await page.click("#origin-form button[type=submit]")
    await page.wait_for("!!document.querySelector('dialog[open]') || "
                        "document.getElementById('origin-state').textContent.includes('other.origin.test')")
    assert await page.text("dialog[open] h2") == "Remove X-Origin-Secret?"
    await page.click("dialog[open] button[data-action=false]")  # Cancel: the secret stays
    origin = await page.js("fetch('/api/core/zones/mirror/origin').then(r => r.json())")
    assert origin["Origin"] == {"Url": "https://origin.test", "HostHeader": None,
                                "RequestHeaders": {"X-Origin-Secret": "(set)"}, "StoreSetCookie": False}

    await open_origin_panel(page, base, "later", "serves its stored files")
    body = json.dumps({"Url": "https://origin.test"})
    assert await page.js(SET_ORIGIN_ELSEWHERE.format(zone="later", body=body)) == 200
    await page.click("#origin-remove")
    await page.wait_for("!!document.querySelector('dialog[open]') || "
                        "!!document.getElementById('origin-error').textContent")
    assert await page.text("dialog[open] h2") == "Stop pulling later from its origin?", await page.text("#origin-error")
    # The panel said "serves its stored files" before (it opened with no origin): cleared, the text comes back only
    # from the refresh after the removal, so the wait below is for the removal, not for what was already there.
    await page.js("document.getElementById('origin-state').textContent = ''")
    await page.click("dialog[open] button[data-action=true]")
    await page.wait_for("document.getElementById('origin-state').textContent.includes('serves its stored files')")
    assert await page.js("fetch('/api/core/zones/later/origin').then(r => r.status)") == 404
    assert page.problems == []


async def test_a_new_folder_named_with_dots_is_refused_not_made_elsewhere(site: Site, browser: DashboardBrowser) -> None:
    """A browser resolves `.` and `..` in a URL's path before sending it, so the New folder dialog's `..` would write a
    folder one level up (and open it as `v1/..`). The Files view refuses such a name and writes nothing."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    head = site.control.app[GIT].head_commit_id()
    for name in ("..", "."):
        await open_view(page, base, f"files/{ZONE}/v1", "!!document.querySelector('#file-list tr[data-name=logos]')")
        await page.js("[...document.querySelectorAll('#dropzone button')].find(b => b.textContent === 'New folder').click()")
        await page.fill("dialog[open] input", name)
        await page.click("dialog[open] button[data-action=create]")
        await page.wait_for(f"!!document.querySelector('dialog[open] #folder-error')?.textContent"
                            f" || location.hash !== '#/files/{ZONE}/v1'")
        assert await page.js("location.hash") == f"#/files/{ZONE}/v1"
        assert await page.text("dialog[open] #folder-error") == f'A file or folder cannot be named "{name}".'
        await page.click("dialog[open] button[data-action=null]")
    assert site.control.app[GIT].head_commit_id() == head  # nothing was written
    assert page.problems == []


async def test_a_refused_folder_name_is_shown_in_the_dialog_with_the_name_kept(site: Site, browser: DashboardBrowser) -> None:
    """The New folder dialog refused by the API (a character a path may not hold) opens again with the name as typed
    and the API's reason in it, instead of closing and losing what was typed; corrected, the folder is made."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, f"files/{ZONE}/v1", "!!document.querySelector('#file-list tr[data-name=logos]')")
    await page.js("[...document.querySelectorAll('#dropzone button')].find(b => b.textContent === 'New folder').click()")
    await page.fill("dialog[open] input", "spring sale?")
    await page.click("dialog[open] button[data-action=create]")
    await page.wait_for("!!document.querySelector('dialog[open] #folder-error')?.textContent")
    assert await page.text("dialog[open] #folder-error") == \
        "Invalid path: The path segment 'spring sale?' contains characters that are not allowed."
    assert await page.js("document.querySelector('dialog[open] input').value") == "spring sale?"
    await page.fill("dialog[open] input", "spring-sale")
    await page.click("dialog[open] button[data-action=create]")
    await page.wait_for(f"location.hash === '#/files/{ZONE}/v1/spring-sale' && !document.querySelector('dialog[open]')")
    assert page.problems == []


FAIL_LIST_READS = """(() => {{ const real = window.fetch;
    window.fetch = (url, init) => (init && init.method === 'GET' && String(url).startsWith({path}))
        ? Promise.reject(new TypeError('Failed to fetch')) : real(url, init); }})()"""


async def test_a_secret_shown_once_is_shown_when_the_list_cannot_be_read_again(site: Site, browser: DashboardBrowser) -> None:
    """A new token's and a new webhook's secret are shown only once: when the list cannot be read again just after
    (the network, control restarting), the secret was lost with a created token or webhook left behind. It is shown,
    and the list says it could not be refreshed."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "tokens", "!!document.querySelector('#token-list .empty')")
    await page.js(FAIL_LIST_READS.format(path=json.dumps("/api/tokens")))
    await page.fill("#token-name", "ci")
    await page.js("document.querySelector(`#token-scopes input[value='storage:read']`).checked = true")
    await page.click("#token-form button[type=submit]")
    await page.wait_for("!!document.getElementById('token-secret') || !!document.getElementById('token-error').textContent")
    assert await page.js("/^cdnsk_[0-9a-f]{40}$/.test(document.getElementById('token-secret')?.value || '')"), \
        await page.text("#token-error")
    await page.click("dialog[open] button[data-action=true]")
    await page.wait_for("document.getElementById('token-list').textContent.includes('could not be refreshed')")

    await open_view(page, base, "webhooks", "!!document.querySelector('#webhook-list .empty')")
    await page.js(FAIL_LIST_READS.format(path=json.dumps("/api/webhooks")))
    await page.fill("#webhook-url", f"{site.receiver}/ok")
    await page.click("#webhook-form button[type=submit]")
    await page.wait_for("!!document.getElementById('webhook-secret') || !!document.getElementById('webhook-error').textContent")
    assert await page.js("/^whsec_/.test(document.getElementById('webhook-secret')?.value || '')"), \
        await page.text("#webhook-error")
    await page.click("dialog[open] button[data-action=true]")
    await page.wait_for("document.getElementById('webhook-list').textContent.includes('could not be refreshed')")
    assert page.problems == []


async def test_analytics_of_a_zone_not_listed_shows_every_zone_as_its_picker_says(site: Site,
                                                                                 browser: DashboardBrowser) -> None:
    """Analytics opened for a zone that is not listed (deleted since the link was kept, or mistyped) showed that zone's
    numbers, all zero, under a picker reading 'All zones'; it now shows every zone's, as the picker and the link say."""
    await seed_past_traffic(site)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    # The view replaces the address (zone=all) as soon as it has read the zones: goto waits for the view, not for it.
    await open_view(page, base, "analytics?days=30&zone=gone", "!!document.querySelector('[data-kpi=requests] .value')")
    assert int((await page.text("[data-kpi=requests] .value")).replace(",", "")) > 1000  # the seeded traffic
    assert await page.js("document.getElementById('analytics-zone').value") == "all"
    assert await page.js("location.hash") == "#/analytics?days=30&zone=all"
    assert page.problems == []


async def test_a_private_svg_is_previewed(site: Site, browser: DashboardBrowser) -> None:
    """Private files are previewed from the dashboard's origin, where a download is application/octet-stream: a
    browser sniffs a raster image under that type but never an SVG, so a private SVG's preview and thumbnail were
    broken images. Both show the drawing."""
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20" fill="#f60"/></svg>'
    async with ClientSession() as client:
        await create_zone(site, client)
        resp = await client.put(site.control.make_url(f"/api/storage/{ZONE}/v1/private/mark.svg"), data=svg,
                                headers={**ACCESS, "Content-Type": "image/svg+xml"})
        assert resp.status == 201, await resp.text()
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, f"files/{ZONE}/v1/private?file=mark.svg", "!!document.getElementById('preview-image')")
    thumb = "document.querySelector('#file-list tr[data-name=\"mark.svg\"] .thumb')"
    # Loaded or broken (a broken thumbnail is replaced by the file's extension).
    await page.wait_for("(() => { const img = document.getElementById('preview-image'); return img.currentSrc && img.complete; })()"
                        f" && ({thumb}.tagName === 'SPAN' || ({thumb}.currentSrc && {thumb}.complete))")
    assert await page.js("document.getElementById('preview-image').naturalWidth") == 40
    assert await page.js(f"{thumb}.tagName === 'IMG' && {thumb}.naturalWidth") == 40
    assert page.problems == []


async def test_webhooks_view_states_the_retry_delays_control_uses(site: Site, browser: DashboardBrowser) -> None:
    """The Webhooks view said failed deliveries are retried after 1, 5, 25 and 125 s whatever `[webhooks]
    retry_delays_s` was; it states the delays of the running control (the fixture's 0.1, 0.1)."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "webhooks", "!!document.querySelector('#webhook-retries')?.textContent")
    assert await page.text("#webhook-retries") == \
        "Failed deliveries are retried after 0.1 and 0.1 s, then kept as dead letters."
    assert page.problems == []


async def accessible_names(page: DashboardBrowser, role: str) -> list[str]:
    """The names a screen reader is given for the page's elements of one role (Chromium's accessibility tree)."""
    tree = await page.command("Accessibility.getFullAXTree")
    return [node.get("name", {}).get("value", "") for node in tree["nodes"]
            if not node.get("ignored") and node.get("role", {}).get("value") == role]


async def test_a_secret_shown_once_is_named_for_a_screen_reader(site: Site, browser: DashboardBrowser) -> None:
    """A new token's or webhook's secret was shown in a dialog with no name, in a field with no label: a screen reader
    announced an unnamed dialog and a read-only field of 40 characters. The dialog is named by its title and the field
    says which secret it holds."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "tokens", "!!document.querySelector('#token-list .empty')")
    await page.fill("#token-name", "ci")
    await page.js("document.querySelector(`#token-scopes input[value='storage:read']`).checked = true")
    await page.click("#token-form button[type=submit]")
    await page.wait_for("!!document.getElementById('token-secret')")
    assert await accessible_names(page, "dialog") == ["Token ci created"]
    assert "Token secret" in await accessible_names(page, "textbox")
    await page.click("dialog[open] button[data-action=true]")

    await open_view(page, base, "webhooks", "!!document.querySelector('#webhook-list .empty')")
    await page.fill("#webhook-url", f"{site.receiver}/ok")
    await page.click("#webhook-form button[type=submit]")
    await page.wait_for("!!document.getElementById('webhook-secret')")
    assert await accessible_names(page, "dialog") == ["Webhook registered"]
    assert "Signing secret" in await accessible_names(page, "textbox")
    assert page.problems == []


async def test_tokens_form_offers_only_scopes_a_session_may_grant(site: Site, browser: DashboardBrowser) -> None:
    """The tokens form offered pipeline:write and ai:read, which a session may not grant (403 ScopeNotGrantable
    after the form was filled); they are shown but cannot be chosen, and say that the AccountKey mints them."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "tokens", "!!document.querySelector('#token-list .empty')")
    offered = await page.js("Object.fromEntries([...document.querySelectorAll('#token-scopes input')]"
                            ".map(i => [i.value, !i.disabled]))")
    assert offered == {"storage:read": True, "storage:write": True, "assets:read": True, "insights:read": True,
                       "zones:read": True, "zones:write": True, "purge:write": True, "pipeline:write": False,
                       "webhooks:read": True, "webhooks:write": True, "ai:read": False}
    assert "AccountKey" in await page.js("document.querySelector(`#token-scopes input[value='ai:read']`)"
                                         ".closest('label').title")
    assert page.problems == []


async def test_files_of_a_zone_not_listed_says_there_is_no_such_zone(site: Site, browser: DashboardBrowser) -> None:
    """`#/files/<zone>` for a zone that does not exist (deleted since the link was kept, or mistyped) showed another
    zone selected in the picker above an invitation to upload into the missing one; it says there is no such zone,
    offers no upload, and the picker selects none."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "files/nosuch/v1", "!!document.getElementById('zone-picker')")
    assert await page.text("#no-zone") == "There is no zone named nosuch. Choose one above, or see the zones."
    assert await page.js("document.getElementById('zone-picker').value") == ""
    assert await page.js("!document.getElementById('upload-button') && !document.getElementById('file-list')")
    await page.js(f"(() => {{ const p = document.getElementById('zone-picker'); p.value = {json.dumps(ZONE)};"
                  " p.dispatchEvent(new Event('change')); })()")
    await page.wait_for(f"location.hash === '#/files/{ZONE}/v1' && !!document.querySelector('#file-list tr[data-name=logos]')")
    assert page.problems == []


async def test_live_logs_refused_for_a_session_that_ended_lead_to_sign_in(site: Site, browser: DashboardBrowser) -> None:
    """A live tail whose stream comes back refused with 401 (the session ended: signed out in another tab, expired)
    said 'reconnecting…' while the browser had given up on it, until another request of the page happened to meet the
    401. It leads to the sign-in page itself. The health indicator's requests are held here, so that only the tail
    can lead there."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "logs", "document.getElementById('tail-state')?.textContent === 'live'")
    await page.js("(() => { const real = window.fetch; window.fetch = (url, init) =>"
                  " String(url).startsWith('/api/dashboard/status') ? new Promise(() => {}) : real(url, init); })()")
    assert await page.js("fetch('/dashboard/logout').then(r => r.url.endsWith('/dashboard/login'))")
    site.control.app[REQUEST_LOG].end_streams()  # the stream drops (control restarting, a proxy): the browser asks again
    await page.wait_for("location.pathname === '/dashboard/login'")
    assert page.problems == []


async def test_rules_editor_keeps_unsaved_edits_until_the_user_discards_them(site: Site, browser: DashboardBrowser) -> None:
    """The rules editor dropped what was typed, without a word, when the other file's tab or another view was opened.
    Each file keeps its draft across the tabs; leaving the view asks first, and Cancel stays with the draft; saved, it
    leaves without asking."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    draft = "/*\n  X-Draft: 1\n"
    await open_view(page, base, "rules", "!!document.getElementById('rules-text')")
    await page.fill("#rules-text", draft)
    tab = "[...document.querySelectorAll('#view .segmented button')].find(b => b.textContent === {!r}).click()"
    await page.js(tab.format("_redirects"))
    await page.wait_for("document.querySelector('#view .segmented button.active')?.textContent === '_redirects'")
    assert await page.js("document.getElementById('rules-text').value") == ""
    await page.js(tab.format("_headers"))
    await page.wait_for("document.querySelector('#view .segmented button.active')?.textContent === '_headers'")
    assert await page.js("document.getElementById('rules-text').value") == draft

    await page.js("location.hash = '#/zones'")
    await page.wait_for("!!document.querySelector('dialog[open]')")
    assert await page.text("dialog[open] h2") == "Discard unsaved changes?"
    assert "_headers" in await page.text("dialog[open] p")
    await page.click("dialog[open] button[data-action=false]")
    await page.wait_for("!document.querySelector('dialog[open]')")
    assert await page.js("location.hash") == "#/rules"
    assert await page.js("document.getElementById('rules-text').value") == draft

    # Leaving the page asks too: the browser's own dialog (shown once the user has typed on the page); declined,
    # the page and the draft stay.
    await page.js("document.getElementById('rules-text').focus()")
    await page.type_text("  X-Typed: 2\n")
    await page.command("Runtime.evaluate", expression="setTimeout(() => location.reload(), 0)")
    assert await page.answer_dialog(accept=False) == "beforeunload"
    assert await page.js("document.getElementById('rules-text').value") == draft + "  X-Typed: 2\n"

    await page.click("#rules-save")
    await page.wait_for("document.querySelector('#view p.muted.small').textContent.startsWith('Saved')")
    await page.js("location.hash = '#/zones'")
    await page.wait_for("!!document.querySelector('#zone-create') || !!document.querySelector('dialog[open]')")
    assert not await page.js("!!document.querySelector('dialog[open]')")

    # A draft discarded: the view that was asked for opens.
    await open_view(page, base, "rules", "!!document.getElementById('rules-text')")
    await page.fill("#rules-text", draft + "  X-More: 2\n")
    await page.js("location.hash = '#/purge'")
    await page.wait_for("!!document.querySelector('dialog[open]')")
    await page.click("dialog[open] button[data-action=true]")
    await page.wait_for("location.hash === '#/purge' && document.getElementById('view').dataset.view === 'purge'")
    assert page.problems == []


async def test_dialogs_answer_enter_and_escape(site: Site, browser: DashboardBrowser) -> None:
    """Enter in a dialog's field did nothing (only a click on its button did); it now confirms, as a form's submit
    would, and a confirmation still needs what it asks to be typed. Escape cancels."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    new_folder = "[...document.querySelectorAll('#dropzone button')].find(b => b.textContent === 'New folder').click()"
    await open_view(page, base, f"files/{ZONE}/v1", "!!document.querySelector('#file-list tr[data-name=logos]')")
    await page.js(new_folder)
    await page.wait_for("document.activeElement === document.querySelector('dialog[open] input')")
    await page.press("Escape")
    await page.wait_for("!document.querySelector('dialog[open]')")
    await page.js(new_folder)
    await page.wait_for("document.activeElement === document.querySelector('dialog[open] input')")
    await page.type_text("typed")
    await page.press("Enter")
    await page.wait_for(f"location.hash === '#/files/{ZONE}/v1/typed' && !document.querySelector('dialog[open]')")

    # Deleting the folder asks for its name: Enter before it is typed does nothing; typed, Enter deletes.
    await open_view(page, base, f"files/{ZONE}/v1", "!!document.querySelector('#file-list tr[data-name=typed]')")
    await page.js("[...document.querySelectorAll('#file-list tr[data-name=typed] button')].find(b => b.textContent === 'Delete').click()")
    await page.wait_for("document.activeElement === document.querySelector('dialog[open] input')")
    await page.press("Enter")
    assert await page.js("!!document.querySelector('dialog[open]')")
    await page.type_text("typed")
    await page.press("Enter")
    await page.wait_for("!document.querySelector('#file-list tr[data-name=typed]') && !document.querySelector('dialog[open]')")
    assert page.problems == []


async def test_a_narrow_screen_folds_the_sidebar_away(site: Site, browser: DashboardBrowser) -> None:
    """On a phone's width (390 px) the fixed 216 px sidebar left the view 174 px. Under the breakpoint the sections
    fold into a Menu button above the view, which has the screen's width; the menu opens, and closes once a section
    is chosen."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.command("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    shown = "(s => { const r = document.querySelector(s).getBoundingClientRect(); return r.width > 0 && r.height > 0; })"
    assert await page.js("document.getElementById('view').getBoundingClientRect().width") >= 360
    assert await page.js(f"{shown}('#nav-toggle') && !{shown}('#nav')")
    assert await page.js("document.getElementById('nav-toggle').getAttribute('aria-expanded')") == "false"
    await page.click("#nav-toggle")
    await page.wait_for(f"{shown}('#nav a[data-view=files]') && {shown}('#sign-out')")
    assert await page.js("document.getElementById('nav-toggle').getAttribute('aria-expanded')") == "true"
    await page.click("#nav a[data-view=tokens]")
    await page.wait_for(f"!!document.querySelector('#token-form') && !{shown}('#nav')")
    assert await page.js("document.getElementById('view').getBoundingClientRect().width") >= 360
    assert page.problems == []


async def test_the_phones_menu_from_the_keyboard(site: Site, browser: DashboardBrowser) -> None:
    """On a phone the Menu's sections, opened from the keyboard, stayed open at Escape; and a section chosen with Enter
    hid the link that had the focus, so the focus fell to the page's start. Escape closes the menu, and a menu closed
    with the focus in it gives the focus back to the Menu button."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
    menu_open = "document.getElementById('nav-toggle').getAttribute('aria-expanded') === 'true'"
    await page.js("document.getElementById('nav-toggle').focus()")
    await page.press("Enter")
    await page.wait_for(menu_open)
    await page.press("Tab")
    assert await page.js("document.activeElement.dataset.view") == "zones"
    await page.press("Escape")
    assert await page.js(f"!({menu_open}) && document.activeElement.id === 'nav-toggle'")
    assert await page.js("document.getElementById('nav').getClientRects().length") == 0

    await page.press("Enter")
    await page.wait_for(menu_open)
    await page.js("document.querySelector('#nav a[data-view=tokens]').focus()")
    await page.press("Enter")
    await page.wait_for("!!document.getElementById('token-form')")
    assert await page.js(f"!({menu_open}) && document.activeElement.id === 'nav-toggle'")
    assert page.problems == []


async def test_every_section_can_be_reached_on_a_phone_held_sideways(site: Site, browser: DashboardBrowser) -> None:
    """A phone held sideways is wide and short: at 844 x 390 the sidebar, as high as the screen and fixed to it, held
    its sections 460 px high, so Health and Sign out were below the screen and no scrolling ever showed them; at
    740 x 360 (under the breakpoint) the open menu was the same. The sidebar scrolls within the screen's height, and
    each link reached with the keyboard is shown."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    shown = "(e => { e.focus(); const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })"
    for width, height in ((844, 390), (740, 360)):
        await page.command("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=True, width=width, height=height)
        await open_view(page, base, "zones", "!!document.querySelector('#zone-create')")
        if width < 760:
            await page.click("#nav-toggle")
            await page.wait_for("document.getElementById('nav-toggle').getAttribute('aria-expanded') === 'true'")
        for link in ("#nav a[data-view=health]", "#sign-out"):
            assert await page.js(f"{shown}(document.querySelector({json.dumps(link)}))"), (width, link)
    assert page.problems == []


async def test_a_button_reached_with_tab_in_a_table_that_scrolls_is_shown(site: Site, browser: DashboardBrowser) -> None:
    """On a phone a zone's row is wider than the screen and its table scrolls sideways; Chromium brings an element
    reached with Tab into sight only when none of it shows, so Delete, the row's last button, had the focus while all but
    8 px of it stayed hidden past the table's edge. A button reached with Tab in such a table is scrolled wholly into
    sight."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "zones", f"!!document.querySelector('#zone-list tr[data-zone=\"{ZONE}\"]')")
    row = f"document.querySelector('#zone-list tr[data-zone=\"{ZONE}\"]')"
    await page.js(f"{row}.querySelector('button[data-action=domains]').focus()")
    inside = ("(e => { const r = e.getBoundingClientRect(), w = document.getElementById('zone-list').getBoundingClientRect();"
              " return r.left >= w.left - 0.5 && r.right <= w.right + 0.5; })")
    for label in ("Origin", "Files", "Delete"):
        await page.press("Tab")
        assert await page.js("document.activeElement.textContent") == label
        assert await page.js(f"{inside}(document.activeElement)"), label
    assert page.problems == []


async def test_a_hit_ratio_short_of_all_never_reads_as_all(site: Site, browser: DashboardBrowser) -> None:
    """A day of 1,999 hits and one miss (99.95%) read '100.0%' in the hit ratio's figure and '100%' on its chart, so
    the misses vanished from both; a ratio short of all reads at most 99.9% (99% on the chart), one above none at
    least 0.1% (1%), and the others as they round."""
    day = time.time() // 86400 * 86400 - 86400
    hits = [Hit(timestamp=day + n, path=f"{ZONE}/v1/logos/{IMAGE}", zone=ZONE, status=200, bytes=10,
                cache="MISS" if n == 0 else "HIT", country="DE") for n in range(2000)]
    await site.control.app[ANALYTICS].record_hits(hits)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "analytics?days=7", "!!document.querySelector('[data-chart=hit-ratio] circle title')")
    assert await page.text("[data-kpi=hit-ratio] .value") == "99.9%"
    marks = await page.js("[...document.querySelectorAll('[data-chart=hit-ratio] circle title')].map(t => t.textContent)")
    assert len(marks) == 1 and marks[0].endswith(": 99%"), marks
    assert page.problems == []


async def test_analytics_fits_a_phone(site: Site, browser: DashboardBrowser) -> None:
    """On a phone the Analytics view was wider than the screen: the errors' table of paths widened the column of cards,
    so the page scrolled sideways and the counts of Countries and of the errors were cut off at the screen's edge. The
    cards take the screen's width, and the table scrolls within its card."""
    await seed_past_traffic(site)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "analytics?days=30", "!!document.querySelector('[data-chart=errors] .count')"
                                                     " && !!document.querySelector('#analytics-body table td.mono')")
    assert await page.cut_off() == []
    assert page.problems == []


CHART_TEXT = """(() => [...document.querySelectorAll('.chart svg')].map(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent);
  const smallest = Math.min(...texts.map(t => parseFloat(getComputedStyle(t).fontSize) * scale));
  const boxes = texts.map(t => t.getBoundingClientRect());  // a text's box is taller than its letters: half of it counts
  const overlaps = boxes.some((a, i) => boxes.some((b, j) => j > i && a.left < b.right - 0.5 && b.left < a.right - 0.5
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > Math.min(a.height, b.height) / 2));
  return [svg.closest('[data-chart]').dataset.chart, Math.round(smallest * 10) / 10, overlaps];
}))()"""


async def test_analytics_charts_can_be_read_on_a_phone(site: Site, browser: DashboardBrowser) -> None:
    """The charts are drawn 640 units wide and scaled to their card: on a phone (a card 324 px wide) their 13-unit
    labels, the days, the scale and each day's number, were 6.6 px high, too small to read. On a narrow screen they are
    drawn for its width: every label is at least 10 px high, and none covers another."""
    await seed_past_traffic(site)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    for days in (7, 30):
        await open_view(page, base, f"analytics?days={days}", "document.querySelectorAll('.chart svg').length === 3")
        charts = await page.js(CHART_TEXT)
        assert [name for name, smallest, overlaps in charts if smallest < 10 or overlaps] == [], charts
        assert await page.cut_off() == []
    assert page.problems == []


CHART_DAYS = "[...document.querySelectorAll('[data-chart={}] .{} title')].map(t => t.textContent)"
READOUT = "document.querySelector('[data-chart={}] .readout')?.textContent ?? ''"


async def tap_on(page: DashboardBrowser, selector: str, index: int) -> None:
    """A tap on the index-th element of selector (its chart scrolled into sight), at its middle; a bar too short to be
    hit is tapped just above itself, in its day's column, as a finger would."""
    found = f"document.querySelectorAll({json.dumps(selector)})[{index}]"
    await page.js(f"{found}.closest('svg').scrollIntoView({{block: 'center'}})")
    left, top, width, height = await page.js(f"(r => [r.left, r.top, r.width, r.height])({found}.getBoundingClientRect())")
    await page.tap(left + width / 2, top + height / 2 - (12 if height < 24 else 0))


async def test_a_days_number_is_read_with_a_tap_or_the_keyboard(site: Site, browser: DashboardBrowser) -> None:
    """With 30 days each day's number was in its bar's (or point's) title, shown on hover only: on a phone, or from the
    keyboard, it could not be read. A tap in a day's column, or the arrow keys once the chart has the focus (Tab),
    write that day's number under the chart."""
    await seed_past_traffic(site)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "analytics?days=30", "document.querySelectorAll('.chart svg').length === 3")
    requests = await page.js(CHART_DAYS.format("requests", "bar"))
    ratios = await page.js(CHART_DAYS.format("hit-ratio", "pointmark"))
    assert len(requests) == 30 and len(ratios) >= 28, (requests, ratios)
    await tap_on(page, "[data-chart=requests] .bar", 10)
    await page.wait_for(f"{READOUT.format('requests')} === {json.dumps(requests[10])}", within=5)
    await tap_on(page, "[data-chart=hit-ratio] .pointmark", 3)
    await page.wait_for(f"{READOUT.format('hit-ratio')} === {json.dumps(ratios[3])}", within=5)
    # From the keyboard: Tab from the zone's picker reaches the first chart; it reads its newest day, then the one before.
    await page.js("document.getElementById('analytics-zone').focus()")
    await page.press("Tab")
    assert await page.js("document.activeElement.closest('[data-chart]')?.dataset.chart") == "requests"
    assert await page.js(READOUT.format("requests")) == requests[-1]
    await page.press("ArrowLeft")
    await page.press("ArrowLeft")
    assert await page.js(READOUT.format("requests")) == requests[-3]
    await page.press("Home")
    assert await page.js(READOUT.format("requests")) == requests[0]
    assert await page.cut_off() == []
    assert page.problems == []


async def test_each_workers_heartbeat_is_shown_without_hovering(site: Site, browser: DashboardBrowser) -> None:
    """Each edge worker's generation and last heartbeat were in a title on its dot, shown on hover only: on a phone they
    could not be read. They are written out beside each worker."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "health", "!!document.querySelector('[data-edge=edge-0]')")
    report = await page.js("fetch('/api/dashboard/status').then(r => r.json())")
    workers = report["edges"]["nodes"][0]["workers"]
    assert workers
    shown = await page.js("document.querySelector('[data-edge=edge-0]').innerText")
    for worker in workers:
        assert re.search(rf"{re.escape(worker['name'])}\s+generation {worker['generation']} · seen [\d.]+ s ago", shown), shown
    assert await page.cut_off() == []
    assert page.problems == []


async def test_a_scopes_description_is_shown_without_hovering(site: Site, browser: DashboardBrowser) -> None:
    """What each scope opens was the title of its checkbox's label, shown on hover only: on a phone the form offered
    bare names (insights:read, ai:read). Each is described beside its name, and the form still fits the screen."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "tokens", "!!document.querySelector('#token-list .empty')")
    shown = await page.js("document.getElementById('token-scopes').innerText")
    for description in ("Read files", "Upload and delete files", "Read analytics", "Purge caches", "AI endpoints"):
        assert description in shown, shown
    assert "AccountKey" in await page.js("document.querySelector('#token-form').innerText")
    assert await page.cut_off() == []
    assert page.problems == []


LONG_PATH = f"{ZONE}/v1/" + "/".join(f"a-folder-with-a-long-name-{n}" for n in range(4)) + "/the-image-at-the-end.png"
WHOLE = """(s => [...document.querySelectorAll(s)].filter(el => el.textContent.includes('the-image-at-the-end'))
  .map(el => [el.textContent, el.scrollWidth <= el.clientWidth + 1 && el.scrollHeight <= el.clientHeight + 1]))"""


async def test_a_long_path_is_shown_whole(site: Site, browser: DashboardBrowser) -> None:
    """A path longer than its column was cut short with an ellipsis in Top assets and in the live tail, and shown whole
    only in a title on hover. It wraps within its column, whole."""
    async with ClientSession() as client:
        await create_zone(site, client)  # the paths of a zone not known are counted as "other"
    yesterday = time.time() // 86400 * 86400 - 86400
    await site.control.app[ANALYTICS].record_hits([Hit(timestamp=yesterday + n, path=LONG_PATH, zone=ZONE, status=200,
                                                       bytes=10, cache="HIT", country="DE") for n in range(3)])
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    for phone in (False, True):
        if phone:
            await page.as_phone()
        await open_view(page, base, "analytics?days=7", "!!document.querySelector('[data-chart=top-assets] .text')")
        assert await page.js(f"{WHOLE}('[data-chart=top-assets] .text')") == [[f"/{LONG_PATH}", True]]
        # Logged just before the view opens: the tail starts from the latest 100 records, and the dashboard's own
        # requests meanwhile (a loaded machine's slower test makes more of its polls) could push an older one out.
        site.control.app[REQUEST_LOG].append(control_entry(
            method="GET", path=f"/{LONG_PATH}", status=200, duration_ms=1.0, request_id=None, ip="127.0.0.1"))
        await open_view(page, base, "logs", "[...document.querySelectorAll('#tail-rows td.path')]"
                                            ".some(el => el.textContent.includes('the-image-at-the-end'))")
        rows = await page.js(f"{WHOLE}('#tail-rows td.path')")  # this visit's record, and the last one's if kept
        assert rows and all(row == [f"/{LONG_PATH}", True] for row in rows), rows
    assert await page.cut_off() == []
    assert page.problems == []


LONG_NAME = "-".join(f"a-file-with-a-long-name-{n}" for n in range(4)) + "-the-image-at-the-end.png"
IN_SIGHT = """((el, wrap) => el.getBoundingClientRect().right <= wrap.getBoundingClientRect().right + 1)(
  document.querySelector({0}), document.querySelector({0}).closest('.table-wrap'))"""
DROP = """(() => {{ const transfer = new DataTransfer();
  transfer.items.add(new File([Uint8Array.from(atob({data}), c => c.charCodeAt(0))], {name}, {{type: 'image/png'}}));
  const zone = document.getElementById('dropzone');
  for (const type of ['dragenter', 'dragover', 'drop'])
    zone.dispatchEvent(new DragEvent(type, {{dataTransfer: transfer, bubbles: true, cancelable: true}}));
  return {whole}('#uploads .upload .name'); }})()"""


async def test_a_long_file_name_is_shown_whole_in_files(site: Site, browser: DashboardBrowser) -> None:
    """A file name longer than its column was cut short with an ellipsis in Files' list and in an upload's progress
    line, whole only in a title on hover: a phone or the keyboard could not read it. It wraps, whole."""
    page = browser
    await files_with(site, page, LONG_NAME, last=LONG_NAME)
    for phone in (False, True):
        if phone:
            await page.as_phone()
        assert await page.js(f"{WHOLE}('#file-list .file-name button')") == [[LONG_NAME, True]], phone
        # in sight: not only at the end of a row that a long name made wider than its card, scrolled to sideways
        assert await page.js(IN_SIGHT.format(json.dumps(f"#file-list tr[data-name=\"{LONG_NAME}\"] button.link"))), phone
    await page.click(f"#file-list tr[data-name=\"{LONG_NAME}\"] button.link")  # chosen: its preview names it
    await page.wait_for(f"document.querySelector('#preview h2')?.textContent === {json.dumps(LONG_NAME)}")
    assert await page.js(f"{WHOLE}('#preview h2')") == [[LONG_NAME, True]]
    assert await page.cut_off() == []
    # The upload's line is measured as it is drawn (the drop draws it): once done it goes after 4 s.
    dropped = await page.js(DROP.format(data=json.dumps(base64.b64encode(png(32, 20)).decode()),
                                        name=json.dumps("new-" + LONG_NAME), whole=WHOLE))
    [[text, whole]] = dropped
    assert text.startswith(f"new-{LONG_NAME} · ") and whole, dropped  # the name, then its size
    await page.wait_for(f"document.querySelector('#uploads [data-name=\"new-{LONG_NAME}\"]')?.dataset.state === 'done'")
    assert await page.cut_off() == []
    assert page.problems == []


async def test_a_webhook_deliverys_error_is_shown_beside_its_status(site: Site, browser: DashboardBrowser) -> None:
    """A delivery's last answer showed its HTTP status; the error text recorded with it was only a title on hover,
    which a phone or the keyboard cannot read. It is written out under the status (when it says more than it)."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    created = await page.js("fetch('/api/webhooks', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                            f" body: JSON.stringify({{url: {json.dumps(site.receiver + '/down')},"
                            " events: ['purge.completed']})}).then(r => r.status)")
    assert created == 201
    purged = await page.js("fetch('/api/purge', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                           f" body: JSON.stringify({{tags: ['project-{ZONE}']}})}}).then(r => r.status)")
    assert purged == 200
    deliveries = site.control.app[WEBHOOK_DELIVERIES]

    async def dead() -> bool:
        return bool(await deliveries.db.fetch("SELECT id FROM webhook_deliveries WHERE state = 'dead'"))

    await wait_until(dead, "the delivery to /down becoming a dead letter")
    # This control's sender records "HTTP 503" with a 503, which the status says already; an error recorded with a
    # status that says more than it (written here into the delivery's record) is what the title alone showed.
    error = "HTTP 503: the receiver is down for maintenance until tomorrow morning, try again later"
    await deliveries.db.write("UPDATE webhook_deliveries SET last_error = ? WHERE state = 'dead'", (error,))
    await page.as_phone()
    await open_view(page, base, "webhooks", "!!document.querySelector('#webhook-detail tr[data-state=dead]')")
    answers = await page.js("[...document.querySelectorAll('#webhook-detail tr[data-state=dead] td')]"
                            ".filter(td => td.textContent.startsWith('HTTP 503')).map(td => td.innerText)")
    assert answers and set(answers) == {f"HTTP 503\n{error}"}  # in Recent deliveries and in Dead letters
    assert await page.cut_off() == []
    assert page.problems == []


async def test_a_purges_result_fits_a_phone(site: Site, browser: DashboardBrowser) -> None:
    """On a phone a purge's result (each edge's acknowledgement) and the session's earlier purges were tables wider than
    the screen, outside any box that scrolls: the page scrolled sideways and the acknowledgement latencies were cut off
    at the screen's edge. Each table scrolls within its card."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, "purge", "!!document.getElementById('purge-submit')")
    await page.fill("#purge-urls", f"/{ZONE}/v1/logos/{IMAGE}")
    await page.click("#purge-submit")
    await page.wait_for("!!document.querySelector('#purge-edges tr[data-edge=\"edge-0\"]')"
                        " && document.querySelectorAll('#purge-history tbody tr').length === 1")
    assert await page.cut_off() == []
    assert page.problems == []


async def test_files_fit_a_phone(site: Site, browser: DashboardBrowser) -> None:
    """On a phone the Files view was wider than the screen: its folder's table (the modification times) widened the one
    column of the file list and the preview, so the page scrolled sideways and New folder and the table's last columns
    were cut off at the screen's edge. Both cards take the screen's width, and the table scrolls within its card."""
    async with ClientSession() as client:
        await create_zone(site, client)
    await put_on_edge(site, f"{ZONE}/v1/logos/{IMAGE}", png(64, 40))
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone()
    await open_view(page, base, f"files/{ZONE}/v1", "!!document.querySelector('#file-list tr[data-name=logos]')")
    assert await page.cut_off() == []
    await open_view(page, base, f"files/{ZONE}/v1/logos?file={IMAGE}",
                    "(img => !!img && img.complete && img.naturalWidth === 64)(document.getElementById('preview-image'))")
    assert await page.cut_off() == []
    assert page.problems == []


async def test_every_view_fits_a_small_phone(site: Site, browser: DashboardBrowser) -> None:
    """On a phone 360 px wide (many Android phones) the Purge view's four kinds of purge were a row wider than its card:
    the page scrolled sideways and Everything was cut off at the screen's edge. Such a row of buttons wraps on a narrow
    screen; every view fits."""
    async with ClientSession() as client:
        await create_zone(site, client)
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await page.as_phone(360)
    views = {"zones": "#zone-list tr[data-zone]", f"files/{ZONE}/v1": "#file-list tr[data-name=logos]",
             "rules": "#rules-text", "purge": "#purge-mode button[data-mode=everything]",
             "analytics": "[data-kpi=requests] .value", "logs": "#tail-rows", "tokens": "#token-list .empty",
             "passkeys": "#passkey-table .empty", "webhooks": "#webhook-list .empty", "health": "#edge-nodes"}
    for route, ready in views.items():
        await open_view(page, base, route, f"!!document.querySelector({json.dumps(ready)})")
        assert (route, await page.cut_off()) == (route, [])
    assert page.problems == []


async def store_pngs(site: Site, client: ClientSession, *names: str) -> None:
    """Small PNGs (32 x 20) of these names in ZONE's v1/logos, through control's storage API."""
    for name in names:
        resp = await client.put(site.control.make_url(f"/api/storage/{ZONE}/v1/logos/{name}"), data=png(32, 20),
                                headers={**ACCESS, "Content-Type": "image/png"})
        assert resp.status == 201, await resp.text()


async def files_with(site: Site, page: DashboardBrowser, *names: str, last: str, phone: bool = False) -> None:
    """The zone ZONE with PNGs `names` in v1/logos, signed in (on a phone's screen with `phone`), Files open on that
    folder once the row of `last` is listed."""
    async with ClientSession() as client:
        await create_zone(site, client)
        await store_pngs(site, client, *names)
    await sign_in_with_password(page, site.base)
    if phone:
        await page.as_phone()
    await open_view(page, site.base, f"files/{ZONE}/v1/logos",
                    f"!!document.querySelector('#file-list tr[data-name={json.dumps(last)}]')")


async def delete_with_the_keyboard(page: DashboardBrowser, delete: str, gone: str, holder: str) -> None:
    """A Delete button (`delete`, a JavaScript expression) pressed with Enter, its confirmation (opened on Cancel)
    answered with Tab and Enter; once `gone` holds, the focus is on the list `holder` (an id), not at the page's start."""
    await page.js(f"{delete}.focus()")
    await page.press("Enter")
    await page.wait_for("document.activeElement?.textContent === 'Cancel'")
    await page.press("Tab")
    await page.press("Enter")
    await page.wait_for(gone)
    assert await page.js("document.activeElement.id") == holder


async def test_a_file_chosen_on_a_phone_shows_its_preview(site: Site, browser: DashboardBrowser) -> None:
    """On a phone the preview is below the folder's list: a file chosen further down a long folder (with a tap, or Enter
    on its name) filled a preview out of sight, and nothing seemed to happen; the focus stayed in the list, the preview's
    buttons a list's worth of Tabs away. The preview is brought into sight and takes the focus (its heading)."""
    page = browser
    await files_with(site, page, *(f"logo-{i:02}.png" for i in range(14)), last="logo-13.png", phone=True)
    await page.js("document.querySelector('#file-list tr[data-name=\"logo-13.png\"] button.link').focus()")
    await page.press("Enter")
    await page.wait_for("document.querySelector('#preview h2')?.textContent === 'logo-13.png'")
    await page.wait_for("document.activeElement === document.querySelector('#preview h2')")
    assert await page.js("(r => r.top >= 0 && r.top < innerHeight)(document.getElementById('preview').getBoundingClientRect())")
    await page.press("Tab")
    assert await page.js("document.getElementById('preview').contains(document.activeElement)")
    assert page.problems == []


async def test_a_file_deleted_from_the_keyboard_leaves_the_focus_in_the_folder(site: Site, browser: DashboardBrowser) -> None:
    """A file deleted from the keyboard (its row's Delete, or its preview's) went with the focus on its button, so the
    focus fell to the page's start and the next Tab began there. The folder's list keeps the focus."""
    async with ClientSession() as client:
        await create_zone(site, client)
        await store_pngs(site, client, "a.png", "b.png")
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, f"files/{ZONE}/v1/logos?file=b.png", "document.querySelector('#preview h2')?.textContent === 'b.png'")
    delete_buttons = {"a.png": "[...document.querySelectorAll('#file-list tr[data-name=\"a.png\"] button')]",
                      "b.png": "[...document.querySelectorAll('#preview button')]"}
    for name, buttons in delete_buttons.items():
        await delete_with_the_keyboard(page, f"{buttons}.find(b => b.textContent === 'Delete')",
                                       f"!document.querySelector('#file-list tr[data-name=\"{name}\"]')", "file-list")
    assert page.problems == []


async def test_the_link_to_a_view_whose_address_it_changed_opens_it_again(site: Site, browser: DashboardBrowser) -> None:
    """A view that changed its own address (Analytics' period, a Files preview closed by a delete), then the link it
    was opened with: the shell took that link for an address it had put back after a refused leave, and did nothing.
    The view opens again from the link."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "analytics", "document.querySelector('#period button.active')?.dataset.days === '7'")
    await page.click("#period button[data-days='30']")
    await page.wait_for("location.hash === '#/analytics?days=30&zone=all'")
    await page.js("document.querySelector('#nav a[data-view=analytics]').click()")
    await page.wait_for("location.hash === '#/analytics' && document.querySelector('#period button.active')?.dataset.days === '7'")
    assert page.problems == []


async def test_enter_in_a_confirmation_without_a_field_cancels(site: Site, browser: DashboardBrowser) -> None:
    """A deletion's confirmation opened with the focus on Delete, so Enter pressed once more (or held) on the row's
    Delete button deleted the file. The focus is on Cancel: Enter keeps the file; Delete is still a Tab away."""
    page = browser
    await files_with(site, page, IMAGE, last=IMAGE)
    await page.js(f"[...document.querySelectorAll('#file-list tr[data-name=\"{IMAGE}\"] button')]"
                  ".find(b => b.textContent === 'Delete').click()")
    await page.wait_for("!!document.querySelector('dialog[open]')")
    assert await page.js("document.activeElement.textContent") == "Cancel"
    await page.press("Enter")
    await page.wait_for("!document.querySelector('dialog[open]')")
    resp_status = await page.js(f"fetch('/api/storage/{ZONE}/v1/logos/{IMAGE}', {{method: 'HEAD'}}).then(r => r.status)")
    assert resp_status == 200
    assert page.problems == []


async def test_a_rule_error_is_reached_from_the_keyboard(site: Site, browser: DashboardBrowser) -> None:
    """A syntax error's line in the rules editor was reached by a click on the error only; its 'Line N' is a button,
    so Tab and Enter reach it too and select that line in the editor."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "rules?file=_redirects", "!!document.getElementById('rules-text')")
    await page.fill("#rules-text", "/old-logo.png /gallery/v1/logos/sunset.png 301\n/broken\n")
    await page.click("#rules-save")
    await page.wait_for("!!document.querySelector('#rule-errors li[data-line=\"2\"]')")
    await page.js("document.getElementById('rules-save').focus()")  # the editor selected the first error itself
    assert await page.js("!!document.querySelector('#rule-errors li[data-line=\"2\"] button')")
    await page.js("document.querySelector('#rule-errors li[data-line=\"2\"] button').focus()")
    await page.press("Enter")
    start = len("/old-logo.png /gallery/v1/logos/sunset.png 301\n")
    await page.wait_for("(t => document.activeElement === t && t.selectionStart === "
                        f"{start} && t.selectionEnd === {start + len('/broken')})(document.getElementById('rules-text'))")
    assert page.problems == []


async def test_the_rules_editor_shows_where_the_focus_is(site: Site, browser: DashboardBrowser) -> None:
    """The rules editor's text box took the focus from the keyboard (Tab from Save and publish) with nothing to show it:
    the page removes its outline, and the box around it stayed as it was. The box is outlined while the text has the
    focus, as the other fields are."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "rules", "!!document.getElementById('rules-text')")
    looks = ("(() => { const box = document.querySelector('.editor'), text = document.getElementById('rules-text');"
             " return [box, text].map(e => { const c = getComputedStyle(e);"
             " return [c.outlineStyle, c.outlineWidth, c.outlineColor, c.borderColor, c.boxShadow].join(' '); }).join(' | '); })()")
    await page.js("document.getElementById('rules-save').focus()")
    unfocused = await page.js(looks)
    await page.press("Tab")
    assert await page.js("document.activeElement.id") == "rules-text"
    assert await page.js(looks) != unfocused
    assert page.problems == []


async def test_a_choice_made_from_the_keyboard_keeps_the_focus(site: Site, browser: DashboardBrowser) -> None:
    """Analytics' period, the Purge view's kind of purge and the rules editor's file are rows of buttons that were drawn
    anew at each choice: the button pressed with Enter or Space was removed with the focus on it, so the focus fell to
    the page's start and the next Tab began there. The button chosen keeps the focus, and says it is the one chosen."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    chosen = "(b => document.activeElement === b && b.classList.contains('active') && b.getAttribute({state}) === 'true')"
    await open_view(page, base, "analytics", "document.querySelector('#period button.active')?.dataset.days === '7'")
    await page.js("document.querySelector('#period button[data-days=\"30\"]').focus()")
    await page.press("Enter")
    await page.wait_for("location.hash === '#/analytics?days=30&zone=all' && !!document.querySelector('[data-kpi=requests] .value')")
    assert await page.js(chosen.format(state="'aria-pressed'") + "(document.querySelector('#period button[data-days=\"30\"]'))")

    await open_view(page, base, "purge", "!!document.getElementById('purge-urls')")
    await page.js("document.querySelector('#purge-mode button[data-mode=prefixes]').focus()")
    await page.press(" ")
    await page.wait_for("!!document.getElementById('purge-prefixes')")
    assert await page.js(chosen.format(state="'aria-pressed'") + "(document.querySelector('#purge-mode button[data-mode=prefixes]'))")

    await open_view(page, base, "rules", "!!document.getElementById('rules-text')")
    redirects = "[...document.querySelectorAll('#view .segmented button')].find(b => b.textContent === '_redirects')"
    await page.js(f"{redirects}.focus()")
    await page.press("Enter")
    await page.wait_for("document.getElementById('rules-text').placeholder.startsWith('# _redirects')")
    assert await page.js(chosen.format(state="'aria-selected'") + f"({redirects})")
    assert page.problems == []


async def test_the_keyboard_keeps_its_place_when_a_list_is_drawn_again(site: Site, browser: DashboardBrowser) -> None:
    """Lists were drawn anew after each change and the webhook deliveries every 5 s, with the button that had the focus
    in them: the focus fell to the page's start. A webhook's Deliveries pressed with Enter, a dead letter's Replay
    reached with Tab and then refreshed under it, lost the keyboard's place; so did a revoked token's list. The button
    keeps the focus in the list drawn again; when its row is gone (deleted), the list has it. Which webhook's deliveries
    are shown was told by the row's colour alone; its Deliveries button says it is pressed."""
    async with ClientSession() as client:
        ids = {}
        for target in ("ok", "down"):
            resp = await client.post(site.control.make_url("/api/webhooks"), headers=ACCOUNT,
                                     json={"url": f"{site.receiver}/{target}", "events": ["purge.completed"]})
            assert resp.status == 201, await resp.text()
            ids[target] = (await resp.json())["id"]
        resp = await client.post(site.control.make_url("/api/tokens"), headers=ACCOUNT,
                                 json={"name": "ci", "scopes": ["storage:read"], "expiresInDays": 7})
        assert resp.status == 201, await resp.text()
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    row = "document.querySelector('{list} tr[data-id=\"{id}\"]')"
    button = "[...{row}.querySelectorAll('button')].find(b => b.textContent === '{text}')"
    focus_in_row = "(document.activeElement.textContent === '{text}' && document.activeElement.closest('tr') === {row})"

    await open_view(page, base, "webhooks", f"!!{row.format(list='#webhook-list', id=ids['down'])}")
    down = row.format(list="#webhook-list", id=ids["down"])
    await page.js(f"{button.format(row=down, text='Deliveries')}.focus()")
    await page.press("Enter")
    await page.wait_for(f"document.querySelector('#webhook-detail h2')?.textContent === 'Deliveries to {site.receiver}/down'")
    assert await page.js(focus_in_row.format(text="Deliveries", row=down))
    # Which webhook's deliveries are shown is said by its button, not by the row's colour alone.
    pressed = await page.js("Object.fromEntries([...document.querySelectorAll('#webhook-list tr[data-id]')].map(tr =>"
                            " [tr.dataset.id, [...tr.querySelectorAll('button')].find(b => b.textContent === 'Deliveries')"
                            ".getAttribute('aria-pressed')]))")
    assert pressed == {ids["ok"]: "false", ids["down"]: "true"}

    # A dead letter of /down (a purge's event, after two quick retries), refreshed every 5 s with its Replay focused.
    assert await page.js("fetch('/api/purge', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                         " body: JSON.stringify({tags: ['all-assets']})}).then(r => r.status)") == 200
    await page.wait_for("!!document.querySelector('#webhook-detail tr[data-state=dead] button')")
    letter = await page.js("(() => { const b = document.querySelector('#webhook-detail tr[data-state=dead] button'); b.focus();"
                           " window.drawnBefore = [...document.getElementById('webhook-detail').children];"
                           " return window.drawnBefore.some(card => card.contains(b)) && b.closest('tr').dataset.id; })()")
    assert letter
    await page.wait_for("!window.drawnBefore.some(card => document.contains(card))")  # the next refresh
    assert await page.js("document.activeElement.textContent === 'Replay'"
                         f" && document.activeElement.closest('tr').dataset.id === {json.dumps(letter)}")

    # Deleted from the keyboard (the confirmation opens on Cancel; Tab, Enter): the list keeps the focus.
    ok = row.format(list="#webhook-list", id=ids["ok"])
    await delete_with_the_keyboard(page, button.format(row=ok, text="Delete"), f"!{ok}", "webhook-list")

    await open_view(page, base, "tokens", "!!document.querySelector('#token-list tr[data-id]')")
    await delete_with_the_keyboard(page, "document.querySelector('#token-list tr[data-id] button')",
                                   "!document.querySelector('#token-list tr[data-id]')", "token-list")
    assert page.problems == []


async def test_a_screen_reader_is_told_which_view_opened_not_every_log_line(site: Site, browser: DashboardBrowser) -> None:
    """The whole view was a live region: a screen reader read out every view drawn, every line of the live tail as it
    arrived and the Health view every 5 s, so the page could not be used with one while the tail ran. The view's title
    is what is announced when another view opens; the tail's rows and the refreshed numbers are not."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    live = ("(s => !!document.querySelector(s)"
            ".closest('[aria-live]:not([aria-live=off]), [role=status], [role=log], [role=alert]'))")
    await open_view(page, base, "logs", "document.getElementById('tail-state')?.textContent === 'live'"
                                        " && !!document.querySelector('#tail-rows tr')")
    assert not await page.js(f"{live}('#tail-rows')")
    await open_view(page, base, "health", "!!document.querySelector('#edge-nodes')")
    assert not await page.js(f"{live}('#health-body')")
    assert await page.js(f"{live}('#view-title')")
    assert page.problems == []


async def test_live_logs_show_what_was_logged_while_the_stream_was_down(site: Site, browser: DashboardBrowser) -> None:
    """A live tail whose stream dropped (control restarting, a proxy) went on after the browser reconnected with what
    was logged from then on: what was logged in between never showed. Once the stream is back, it is read and shown."""
    page, base = browser, site.base
    await sign_in_with_password(page, base)
    await open_view(page, base, "logs", "document.getElementById('tail-state')?.textContent === 'live'")
    log = site.control.app[REQUEST_LOG]
    # The stream ends, and an entry is logged behind its end (in the same turn of the loop): the ended stream never
    # sends it, and the next one starts after it.
    log.end_streams()
    entry = log.append(control_entry(method="GET", path="/api/logged-in-the-gap", status=200, duration_ms=1.0,
                                     request_id=None, ip="127.0.0.1"))
    await page.wait_for(f"!!document.querySelector('#tail-rows tr[data-id=\"{entry['id']}\"]')")
    assert await page.js("document.getElementById('tail-state').textContent") == "live"
    ids = await page.js("[...document.querySelectorAll('#tail-rows tr')].map(tr => Number(tr.dataset.id))")
    assert ids == sorted(ids, reverse=True)  # newest first, the entry from the gap in its place
    assert page.problems == []
