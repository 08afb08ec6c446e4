"""The Python side of each TLS connection of the https port: ``ssl.SSLObject`` with fewer calls into OpenSSL.

uvloop's TLS protocol drives a connection through an ``SSLObject`` over two memory BIOs and calls it until
it raises ``SSLWantReadError``: at the start of the handshake (before the client has sent a byte), and on
every close, twice while reading what is left, then once more waiting for the client's close_notify. Each
such error made by CPython's ``_ssl`` is an OpenSSL call, an error queue read and an exception built from
it. :class:`TlsObject` (every context of assetcdn/edge/tls/certificates.py makes it: ``sslobject_class``)
answers those calls itself when nothing was received (the handshake's first call; the reads of a
connection closing after its last answer, below): OpenSSL has no byte to work on then, so it could only
have asked for more. The reads of a kept-alive connection check one flag more, nothing else.

A connection that answers its last request and closes (HTTP/1.1 ``Connection: close``,
assetcdn/edge/fastpath/protocol.py) arms :meth:`TlsObject.last_write`: the close_notify alert is sealed
right after that answer, so both leave in one write to the socket, and the connection closes without
waiting for the client's close_notify (RFC 8446 section 6.1 lets the closing side close at once; the
client has had everything, the alert last). Any other close keeps uvloop's: close_notify, then the
client's, or its EOF, within the shutdown timeout.
"""

from __future__ import annotations

import ssl
from typing import Any


def _want_read() -> ssl.SSLWantReadError:
    """What ``_ssl`` raises when OpenSSL needs more bytes (its errno and message)."""
    return ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "The operation did not complete (read)")


class TlsObject(ssl.SSLObject):
    """``ssl.SSLObject`` (made by ``SSLContext.wrap_bio``, never constructed) that knows its incoming BIO."""

    _incoming: ssl.MemoryBIO
    _last = False           # the next write is the connection's last: close_notify follows it
    _last_written = False   # it was written, close_notify behind it: the connection is closing

    @classmethod
    def _create(cls, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                server_hostname: str | None = None, session: ssl.SSLSession | None = None,
                context: ssl.SSLContext | None = None) -> TlsObject:
        made: TlsObject = super()._create(  # type: ignore[misc]  # private in typeshed, public in ssl.py
            incoming, outgoing, server_side, server_hostname, session, context)
        made._incoming = incoming
        return made

    def do_handshake(self) -> None:
        if not self._incoming.pending:  # nothing received since OpenSSL last asked for more
            raise _want_read()
        self._sslobj.do_handshake()  # type: ignore[attr-defined]

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002  # ssl.SSLObject's names
        sslobj = self._sslobj  # type: ignore[attr-defined]
        # Closing (uvloop reads what is left until OpenSSL asks for more): nothing received, nothing to read.
        # A kept-alive connection's reads check only the flag, in one frame as ssl.SSLObject.read.
        if self._last_written and not self._incoming.pending and not sslobj.pending():
            raise _want_read()
        return sslobj.read(len) if buffer is None else sslobj.read(len, buffer)

    def write(self, data: Any) -> int:
        count: int = self._sslobj.write(data)  # type: ignore[attr-defined]
        if self._last:
            self._last = False
            self._last_written = True
            self._close_notify()
        return count

    def last_write(self) -> None:
        """The next write is this connection's last: the close_notify alert is sealed right behind it."""
        self._last = True

    def _close_notify(self) -> None:
        try:
            self._sslobj.shutdown()  # type: ignore[attr-defined]
        except ssl.SSLError:  # the alert is written; OpenSSL then asks for the client's
            pass

    def unwrap(self) -> Any:
        if self._last_written:  # close_notify is sealed; the client's is not waited for
            return None
        return super().unwrap()
