"""The line the shared envelope middleware (assetcdn/shared/middleware.py) logs for an unhandled error names the
request's path as it was sent: a percent-encoded CR or LF in it cannot start a forged line of the text log."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web

from assetcdn.shared.middleware import install_envelopes


async def test_an_unhandled_errors_log_line_keeps_the_path_encoded(
        aiohttp_server, aiohttp_client, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    async def broken(_request: web.Request) -> web.Response:
        raise RuntimeError("broken")

    app = web.Application()
    install_envelopes(app)
    app.router.add_get(r"/{tail:[\s\S]*}", broken)
    client = await aiohttp_client(await aiohttp_server(app))
    caplog.set_level(logging.ERROR, logger="assetcdn.shared.middleware")
    forged = "/x%0d%0a2026-12-06 00:00:00,000 control INFO assetcdn: forged"
    resp = await client.get(forged)
    assert resp.status == 500
    messages = [record.getMessage() for record in caplog.records if "unhandled error" in record.getMessage()]
    assert len(messages) == 1
    assert "\n" not in messages[0] and "\r" not in messages[0], messages[0]
    assert "/x%0D%0A2026-12-06" in messages[0]  # as the client (aiohttp) sent it
