"""A control plane with a dashboard password, and the browser-side steps of signing in: what the
sign-in and passkey tests share. Cookies are read from Set-Cookie and sent by hand, so each test
sees exactly what a browser would be given and would send back."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.identity.dashboard_origin import DASHBOARD_PORTS
from assetcdn.shared.config import load_settings
from tests.control.identity.soft_authenticator import SoftAuthenticator
from tests.support.control import SECRETS

PASSWORD = "correct horse battery staple"
SIGNIN_SECRETS = dataclasses.replace(SECRETS, dashboard_secret=PASSWORD)
# The defaults: the dashboard at http://localhost:8787 (its own port), passkeys with rp id "localhost".
ORIGIN = "http://localhost:8787"
IP_ORIGIN = "http://127.0.0.1:8787"

ControlFactory = Callable[..., Awaitable[TestClient]]


@pytest.fixture
def make_control(aiohttp_client, data_dir: Path) -> ControlFactory:  # type: ignore[no-untyped-def]
    """`await make_control(**env)`: a control app with the dashboard password and settings from `env`,
    its test server being the dashboard's own listener (assetcdn/control/identity/dashboard_origin.py)."""
    async def start(secrets: Any = SIGNIN_SECRETS, **env: str) -> TestClient:
        return as_dashboard_listener(await aiohttp_client(create_app(load_settings(environ=env), secrets, data_dir)))
    return start


def as_dashboard_listener(client: TestClient) -> TestClient:
    """Let the test server's port stand for the dashboard listener: control tells its listeners apart by
    the local port a request arrives on."""
    assert client.server.port is not None
    client.app[DASHBOARD_PORTS].add(client.server.port)
    return client


def cookies_set(resp: ClientResponse) -> list[str]:
    return resp.headers.getall("Set-Cookie", [])


def session_from(resp: ClientResponse) -> str:
    """The cdn_session value a response sets at Path=/ (not the clearing cookie at /dashboard)."""
    for header in cookies_set(resp):
        cookie: SimpleCookie = SimpleCookie()
        cookie.load(header)
        morsel = cookie.get("cdn_session")
        if morsel is not None and morsel["path"] == "/" and morsel.value:
            return morsel.value
    raise AssertionError(f"no cdn_session cookie in {cookies_set(resp)}")


def with_session(session: str, origin: str | None = ORIGIN, **more: str) -> dict[str, str]:
    headers = {"Cookie": f"cdn_session={session}", **more}
    if origin is not None:
        headers["Origin"] = origin
    return headers


async def password_login(client: TestClient, password: str = PASSWORD, **headers: str) -> ClientResponse:
    return await client.post("/dashboard/login", data={"password": password}, headers=headers,
                             allow_redirects=False)


async def signed_in(client: TestClient) -> str:
    resp = await password_login(client)
    assert resp.status == 302, await resp.text()
    return session_from(resp)


async def register(client: TestClient, session: str, authenticator: SoftAuthenticator, *,
                   name: str = "Test key", attestation: str = "packed", **create: Any) -> ClientResponse:
    begin = await client.post("/api/passkeys/register/begin", headers=with_session(session))
    assert begin.status == 200, await begin.text()
    credential = authenticator.create(await begin.json(), attestation=attestation, **create)
    return await client.post("/api/passkeys/register/complete", json={"credential": credential, "name": name},
                             headers=with_session(session))


async def auth_options(client: TestClient) -> dict[str, Any]:
    resp = await client.post("/api/passkeys/auth/begin")
    assert resp.status == 200, await resp.text()
    options: dict[str, Any] = await resp.json()
    return options


async def passkey_login(client: TestClient, authenticator: SoftAuthenticator, options: dict[str, Any] | None = None,
                        **get: Any) -> ClientResponse:
    options = options or await auth_options(client)
    return await client.post("/api/passkeys/auth/complete", json={"credential": authenticator.get(options, **get)})
