"""An https page in headless Chromium loads images and an HLS stream from the edge over HTTPS, with the
certificate control obtained from a real ACME CA (Pebble) for the public host: no certificate error, no mixed
content, every response from the edge secure and over HTTP/2.

The browser trusts Pebble's root (and the test CA of the page's own server) through an NSS database in a HOME
of its own, so the trust is this browser profile's only; Chromium resolves the two test names to loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from assetcdn.control.video.demo import write_synthetic_video
from tests.browser.headless_chromium import HeadlessChromium
from tests.browser.player_page import player_app
from tests.edge.tls.certs import TestCa
from tests.integration.harness import ACCESS, ACCOUNT, METRICS, RunningCdn, start_cdn
from tests.prerequisites import installed_program
from tests.support.acme.pebble import Pebble, free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
PUBLIC_HOST = "cdn.shop.test"
PAGE_HOST = "page.shop.test"
HERE = Path(__file__).parent  # the player page's folder
PNG_1PX = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360f80f0000010101005b7e1ff20000000049454e44ae426082")


def certutil() -> str:
    return installed_program("certutil", "tests/support/acme/setup.sh (libnss3-tools)")


def browser_home(directory: Path, roots: dict[str, str]) -> dict[str, str]:
    """The environment of a browser whose own NSS database (under a HOME of its own) trusts `roots`."""
    nssdb = directory / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    subprocess.run([certutil(), "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, capture_output=True)
    for name, pem in roots.items():
        path = directory / f"{name}.pem"
        path.write_text(pem)
        subprocess.run([certutil(), "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", name, "-i", str(path)],
                       check=True, capture_output=True)
    return {**os.environ, "HOME": str(directory)}


class RecordingChromium(HeadlessChromium):
    """Keeps the network and console events that would show a certificate error or mixed content."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.console: list[str] = []

    def _event(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.responseReceived":
            self.responses.append(params["response"])
        elif method == "Network.loadingFailed":
            self.failures.append(params)
        elif method == "Log.entryAdded":
            self.console.append(params["entry"].get("text", ""))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
            self.console.append(" ".join(str(a.get("value", "")) for a in params.get("args", [])))


def _call(cdn: RunningCdn, method: str, path: str, *, data: bytes | None = None,
          headers: dict[str, str] | None = None, base: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request((base or cdn.edge_urls[0]) + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait(what: str, check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {within_s} s"
        time.sleep(0.3)


def _public_host_active(cdn: RunningCdn) -> bool:
    status, body = _call(cdn, "GET", "/api/health?deep=1", headers=METRICS, base=cdn.control_url)  # control's
    checks = json.loads(body)["checks"] if status in (200, 503) else []
    return any(c["name"] == "acme" and c.get("publicHost", {}).get("status") == "active" for c in checks)


def _serve(tmp_path: Path, hls_js: Path) -> tuple[Pebble, RunningCdn, int]:
    """Pebble, an `assetcdn up` whose public URL is https on a name Pebble validates, a PNG and a short clip
    uploaded; returns once the public host's certificate is active and the clip's HLS is committed."""
    https_port = free_port()
    pebble = Pebble(tmp_path / "pebble", http_port=0)
    pebble.prepare()
    cdn = start_cdn(tmp_path, edges=1, env_extra={
        "ASSETCDN_ACME_DIRECTORY_URL": pebble.directory_url, "ASSETCDN_ACME_CA_BUNDLE": str(pebble.listener_cert),
        "ASSETCDN_ACME_RETRY_DELAYS_S": "1,2", "ASSETCDN_TLS_HTTPS_PORT": str(https_port),
        "ASSETCDN_SERVER_PUBLIC_URL": f"https://{PUBLIC_HOST}:{https_port}"})
    try:
        pebble.http_port = int(cdn.edge_urls[0].rsplit(":", 1)[1])
        pebble.start()
        status, body = _call(cdn, "POST", "/api/core/zones", data=b'{"Name": "shop"}',
                             headers={**ACCOUNT, "Content-Type": "application/json"})
        assert status == 201, body
        status, body = _call(cdn, "PUT", "/api/storage/shop/v1/logos/dot.png", data=PNG_1PX, headers=ACCESS)
        assert status == 201, body
        clip = write_synthetic_video(tmp_path / "clip.mp4", "nature", seconds=8, width=640, height=360, fps=10,
                                     audio=True)
        status, body = _call(cdn, "PUT", "/api/storage/stocks/videos/nature.mp4", data=clip.read_bytes(),
                             headers=ACCESS)
        assert status == 201, body
        _wait("the public host's certificate", lambda: _public_host_active(cdn), 60)
        _wait("the clip's HLS", lambda: _call(cdn, "GET", "/api/stream?video=nature")[0] == 200, 180)
    except BaseException:
        pebble.stop()
        cdn.stop()
        raise
    return pebble, cdn, cdn.https_port  # another port when a test run beside this one took the one chosen


async def test_an_https_page_loads_images_and_hls_from_the_edge_without_certificate_or_mixed_content_errors(
        chromium: str, hls_js: Path, tmp_path: Path) -> None:
    certutil()
    pebble, cdn, https_port = await asyncio.to_thread(_serve, tmp_path, hls_js)
    page_ca = TestCa()
    page_cert, page_key = page_ca.issue(PAGE_HOST).write(tmp_path, "page")
    page_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    page_tls.load_cert_chain(page_cert, page_key)
    page = TestServer(player_app(HERE / "player.html", hls_js), host="127.0.0.1")
    await page.start_server(ssl=page_tls)
    env = browser_home(tmp_path / "browser-home", {"pebble": pebble.root_pem(), "page-ca": page_ca.pem.decode()})
    browser = RecordingChromium(chromium, tmp_path / "profile", env=env, extra_flags=(
        f"--host-resolver-rules=MAP {PUBLIC_HOST} 127.0.0.1, MAP {PAGE_HOST} 127.0.0.1",))
    edge = f"https://{PUBLIC_HOST}:{https_port}"
    page_url = f"https://{PAGE_HOST}:{page.port}/player.html"
    try:
        await browser.open(page_url)
        await browser.command("Network.enable")
        await browser.command("Log.enable")
        await browser.command("Runtime.enable")
        try:
            await browser.wait_for("document.readyState === 'complete' && !!window.playHls")
        except TimeoutError:
            shown = await browser.evaluate("location.href + ' | ' + document.title + ' | ' + "
                                           "document.body.innerText.slice(0, 300)")
            raise AssertionError(f"the page did not load: {shown}; {browser.failures}") from None
        assert await browser.evaluate("window.isSecureContext && location.protocol") == "https:"
        images = await browser.evaluate(f"""Promise.all([
            {json.dumps(edge + "/shop/v1/logos/dot.png")},
            {json.dumps(edge + "/api/transform?url=/shop/v1/logos/dot.png&w=8&format=webp")},
          ].map((src) => new Promise((resolve) => {{
            const img = new Image();
            img.onload = () => resolve({{src, ok: img.naturalWidth > 0}});
            img.onerror = () => resolve({{src, ok: false}});
            img.src = src;
            document.body.append(img);
          }})))""")
        assert all(image["ok"] for image in images), images
        played = await browser.evaluate(f"playHls({json.dumps(edge + '/api/stream?video=nature')}, 2, 60000)")
    finally:
        await browser.close()
        await page.close()
        await asyncio.to_thread(pebble.stop)
        assert await asyncio.to_thread(cdn.stop) == 0
    if played["status"] == "unsupported":
        pytest.skip(played["reason"])
    assert played["status"] == "played", played
    from_edge = [r for r in browser.responses if r["url"].startswith(edge)]
    assert len(from_edge) >= 4, [r["url"] for r in browser.responses]  # images, playlists, segments
    assert all(r["securityState"] == "secure" for r in from_edge), [(r["url"], r["securityState"]) for r in from_edge]
    assert {r.get("protocol") for r in from_edge} == {"h2"}  # the browser took HTTP/2 from the edge (ALPN)
    assert all(r["url"].startswith("https://") for r in browser.responses)
    assert not browser.failures, browser.failures
    assert not [line for line in browser.console if "Mixed Content" in line or "ERR_CERT" in line], browser.console
