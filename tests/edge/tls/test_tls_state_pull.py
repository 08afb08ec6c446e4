"""An edge worker pulls control's TLS state (GET /_cluster/tls, signed) on its catch-up: at once when
control's /changes answer names a newer `tls_serial`, and tolerating a control that answers 404 (one
without TLS state)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer

from assetcdn.edge.cache.store import EdgeCache
from assetcdn.edge.control_client import ControlClient
from assetcdn.edge.node import EdgeNode
from assetcdn.shared.cluster import PREFIX, ReplayGuard, verify_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.generation_push import GenerationPush
from assetcdn.shared.metrics import Metrics
from assetcdn.shared.tls_state import TLS_STATE_PATH, TlsState

SECRET = "pull-test-secret"


def fake_control(states: list[TlsState | None]) -> tuple[web.Application, list[str]]:
    """A control that answers /changes (nothing changed, the newest state's serial) and /tls (the
    newest state, or 404 while there is none); `asked` records each signed /tls request."""
    asked: list[str] = []
    guard = ReplayGuard()

    async def changes(request: web.Request) -> web.Response:
        state = states[-1]
        answer = GenerationPush(0, None, None, tls_serial=state.serial if state is not None else None)
        return web.json_response(answer.to_json())

    async def tls(request: web.Request) -> web.Response:
        assert verify_request(SECRET, "GET", request.rel_url.path_qs, b"", request.headers, guard=guard)
        asked.append(request.path)
        state = states[-1]
        if state is None:
            raise web.HTTPNotFound()
        return web.json_response(state.to_message())

    app = web.Application()
    app.router.add_get(PREFIX + "/changes", changes)
    app.router.add_get(PREFIX + TLS_STATE_PATH, tls)
    return app, asked


async def test_catch_up_pulls_a_newer_state_and_tolerates_404(tmp_path: Path) -> None:
    states: list[TlsState | None] = [None]
    app, asked = fake_control(states)
    server = TestServer(app)
    await server.start_server()
    client = ControlClient(str(server.make_url("")), SECRET, timeout_s=5.0)
    await client.start()
    cache = EdgeCache(tmp_path / "cache")
    try:
        node = EdgeNode(load_settings(environ={}), "edge-0/0", client, cache, tmp_path, Metrics("edge"))
        node.tls.state_file = tmp_path / "tls-state-0.json"
        await node.catch_up()  # at start: asks, control has none (404): nothing held, no error
        assert asked == [PREFIX + TLS_STATE_PATH] and node.tls.serial == 0
        await node.catch_up()  # no serial named and asked lately: not asked again
        assert len(asked) == 1

        states.append(TlsState(5, {"token": "token.thumbprint"}, ()))
        await node.catch_up()  # /changes names serial 5: pulled at once
        assert len(asked) == 2 and node.tls.serial == 5 and node.tls.challenge("token") == "token.thumbprint"
        await node.catch_up()  # the same serial again: not pulled
        assert len(asked) == 2
        assert (tmp_path / "tls-state-0.json").stat().st_mode & 0o777 == 0o600
    finally:
        cache.close()
        await client.close()
        await server.close()
