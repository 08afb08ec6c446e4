"""aiohttp's TestServer with the edge's hit site (assetcdn/edge/fastpath/) in place of its SockSite, so tests
written against `aiohttp_client` reach the edge as clients of the edge process do: hits answered by
the hit path, everything else handed to the application."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp.test_utils import TestServer
from yarl import URL

from assetcdn.edge.fastpath.hit_server import HitSite


class HitTestServer(TestServer):
    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> None:
        if self.runner:
            return
        self._loop = loop
        self.runner = await self._make_runner(handler_cancellation=True, **kwargs)
        await self.runner.setup()
        sock = self.socket_factory(self.host, self.port or 0, socket.AF_INET)
        self.host, self.port = sock.getsockname()[:2]
        site = HitSite(self.runner, sock=sock)
        await site.start()
        self.scheme = "http"
        self._root = URL(f"http://{self.host}:{self.port}")

    @property
    def requests_begun(self) -> int:
        """Requests the application has begun answering, and the pull zone fills the hit path has begun
        (assetcdn/edge/fastpath/pull_fill.py): every request that reached the edge but its hits."""
        assert self.runner is not None
        fills = sum(site.hits.fills.started for site in self.runner.sites
                    if isinstance(site, HitSite) and site.hits is not None)
        return self.handler.requests_count + fills
