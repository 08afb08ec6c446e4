"""The https listener: the hit path's site (assetcdn/edge/fastpath/hit_server.py) with TLS in front.

Each connection is TLS first (the certificate picked by SNI, assetcdn/edge/tls/certificates.py; a
handshake that is not done within ``handshake_timeout_s`` closes the connection). The TLS protocol is
made per connection (uvloop's, the one its listener would make) rather than by the listener, so each
new connection starts with the current front context: replacing that context rotates the session
ticket key, which Python's ``ssl`` offers no other way to set. (``loop.start_tls`` from a plain
protocol would do the same with public API, but loses a ClientHello that arrives before it takes over.) Once it is done the
protocol ALPN chose takes over: ``h2`` goes to an HTTP/2 connection (assetcdn/edge/tls/h2.py), anything
else (``http/1.1``, or no ALPN) to the same HitProtocol as the plain port, so hits are answered below
aiohttp and the rest by the application, over TLS.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from uvloop.loop import SSLProtocol  # type: ignore[attr-defined]  # not in uvloop's stubs

from assetcdn.edge.fastpath.hit_server import HitServer, HitSite
from assetcdn.edge.fastpath.protocol import HitProtocol
from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.edge.tls.h2 import H2Limits, H2Protocol


class AlpnChoice(asyncio.Protocol):
    """The protocol of a connection until its TLS handshake is done; then it hands the connection to the
    protocol ALPN chose and is gone."""

    __slots__ = ("hits", "limits")

    def __init__(self, hits: HitServer, limits: H2Limits) -> None:
        self.hits = hits
        self.limits = limits

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol: asyncio.Protocol = H2Protocol(self.hits, self.limits) if chosen == "h2" else HitProtocol(self.hits)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class HttpsSite(HitSite):
    """`hits`: whether hits are answered below aiohttp (``[edge] fast_hits``); without, every request
    goes to the application, over HTTP/1.1 or HTTP/2 alike."""

    def __init__(self, runner: web.BaseRunner, host: str | None = None, port: int | None = None, *,
                 certificates: CertificateStore, handshake_timeout_s: float, limits: H2Limits,
                 hits: bool = True, **options: Any) -> None:
        super().__init__(runner, host, port, **options)
        self.certificates = certificates
        self.handshake_timeout_s = handshake_timeout_s
        self.limits = limits
        self.answer_hits = hits

    secure = True  # TLS is made per connection (connections()), not by the listener

    def connections(self, hits: HitServer) -> asyncio.Protocol:
        """uvloop's own TLS protocol (what its listener makes when given a context), made here for each
        connection so that it starts with the current front context (a rotated ticket key)."""
        protocol: asyncio.Protocol = SSLProtocol(asyncio.get_running_loop(), AlpnChoice(hits, self.limits),
                                                 self.certificates.front_context(), None, server_side=True,
                                                 ssl_handshake_timeout=self.handshake_timeout_s)
        return protocol

    async def start(self) -> None:
        await super().start()
        self.certificates.start()

    async def stop(self) -> None:
        self.certificates.stop()
        await super().stop()
