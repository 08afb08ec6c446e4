"""Signing in to the dashboard in headless Chromium, on control's dashboard listener (its own origin) with a
real edge beside it: the password on http://127.0.0.1 (the Secure session cookie is kept and sent over
plain HTTP there), then on http://localhost a passkey registered with Chromium's virtual authenticator
(CDP WebAuthn), sign-out, and sign-in with the passkey. The browser also sends the cookie to the edge
(same host, other port), where it opens nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import load_settings
from tests.browser.headless_chromium import DevToolsError, HeadlessChromium, find_chromium
from tests.control.identity.signin_client import PASSWORD, SIGNIN_SECRETS
from tests.support.control import serve_dashboard
from tests.support.sockets import loopback_listener

pytestmark = pytest.mark.browser

WAIT_S = 30.0  # upper bound for a page to reach a state (never asserted as a duration)


@pytest.fixture
def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required under CI=true: run tests/browser/setup.sh (make setup)")
        pytest.skip("chromium is not installed (run tests/browser/setup.sh as root, or apt-get install chromium)")
    return binary


@pytest.fixture
async def ports(tmp_path: Path) -> AsyncIterator[tuple[int, int]]:
    """(dashboard port, edge port): control with its dashboard listener, plus one edge; both ports are
    chosen before control starts, so the dashboard's origins (127.0.0.1 and localhost on its port) are
    in control's configuration."""
    listener, dashboard_listener = loopback_listener(), loopback_listener()
    port, dashboard_port = listener.getsockname()[1], dashboard_listener.getsockname()[1]
    settings = load_settings(environ={"ASSETCDN_SERVER_PUBLIC_URL": f"http://127.0.0.1:{port}",
                                      "ASSETCDN_SERVER_DASHBOARD_PORT": str(dashboard_port)})
    control_server = TestServer(control.app.create_app(settings, SIGNIN_SECRETS, tmp_path / "data"))
    await control_server.start_server()
    await serve_dashboard(control_server, dashboard_listener)
    identity = EdgeIdentity(name="edge-b", worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_server = TestServer(edge.app.create_app(settings, SIGNIN_SECRETS, identity),
                             socket_factory=lambda *_: listener)
    await edge_server.start_server()
    try:
        yield dashboard_port, port
    finally:
        await edge_server.close()
        await control_server.close()


class Page:
    """The browser's page, with waits that survive the navigations a form submission causes."""

    def __init__(self, browser: HeadlessChromium) -> None:
        self.browser = browser

    async def js(self, expression: str) -> Any:
        return await self.browser.evaluate(expression)

    async def wait_for(self, expression: str) -> None:
        async with asyncio.timeout(WAIT_S):
            while True:
                try:
                    if await self.browser.evaluate(expression):
                        return
                except DevToolsError:
                    pass  # the page is being replaced by the next one
                await asyncio.sleep(0.05)

    async def goto(self, url: str) -> None:
        await self.browser.command("Page.navigate", url=url)
        await self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    async def status_of(self, path: str) -> int:
        return int(await self.js(f"fetch({json.dumps(path)}, {{credentials: 'same-origin'}}).then(r => r.status)"))

    async def sign_in_with_password(self, base: str) -> None:
        await self.goto(f"{base}/dashboard/login")
        await self.js(f"document.getElementById('password').value = {json.dumps(PASSWORD)};"
                      "document.querySelector('#password-form button[type=submit]').click()")
        await self.wait_for("location.pathname === '/dashboard/setup-passkey' && document.readyState === 'complete'")

    async def cookies(self, url: str) -> dict[str, dict[str, Any]]:
        found = await self.browser.command("Network.getCookies", urls=[url])
        return {c["name"]: c for c in found["cookies"]}


async def test_password_then_passkey_sign_in(chromium_binary: str, ports: tuple[int, int], tmp_path: Path) -> None:
    dashboard_port, edge_port = ports
    by_ip, by_name = f"http://127.0.0.1:{dashboard_port}", f"http://localhost:{dashboard_port}"
    browser = HeadlessChromium(chromium_binary, tmp_path / "profile")
    try:
        await browser.open(f"{by_ip}/dashboard/login")
        page = Page(browser)

        # 1. Password on the IP address: the Secure, HttpOnly, SameSite=Strict cookie is kept and sent.
        await page.sign_in_with_password(by_ip)
        session = (await page.cookies(by_ip))["cdn_session"]
        assert (session["secure"], session["httpOnly"], session["sameSite"], session["path"]) == \
            (True, True, "Strict", "/")
        assert await page.js("document.cookie") == "cdn_logged_in=1"  # the session itself is HttpOnly
        assert await page.status_of("/api/passkeys") == 200
        # An IP address cannot be a relying party: why passkeys default to localhost.
        refused = await page.js(
            "navigator.credentials.create({publicKey: {rp: {id: '127.0.0.1', name: 'x'},"
            " user: {id: new Uint8Array(16), name: 'u', displayName: 'u'}, challenge: new Uint8Array(32),"
            " pubKeyCredParams: [{type: 'public-key', alg: -7}], timeout: 5000}})"
            ".then(() => 'created', e => e.name)")
        assert refused == "SecurityError"

        # 2. On localhost: sign in with the password, then add a passkey on the virtual authenticator.
        await browser.command("WebAuthn.enable")
        await browser.command("WebAuthn.addVirtualAuthenticator", options={
            "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
            "isUserVerified": True, "automaticPresenceSimulation": True})
        await page.sign_in_with_password(by_name)
        await page.wait_for("!!window.assetcdnPasskeys && !document.querySelector('#passkey-add button').disabled")
        await page.js("document.getElementById('passkey-name').value = 'Virtual key';"
                      "document.querySelector('#passkey-add button[type=submit]').click()")
        await page.wait_for("[...document.querySelectorAll('#passkey-list li .name')]"
                            ".some(e => e.textContent === 'Virtual key')")
        listed = await page.js("fetch('/api/passkeys').then(r => r.json())")
        [passkey] = listed["passkeys"]
        assert (passkey["name"], passkey["lastUsedAt"]) == ("Virtual key", None)

        # 3. Sign out: the cookies are gone and the session no longer opens anything.
        await browser.command("Page.navigate", url=f"{by_name}/dashboard/logout")
        await page.wait_for("location.pathname === '/dashboard/login' && document.readyState === 'complete'")
        assert "cdn_session" not in await page.cookies(by_name)
        assert await page.status_of("/api/passkeys") == 401

        # 4. Sign in with the passkey.
        await page.wait_for("!!window.assetcdnPasskeys && !document.getElementById('passkey-signin').disabled")
        await page.js("document.getElementById('passkey-signin').click()")
        await page.wait_for("location.pathname === '/dashboard/' && !!document.getElementById('signed-in')")
        assert await page.status_of("/api/passkeys") == 200
        listed = await page.js("fetch('/api/passkeys').then(r => r.json())")
        assert listed["passkeys"][0]["lastUsedAt"] is not None
        assert (await page.cookies(by_name))["cdn_session"]["httpOnly"] is True

        # 5. The edge, where stored files are served: the browser sends it the cookie (cookies ignore
        # ports), and it opens nothing there; its /dashboard sends to the dashboard's own origin.
        edge_url = f"http://localhost:{edge_port}"
        assert "cdn_session" in await page.cookies(edge_url)
        await browser.navigate(f"{edge_url}/api/passkeys")
        assert (await page.js("JSON.parse(document.body.innerText).error.code")) == "Unauthorized"
        await browser.command("Page.navigate", url=f"{edge_url}/dashboard/")
        await page.wait_for(f"location.href === {json.dumps(by_name + '/dashboard/')} && !!document.getElementById('signed-in')")
    finally:
        await browser.close()


async def test_plain_http_on_another_host_says_what_to_change(chromium_binary: str, tmp_path: Path) -> None:
    """The dashboard opened over plain HTTP on a name that is not localhost (dashboard.public_url
    http://cdn.test:<port>, resolved to loopback for this browser only): the browser would drop the Secure session
    cookie, so the right password is answered with the reason instead of the sign-in page again, and the passkey
    note says passkeys need HTTPS there rather than pointing at the very page it is on."""
    dashboard_listener = loopback_listener()
    dashboard_port = dashboard_listener.getsockname()[1]
    base = f"http://cdn.test:{dashboard_port}"
    settings = load_settings(environ={"ASSETCDN_SERVER_DASHBOARD_PORT": str(dashboard_port),
                                      "ASSETCDN_DASHBOARD_PUBLIC_URL": base})
    control_server = TestServer(control.app.create_app(settings, SIGNIN_SECRETS, tmp_path / "data"))
    await control_server.start_server()
    await serve_dashboard(control_server, dashboard_listener)
    browser = HeadlessChromium(chromium_binary, tmp_path / "profile",
                               extra_flags=("--host-resolver-rules=MAP cdn.test 127.0.0.1",))
    try:
        await browser.open("about:blank")
        page = Page(browser)
        await page.goto(f"{base}/dashboard/login")
        await page.wait_for("!!document.getElementById('passkey-status').textContent")
        assert await page.js("document.getElementById('passkey-signin').disabled") is True
        note = await page.js("document.getElementById('passkey-status').textContent")
        assert "HTTPS" in note and base not in note, note
        await page.js(f"document.getElementById('password').value = {json.dumps(PASSWORD)};"
                      "document.querySelector('#password-form button[type=submit]').click()")
        await page.wait_for("!!document.querySelector('.notice')")
        notice = await page.js("document.querySelector('.notice').textContent")
        assert notice.startswith(f"Signing in on {base} cannot work: the session cookie is Secure"), notice
    finally:
        await browser.close()
        await control_server.close()
