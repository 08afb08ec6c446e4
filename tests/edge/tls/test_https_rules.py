"""`_headers` rules over the https port on a real `assetcdn up`: a rule naming a header the hit path writes
on every secure answer gets the answer the application gives, on hits too."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time

import aiohttp
import pytest

from tests.edge.tls.client import TIMEOUT_S, client_context
from tests.integration.harness import ACCOUNT
from tests.support.https import HSTS_MAX_AGE_S, ZONE, HttpsCdn

pytestmark = pytest.mark.integration
WAIT_S = 30.0  # for the rules to reach the edge (never asserted as a duration)


def get(cdn: HttpsCdn, path: str) -> list[tuple[str, str]]:
    """The header lines of a GET over TLS, repeated names kept."""
    raw = socket.create_connection(("127.0.0.1", cdn.https_port), timeout=TIMEOUT_S)
    connection = http.client.HTTPConnection("cdn.example.test", cdn.https_port, timeout=TIMEOUT_S)
    connection.sock = client_context(cdn.ca_file).wrap_socket(raw, server_hostname="cdn.example.test")
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        return [(name.lower(), value) for name, value in response.getheaders()]
    finally:
        connection.close()


def test_a_rule_setting_hsts_leaves_the_configured_one_alone_on_hits(https_cdn: HttpsCdn) -> None:
    """The application sets HSTS after the rules; the hit path used to send a rule's value beside its own."""
    async def post_rules() -> None:
        async with aiohttp.ClientSession() as session, session.post(
                f"{https_cdn.cdn.control_url}/api/core/rules", headers=ACCOUNT, json={
                    "File": "_headers",
                    "Content": f"/{ZONE}/v1/ruled/*\n  X-Ruled: yes\n  Strict-Transport-Security: max-age=1\n"}) as resp:
            assert resp.status == 200, await resp.text()

    asyncio.run(post_rules())
    https_cdn.upload("v1/ruled/file.bin", b"ruled")
    path = f"/{ZONE}/v1/ruled/file.bin"
    deadline = time.monotonic() + WAIT_S
    while ("x-ruled", "yes") not in get(https_cdn, path):
        assert time.monotonic() < deadline, "the rules never reached the edge"
        time.sleep(0.1)
    for _ in range(3):  # cached by now: hits
        lines = get(https_cdn, path)
        assert [value for name, value in lines if name == "strict-transport-security"] == [
            f"max-age={HSTS_MAX_AGE_S}"], lines
    assert ("x-cache", "HIT") in lines
