"""The https listener: the hit path's site (assetcdn/edge/fastpath/hit_server.py) with TLS in front.

Each connection is TLS first (the certificate picked by SNI, assetcdn/edge/tls/certificates.py; a
handshake that is not done within ``handshake_timeout_s`` closes the connection; a ClientHello whose
server name is not ASCII is refused with a TLS alert before OpenSSL sees it,
assetcdn/edge/tls/client_hello.py). The TLS protocol is
made per connection (uvloop's, the one its listener would make) rather than by the listener, so each
new connection starts with the context current then (certificates.py: the default certificate's, its
ticket keys those of the period, assetcdn/edge/tls/tickets.py; without shared keys, one replaced to
rotate OpenSSL's own ticket key). (``loop.start_tls`` from a plain
protocol would do the same with public API, but loses a ClientHello that arrives before it takes over.) Once it is done the
protocol ALPN chose takes over: ``h2`` goes to an HTTP/2 connection (assetcdn/edge/tls/h2.py), anything
else (``http/1.1``, or no ALPN) to the same HitProtocol as the plain port, so hits are answered below
aiohttp and the rest by the application, over TLS.

A HitProtocol counts a delivery's bytes once they reached the kernel (assetcdn/edge/fastpath/protocol.py). TLS
passes every record it seals to the socket's transport beneath at once, and that transport holds what the
kernel did not take, which the TLS transport's write buffer size leaves out: ``TlsProtocol`` gives the
connection that transport, to count what it holds, and tells it when that transport has sent all it held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web
from uvloop.loop import SSLProtocol  # type: ignore[attr-defined]  # not in uvloop's stubs

from assetcdn.edge.fastpath.hit_server import HitServer, HitSite
from assetcdn.edge.fastpath.protocol import HitProtocol
from assetcdn.edge.heap import can_trim, trim_heap
from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.edge.tls.client_hello import ClientHelloCheck
from assetcdn.edge.tls.h2 import H2Limits, H2Protocol
from assetcdn.edge.tls.ssl_object import TlsObject

TRIM_AFTER = 64  # TLS connections gone (from the most open at once) before the heap is trimmed


class HeapTrim:
    """Gives the heap memory of closed TLS connections back to the system. Each held OpenSSL state and
    buffers; glibc keeps what they freed in its free lists, scattered among live objects, so the worker's
    memory would stay at its peak after a burst of clients (or an attack) is gone. Checked once a second;
    ``malloc_trim`` runs once TRIM_AFTER connections have closed since the most open at once."""

    def __init__(self, hits: HitServer) -> None:
        self.hits = hits
        self.peak = 0
        self.handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if can_trim():
            self._tick()

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _tick(self) -> None:
        count = len(self.hits.connections)
        if count > self.peak:
            self.peak = count
        elif self.peak - count >= TRIM_AFTER:
            trim_heap()
            self.peak = count
        self.handle = asyncio.get_running_loop().call_later(1.0, self._tick)


class TlsProtocol(SSLProtocol):  # type: ignore[misc]  # uvloop's, untyped
    """uvloop's TLS protocol, which keeps the socket's transport beneath it (`beneath`) and, each time that
    transport resumes it (it holds no more than its low-water mark), calls `drained` after its own work (the
    connection's ``HitProtocol.beneath_drained``; None: no one is told)."""

    __slots__ = ("beneath", "drained")

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.beneath: asyncio.WriteTransport | None = None
        self.drained: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.beneath = transport  # type: ignore[assignment]  # uvloop's TCPTransport, not a subclass
        super().connection_made(transport)

    def resume_writing(self) -> None:
        super().resume_writing()
        drained = self.drained
        if drained is not None:
            drained()

    def connection_lost(self, exc: Exception | None) -> None:
        self.drained = None  # the connection's method: a cycle through the transport otherwise
        super().connection_lost(exc)


class AlpnChoice(asyncio.Protocol):
    """The protocol of a connection until its TLS handshake is done; then it hands the connection to the
    protocol ALPN chose and is gone. `tls`: the connection's TLS protocol."""

    __slots__ = ("hits", "limits", "tls")

    def __init__(self, hits: HitServer, limits: H2Limits) -> None:
        self.hits = hits
        self.limits = limits
        self.tls: TlsProtocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol: asyncio.Protocol
        if chosen == "h2":
            protocol = H2Protocol(self.hits, self.limits)
        else:
            protocol = HitProtocol(self.hits)
            if isinstance(ssl_object, TlsObject):  # a last answer and close_notify leave in one write
                protocol.last_write = ssl_object.last_write
            tls, self.tls = self.tls, None
            if tls is not None:  # what the socket's transport holds has not reached the kernel either
                protocol.drain.beneath = tls.beneath
                tls.drained = protocol.beneath_drained
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
        self.heap_trim: HeapTrim | None = None

    secure = True  # TLS is made per connection (connections()), not by the listener

    def connections(self, hits: HitServer) -> asyncio.Protocol:
        """uvloop's own TLS protocol (what its listener makes when given a context), made here for each
        connection so that it starts with the current front context (its ticket keys up to date), behind the
        check of the first record (assetcdn/edge/tls/client_hello.py) until that record is whole."""
        choice = AlpnChoice(hits, self.limits)
        tls = choice.tls = TlsProtocol(asyncio.get_running_loop(), choice, self.certificates.front_context(), None,
                                       server_side=True, ssl_handshake_timeout=self.handshake_timeout_s)
        return ClientHelloCheck(tls, self.certificates.unreadable_names.refused)

    async def start(self) -> None:
        await super().start()
        self.certificates.start()
        assert self.hits is not None
        self.heap_trim = HeapTrim(self.hits)
        self.heap_trim.start()

    async def stop(self) -> None:
        if self.heap_trim is not None:
            self.heap_trim.stop()
        self.certificates.stop()
        await super().stop()
