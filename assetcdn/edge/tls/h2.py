"""HTTP/2 on the https port: frames, HPACK, streams and flow control by libnghttp2 (through ``ngh2``).

A stream asking for a hit (GET or HEAD, no body) is answered from its fields: ``HitServer.answer_stream``
(assetcdn/edge/fastpath/hit_server.py) makes the HTTP/1.1 path's decisions on its method, authority, path and
the few fields the hit path reads, and gives back the prepared hit's header fields (a stored zone's split once
and kept on the prepared hit, a pull zone's made once a second for its Age) and the memory tier's body
(``_answer_directly``). Every other stream (a miss, a body on disk,
anything unusual) is answered exactly as an HTTP/1.1 request on its own connection would be: its headers
become an HTTP/1.1 request head (``Connection: close``; its body follows, chunked unless it has a
length) fed to a HitProtocol (assetcdn/edge/fastpath/protocol.py) on a transport of the stream's own
(``StreamTransport``). So a hit is answered by the hit path's HitServer, everything else by the
aiohttp application, with no second copy of either; the HTTP/1.1 answer written to that transport is
parsed (httptools) back into the stream's HEADERS and DATA frames, hop-by-hop fields left out. It
stays in this process and in memory: no socket, no second server (the alternative, a local HTTP/1.1
connection per stream, would add a connection, a copy through the kernel and a second parse of every
request). The stream rules libnghttp2 leaves unchecked (frames on closed streams, skipped stream ids, PRIORITY, a
stream's window overflow) are checked on each frame header before the library reads it (``FrameGuard``,
assetcdn/edge/tls/h2_guard.py).

Limits: ``h2_max_concurrent_streams`` (SETTINGS; streams past it are refused, and a client that
opens a burst of more is ended with GOAWAY), the header list size (SETTINGS_MAX_HEADER_LIST_SIZE,
enforced by HPACK decoding; libnghttp2 also caps CONTINUATION frames), ``h2_max_resets_per_10s``
streams reset by the client, or by the edge for the client's frames (CVE-2023-44487, "rapid reset": a reset
stream sends nothing more and its reader is told the connection is lost, as when an HTTP/1.1 client
goes away; a connection that resets too many is ended with ENHANCE_YOUR_CALM), as is one sending more
than ``h2_max_control_frames_per_s`` frames that carry no request; nothing read from a client that does
not read its answers (PING and SETTINGS floods); what a connection received handled a bounded part per
loop turn (TURN_BUDGET), so one connection cannot hold the worker; and the same per-request limits as
HTTP/1.1 (the request head goes through the same checks; a hit answered from the fields is one whose head
would be within MAX_HEAD). Response bytes wait in a stream only while the client's flow-control window is shut, as
references to what was written (never copies of a hit's body); past ``STREAM_BUFFER_HIGH`` for the
stream or ``CONNECTION_BUFFER_HIGH`` for the connection the producer (the hit path's file, or the
application) is paused, as a full socket pauses it on HTTP/1.1. A stream that sends nothing for
``send_timeout_s`` while it holds bytes is reset; a connection none of whose streams sent any is closed.
The HPACK table the encoder keeps is capped (HPACK_TABLE_MAX) and per-response fields never indexed. On
shutdown every connection gets GOAWAY and closes when its open streams are done. Frames go to TLS a slice
(SEND_SLICE) per write, and none while the socket is full: TLS encrypts each write whole into a buffer that
keeps its largest size while the connection lives. A worker keeps at most ``h2_max_connections`` open (a new
one past it is refused with GOAWAY); one without open streams is closed after ``h2_idle_timeout_s``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httptools
import ngh2
from ngh2 import ErrorCode, NeverIndexedHeader
from ngh2.types import Header

from assetcdn.edge.fastpath.protocol import (
    CACHE_FIELDS,
    MAX_HEAD,
    MAX_REQUEST_FIELDS,
    SLOTS,
    Decide,
    HitProtocol,
)
from assetcdn.edge.origin_http import HEAD_FIELD_LINES, MAX_FIELDS
from assetcdn.edge.tls.h2_guard import FrameGuard
from assetcdn.shared.config import Settings
from assetcdn.shared.logs import LinePerInterval

if TYPE_CHECKING:
    from assetcdn.edge.delivery_log import Pending
    from assetcdn.edge.fastpath.hit_server import HitServer

log = logging.getLogger(__name__)
# A client may advertise any header list size, down to none at all: every answer's reset then, one line per interval.
HEADS_TOO_LARGE = LinePerInterval(log)
STREAM_BUFFER_HIGH = 256 * 1024   # response bytes a stream holds before its producer is paused
STREAM_BUFFER_LOW = 64 * 1024
CONNECTION_BUFFER_HIGH = 1024 * 1024  # ... and all of a connection's streams together
CONNECTION_BUFFER_LOW = 512 * 1024
RESET_WINDOW_S = 10.0
READ_SLICE = 16 * 1024   # received bytes given to libnghttp2 at once
SEND_SLICE = 32 * 1024   # frames taken from libnghttp2 and written to TLS at once; TLS's write buffer mark
TURN_BUDGET = 64         # events handled per loop turn (a slice given to libnghttp2 costs SLICE_COST)
SLICE_COST = 16
HPACK_TABLE_MAX = 4096   # the encoder's table, whatever larger size the client allows
# libnghttp2 counts an answer's header block as each field's name and value plus FIELD_OVERHEAD, and resets the stream
# of a block past its limit: room for the largest head an origin may send (`answer_head_limit`) and the edge's fields.
FIELD_OVERHEAD = 32
EDGE_FIELDS_ROOM = 16 * 1024
# Answer fields that differ on every response: never put in the HPACK table (they would only evict the rest).
NEVER_INDEXED = frozenset((b"x-request-id", b"date", b"age"))
GLITCHES_PER_S = 330
# Frames that carry no request: a client sending more of them per second than allowed is ended. (PRIORITY frames
# and unknown frame types are consumed inside libnghttp2 without an event; PRIORITY counts among its glitches.)
CONTROL_EVENTS = (ngh2.PingReceived, ngh2.PingAcknowledged, ngh2.SettingsReceived, ngh2.SettingsAcknowledged,
                  ngh2.PriorityUpdateReceived, ngh2.AltSvcReceived, ngh2.OriginReceived)
# Connection-specific fields (RFC 9113 8.2.2): never carried over in either direction.
HOP_BY_HOP = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te",
                        b"host", b"expect", b"http2-settings"))
# length (24 bits: 16 + 8), type, flags, stream 0 (32), last stream id, error code
GOAWAY = struct.Struct(">HBBBIII")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
GET, HEAD = b"GET", b"HEAD"
Fields = tuple[Header, ...]
_FIELD_VALUE_FORBIDDEN = re.compile(rb"[\x00\r\n]")
# The pseudo-fields a request is answered by, in slots after the hit path's (WANTED): one table lookup a field.
METHOD, PATH, AUTHORITY = SLOTS, SLOTS + 1, SLOTS + 2
PSEUDO_FIELDS = {b":method": METHOD, b":path": PATH, b":authority": AUTHORITY}
NO_FIELDS = (None,) * (AUTHORITY + 1)
# Whitespace a :path or host may not hold, as ints: `int in bytes` is a byte search, while a one-byte bytes value
# is first tried as an int, a failure that builds (and drops) a TypeError on every stream.
SPACE, TAB = ord(" "), ord("\t")


def header_list_size(fields: Sequence[Header]) -> int:
    """An answer's header block as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 6.5.2): each field's name and
    value plus FIELD_OVERHEAD. A plain loop: half what a generator costs (about 1 us for 18 fields)."""
    size = FIELD_OVERHEAD * len(fields)
    for name, value in fields:
        size += len(name) + len(value)
    return size


def answer_head_limit(max_field_bytes: int) -> int:
    """The header block an answer may need, as libnghttp2 counts it: an origin's largest head (HEAD_FIELD_LINES
    field lines of `max_field_bytes`, MAX_FIELDS at most: assetcdn/edge/origin_http.py), each field's overhead, and
    the edge's own fields. The library's default (64 KB) would reset the stream of a head HTTP/1.1 relays whole."""
    return HEAD_FIELD_LINES * max_field_bytes + MAX_FIELDS * FIELD_OVERHEAD + EDGE_FIELDS_ROOM


@dataclass(frozen=True)
class H2Limits:
    max_concurrent_streams: int = 100
    max_header_list_size: int = 16384
    max_resets_per_10s: int = 200
    idle_timeout_s: float = 20.0
    max_control_frames_per_s: int = 1000
    send_timeout_s: float = 30.0
    max_connections: int = 10000  # per worker; 0: no limit
    max_response_head: int = answer_head_limit(16 * 1024)  # at the default [origin] max_header_kb

    @classmethod
    def from_settings(cls, settings: Settings) -> H2Limits:
        tls = settings.section("tls")
        return cls(max_concurrent_streams=int(tls["h2_max_concurrent_streams"]),
                   max_header_list_size=int(tls["h2_max_header_list_size"]),
                   max_resets_per_10s=int(tls["h2_max_resets_per_10s"]),
                   idle_timeout_s=float(tls["h2_idle_timeout_s"]),
                   max_control_frames_per_s=int(tls["h2_max_control_frames_per_s"]),
                   send_timeout_s=float(tls["send_timeout_s"]),
                   max_connections=int(tls["h2_max_connections"]),
                   max_response_head=answer_head_limit(int(float(settings.section("origin")["max_header_kb"]) * 1024)))


class MalformedRequest(Exception):
    """A stream's request that HTTP/1.1 could not carry (RFC 9113 8.1.1: answered with RST_STREAM)."""


def request_head(headers: Iterable[tuple[bytes, bytes]], has_body: bool) -> tuple[bytes, bytes]:
    """(method, HTTP/1.1 request head) of a stream's headers. Raises MalformedRequest."""
    target: list[bytes | None] = [None] * len(PSEUDO_FIELDS)
    fields: list[bytes] = []
    cookies: list[bytes] = []
    length = False
    host = None
    for name, value in headers:
        if _FIELD_VALUE_FORBIDDEN.search(value):
            raise MalformedRequest("field value with CR, LF or NUL")
        if name[:1] == b":":
            slot = PSEUDO_FIELDS.get(name)
            if slot is not None:
                target[slot - METHOD] = value
            continue
        if not _TOKEN.fullmatch(name):
            raise MalformedRequest("field name is not a token")
        if name == b"cookie":  # split into several fields by HPACK; one field again for HTTP/1.1
            cookies.append(value)
        elif name == b"host":
            host = value
        elif name not in HOP_BY_HOP:
            length = length or name == b"content-length"
            fields.append(name + b": " + value)
        elif name == b"expect" and value.lower() != b"100-continue":
            # An expectation HTTP does not define goes on, so the application refuses it (417) as over HTTP/1.1;
            # 100-continue does not (the stream's body comes as the window allows). Looked at on a hop-by-hop
            # field only: nothing more for the others.
            fields.append(b"expect: " + value)
    method, path, authority = target
    if method is None or path is None or not _TOKEN.fullmatch(method) or not (path[:1] == b"/" or path == b"*"):
        raise MalformedRequest("a request needs :method and a :path")
    if SPACE in path or TAB in path:
        raise MalformedRequest("whitespace in :path")
    host = authority or host
    if host is None or SPACE in host:
        raise MalformedRequest("a request needs :authority or host")
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: " + host, b"Connection: close", *fields]
    if cookies:
        lines.append(b"Cookie: " + b"; ".join(cookies))
    if has_body and not length:
        lines.append(b"Transfer-Encoding: chunked")
    return method, b"\r\n".join(lines) + b"\r\n\r\n"


def response_fields(head: bytes) -> Fields:
    """The HTTP/2 header fields of HTTP/1.1 answer lines (a status line first, or header lines alone), as a
    relayed answer's are made (StreamTransport.on_header): names in lower case, hop-by-hop fields left out,
    per-response ones never indexed."""
    fields: list[Header] = []
    for line in head.split(b"\r\n"):
        if line.startswith(b"HTTP/1.1 "):
            fields.append((b":status", line[9:12]))
            continue
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        name = name.lower()
        if name in NEVER_INDEXED:
            fields.append(NeverIndexedHeader(name, value.strip()))
        elif name not in HOP_BY_HOP:
            fields.append((name, value.strip()))
    return tuple(fields)


class StreamRequest:
    """What the hit decisions read of a stream's request (assetcdn/edge/fastpath/hit_server.py ``Request``),
    its pseudo-fields in the slots after theirs: one per connection, filled again for each stream answered
    directly."""

    __slots__ = ("headers", "peer")

    def __init__(self, peer: str | None) -> None:
        self.headers: list[bytes | None] = list(NO_FIELDS)
        self.peer = peer


class StreamTransport(asyncio.Transport):
    """One stream seen as a one-request HTTP/1.1 connection: what is written is the HTTP/1.1 answer,
    turned into this stream's frames; ``close`` is the end of that connection."""

    def __init__(self, connection: H2Protocol, stream_id: int, method: bytes) -> None:
        super().__init__()
        self.connection = connection
        self.stream_id = stream_id
        self.head_only = method == b"HEAD"
        self.protocol: Any = None
        self.parser: Any = None  # the HTTP/1.1 answer's (httptools), made by its first write
        self.response_headers: list[tuple[bytes, bytes]] = []
        self.headers_sent = False
        self.ended = False       # END_STREAM sent (or reset): nothing more goes out
        self.closed = False      # the HTTP/1.1 side closed its connection
        # The body waiting for the client's windows: views of what was written, not copies (a hit's body
        # is the memory tier's own immutable object).
        self.pending: collections.deque[memoryview] = collections.deque()
        self.pending_size = 0
        # Its whole body held at once by reference (a hit answered from the stream's fields, the memory tier's
        # own object): it costs no memory, so it does not count against the connection's buffer marks, where
        # a client that stops reading it would hold up every other stream's producer.
        self.referenced = False
        self.body_left = -1      # bytes of a Content-Length body still to come; -1: httptools frames the body
        self.chunked = False
        self.end_pending = False
        self.sent = 0            # DATA bytes sent (progress, checked by the connection's send timeout)
        self.checked = 0
        self.data_sent = False   # DATA went out since the client's last WINDOW_UPDATE of this stream
        self.producer_paused = False
        self.reading_paused = False
        self.unacknowledged = 0  # request body bytes held back from flow control while reading is paused
        self.chunked_body = False
        self.request_open = False  # the client has not ended its request: body bytes may still come
        self.aborted = False     # reset before its end
        self._when_sent: Callable[[int, bool], None] | None = None
        self.delivery: Pending | None = None  # a hit answered directly (H2Protocol._answer_directly)

    def when_sent(self, callback: Callable[[int, bool], None]) -> None:
        """Call ``callback(DATA bytes sent, reset before its end)`` once the stream has ended or was
        reset (at once if it has): what its delivery counts (assetcdn/edge/fastpath/protocol.py)."""
        if self.ended and not self.end_pending:
            callback(self.sent, self.aborted)
        else:
            self._when_sent = callback

    def finished(self, aborted: bool) -> None:
        """Nothing more goes out on this stream."""
        self.ended = True
        self.aborted = self.aborted or aborted
        callback, self._when_sent = self._when_sent, None
        if callback is not None:
            callback(self.sent, self.aborted)
        delivery, self.delivery = self.delivery, None
        if delivery is not None:
            self.connection.hits.stream_sent(delivery, self.sent, self.aborted)

    # --- httptools (the HTTP/1.1 answer) ----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        # RFC 9113 8.2.1: no value starts or ends with whitespace (a client takes such a response as malformed).
        if name in NEVER_INDEXED:
            self.response_headers.append(NeverIndexedHeader(name, value.strip(b" \t")))
        elif name not in HOP_BY_HOP:
            self.response_headers.append((name, value.strip(b" \t")))
        elif name == b"transfer-encoding":  # chunked as the final coding frames the body; another, the close
            self.chunked = value.rpartition(b",")[2].strip().lower() == b"chunked"

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue): not relayed
            self.response_headers = []
            self.chunked = False
            return
        length = None
        if not self.head_only and not self.chunked and status not in (204, 304):
            length = next((value for name, value in self.response_headers if name == b"content-length"), None)
        headers = [(b":status", str(status).encode()), *self.response_headers]
        self.response_headers = []
        self.headers_sent = True
        self.connection.send_headers(self, headers, end_stream=self.head_only)
        if self.head_only:
            self.finished(False)
        elif length is not None and length.isdigit():
            # Later writes are the body itself: held as written (write), not parsed and copied.
            self.body_left = int(length)

    def on_body(self, body: bytes) -> None:
        if self.body_left > 0:
            self.body_left -= len(body)
        self.hold(memoryview(body))

    def hold(self, view: memoryview) -> None:
        if not self.ended and view:
            self.pending.append(view)
            self.pending_size += len(view)
            if not self.referenced:
                self.connection.pending_total += len(view)
            self.connection.pump(self)

    def drop_pending(self) -> None:
        if not self.referenced:
            self.connection.pending_total -= self.pending_size
        self.pending.clear()
        self.pending_size = 0

    def on_message_complete(self) -> None:
        if not self.ended and self.headers_sent:
            self.end_pending = True
            self.connection.pump(self)

    # --- the transport the HitProtocol (or aiohttp's handler) writes to --------------------------

    def write(self, data: Any) -> None:
        if self.closed or self.ended and not self.end_pending:
            return
        if self.body_left > 0:
            if type(data) is bytes or isinstance(data, memoryview) and type(data.obj) is bytes:
                view = memoryview(data)  # immutable: a reference is enough
            else:
                view = memoryview(bytes(data))
            view = view[:self.body_left]
            self.body_left -= len(view)
            self.hold(view)
            if not self.body_left:
                self.on_message_complete()
            return
        if self.parser is None:
            self.parser = httptools.HttpResponseParser(self)
        try:
            self.parser.feed_data(bytes(data))
        except httptools.HttpParserUpgrade:
            self.connection.reset(self, ErrorCode.INTERNAL_ERROR)
        except httptools.HttpParserError:
            log.exception("an answer could not be relayed over HTTP/2")
            self.connection.reset(self, ErrorCode.INTERNAL_ERROR)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def buffered(self) -> int:
        return self.pending_size

    def get_write_buffer_size(self) -> int:
        return self.pending_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (STREAM_BUFFER_LOW, STREAM_BUFFER_HIGH)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # the stream's own marks apply

    def is_closing(self) -> bool:
        return self.closed or self.ended and not self.end_pending

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.ended and not self.end_pending:
            if self.headers_sent and self.body_left <= 0 and not self.chunked:  # a body delimited by the close
                self.end_pending = True
                self.connection.pump(self)
            else:  # no head yet, or a body cut short of its length or last chunk: never ended as if whole
                self.connection.reset(self, ErrorCode.INTERNAL_ERROR)
        self._stop_request()
        asyncio.get_running_loop().call_soon(self._lost, None)

    def abort(self) -> None:
        if not self.ended:
            self.connection.reset(self, ErrorCode.INTERNAL_ERROR)
        if not self.closed:
            self.closed = True
            self._stop_request()
            asyncio.get_running_loop().call_soon(self._lost, None)

    def _stop_request(self) -> None:
        """The HTTP/1.1 side closed with the client's request body still coming: it will not be read. A stream
        answered whole (or ending so) tells the client to stop sending it; a reset one was told already."""
        if self.request_open:
            self.request_open = False
            if not self.aborted:
                self.connection.stop_sending_after_end(self)

    def _lost(self, exc: Exception | None) -> None:
        protocol, self.protocol = self.protocol, None
        if protocol is not None:
            protocol.connection_lost(exc)
        self.connection.stream_done(self)

    def cancelled(self) -> None:
        """The client reset the stream, or the connection is gone: nothing more is sent for it, and its
        reader learns that its connection is lost (at the loop's next turn: an aiohttp handler given the
        request in this same turn has not started yet, and must start before it can be told)."""
        self.drop_pending()
        self.finished(not self.ended)
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self._lost, ConnectionResetError("stream reset"))

    @property
    def lag_places(self) -> H2Protocol:
        """The count of this connection's streams whose clients lag behind their fills (assetcdn/edge/states/feed.py),
        looked up by a fill whose client would first lag: held to CONNECTION_LAGGING of the worker's places."""
        return self.connection

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":  # nothing may write around TLS and the framing (sendfile)
            return default
        if name == "when_sent":
            return self.when_sent
        if name == "http2_stream":  # the connection is not this request's alone (assetcdn/shared/middleware.py
            return self.stream_id     # HTTP2_STREAM, not imported here: that module loads aiohttp's server)
        transport = self.connection.transport
        return transport.get_extra_info(name, default) if transport is not None else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol  # type: ignore[no-any-return]

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            self.connection.acknowledge(self)

    def is_reading(self) -> bool:
        return not self.reading_paused

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError

    # --- the request body --------------------------------------------------------------------------

    def body(self, data: bytes) -> None:
        if self.protocol is not None and not self.closed:
            self.protocol.data_received(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked_body else data)

    def end_of_body(self) -> None:
        self.request_open = False
        if self.chunked_body and self.protocol is not None and not self.closed:
            self.protocol.data_received(b"0\r\n\r\n")


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection (after TLS and ALPN; assetcdn/edge/tls/site.py)."""

    def __init__(self, hits: HitServer, limits: H2Limits) -> None:
        self.hits = hits
        self.limits = limits
        # Requests are validated by libnghttp2 (RFC 9113 8.2); the header list size is enforced from the first
        # HEADERS, not only once the client acknowledged our SETTINGS; the window is given back as bodies are read.
        self.h2 = ngh2.Connection(ngh2.Role.SERVER, ngh2.Configuration(
            auto_window_update=False, max_deflate_dynamic_table_size=HPACK_TABLE_MAX,
            max_inbound_header_list_size=limits.max_header_list_size,
            # An origin's head relayed whole, as over HTTP/1.1 (answer_head_limit).
            max_send_header_block_length=limits.max_response_head,
            # Streams refused past the limit, PRIORITY frames and the client's stream errors are "glitches": a
            # burst of more than the stream limit ends the connection with ENHANCE_YOUR_CALM (refilled at
            # GLITCHES_PER_S, libnghttp2's own rate).
            glitch_rate_limit=(limits.max_concurrent_streams, GLITCHES_PER_S)))
        # The stream rules libnghttp2 leaves unchecked (closed streams, skipped ids, PRIORITY, a stream's window).
        self.guard = FrameGuard(self.h2, limits.max_concurrent_streams)
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, StreamTransport] = {}
        self.resets: collections.deque[float] = collections.deque()
        self.writing_paused = False
        self.closing = False
        self.deadline = float("inf")
        self.loop = asyncio.get_running_loop()
        self.receiving = False      # handling what was received: frames go out together at its end
        self.ended = False          # GOAWAY sent for an error: the rest of what the client sent is ignored
        self.flush_scheduled = False
        # What was received and not handled yet: a loop turn handles a bounded part (TURN_BUDGET), so one
        # connection cannot hold the worker; reading stays paused until the rest is done.
        self.backlog = b""
        self.events: collections.deque[ngh2.Event] = collections.deque()
        self.work_scheduled = False
        self.reading_paused = False
        self.control_frames = 0
        self.control_since = 0.0
        self.pending_total = 0      # body bytes all streams hold
        self.paused_producers = 0
        self.lagging = 0            # streams whose clients lag behind their fills (StreamTransport.lag_places)
        self.sent = 0               # DATA bytes sent, and their count at the last progress check
        self.checked = 0
        self.checking = False       # streams are open: `deadline` is the next progress check
        self.data_sent = False      # DATA went out since the client's last WINDOW_UPDATE of the connection
        self.stop_sending: list[StreamTransport] = []  # to reset NO_ERROR once their answers are out
        self.last_stream_id = 0     # the client's last stream taken (and FrameGuard.last: our GOAWAY's, see _receive)
        # Hits answered from the stream's fields (_answer_directly); `batch_begun`: HitServer.begin_batch ran
        # in this loop turn.
        self.direct = hits.answers_hits
        self.wanted = {**hits.wanted, **PSEUDO_FIELDS}
        self.request = StreamRequest(None)
        self.batch_begun = False
        self.counted = False        # among the worker's open HTTP/2 connections (HitServer.h2_connections)
        # The client's SETTINGS_MAX_HEADER_LIST_SIZE when an answer's head may be larger (`limits.max_response_head`):
        # a head past it resets its stream (`_too_large`); None: none the edge sends can be.
        self.header_limit: int | None = None

    # --- the connection -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        hits = self.hits
        if self.limits.max_connections and hits.h2_connections >= self.limits.max_connections:
            self._refuse()
            return
        hits.h2_connections += 1
        self.counted = True
        # What TLS holds encrypted while the socket is full (its buffer keeps its largest size): about a slice.
        transport.set_write_buffer_limits(high=SEND_SLICE)  # type: ignore[attr-defined]
        hits.connections.add(self)  # type: ignore[arg-type]  # swept for deadlines, told at shutdown
        self.deadline = self.loop.time() + self.limits.idle_timeout_s
        peer = transport.get_extra_info("peername")
        self.request.peer = peer[0] if isinstance(peer, tuple) else None
        self.h2.initiate_connection({ngh2.Setting.MAX_CONCURRENT_STREAMS: self.limits.max_concurrent_streams,
                                     ngh2.Setting.MAX_HEADER_LIST_SIZE: self.limits.max_header_list_size})
        self.flush()

    def _refuse(self) -> None:
        """The worker holds h2_max_connections: this one gets SETTINGS and GOAWAY (no stream taken, so the client
        may try again later or elsewhere) and is closed."""
        log.warning("HTTP/2 connection from %s refused: %d open in this worker (tls.h2_max_connections)",
                    self._peer(), self.hits.h2_connections)
        self.closing = self.ended = True
        with contextlib.suppress(ngh2.NGH2Error):
            self.h2.initiate_connection({ngh2.Setting.MAX_CONCURRENT_STREAMS: 0})
            self.h2.send_goaway(ErrorCode.NO_ERROR, last_stream_id=0, debug_data=b"too many connections")
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.counted = False
            self.hits.h2_connections -= 1
        self.hits.connections.discard(self)
        self.transport = None
        for stream in list(self.streams.values()):
            stream.cancelled()
        self.streams.clear()

    def pause_writing(self) -> None:
        # The client is not reading: read (and handle) nothing more from it either, so frames libnghttp2 answers
        # by itself (PING and SETTINGS acknowledgements: a "ping flood") cannot pile up in memory.
        self.writing_paused = True
        self._control_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.flush()
        for stream in list(self.streams.values()):
            self.pump(stream)
        self._schedule_work()
        self._control_reading()

    def _control_reading(self) -> None:
        """Read while nothing waits: no unsent answers, nothing received left to handle."""
        pause = self.writing_paused or bool(self.backlog or self.events)
        if pause != self.reading_paused and self.transport is not None:
            self.reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _schedule_work(self) -> None:
        if (self.backlog or self.events) and not self.work_scheduled and not self.writing_paused:
            self.work_scheduled = True
            self.loop.call_soon(self._work)

    def flush(self) -> None:
        transport = self.transport
        self.flush_scheduled = False
        if transport is None:
            return
        connection = self.h2
        try:
            # A slice per write: TLS encrypts each write whole into a buffer that keeps its largest size for the
            # connection's life (and the library makes one large answer far more slowly than it makes slices).
            # While the client is not reading, frames wait in the library, not encrypted, unless ending.
            while not self.writing_paused or self.ended:
                data = connection.data_to_send(SEND_SLICE)
                if not data:
                    if self.stop_sending and self._stop_sending():  # RST_STREAM after the frames that end answers
                        continue
                    break
                transport.write(data)
        except ngh2.NGH2Error:  # the connection is over
            return
        if not connection.want_read and not connection.want_write:
            # Done for the library: it ended the connection (a protocol error, a limit), or both sides said
            # GOAWAY and no stream is open.
            self.closing = self.ended = True
            transport.close()

    def schedule_flush(self) -> None:
        """Frames made by a stream go out in one write (one TLS record where they fit): at the end of the
        data_received that made them, or at the loop's next turn for answers made later."""
        if not self.receiving and not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def timed_out(self) -> None:
        """The deadline passed (HitServer's sweep). Idle: GOAWAY and close. With streams open, a progress
        check every ``send_timeout_s``: a stream holding body bytes that sent none since the last check is
        reset, and the connection is closed when none of its streams sent any."""
        if not self.streams:
            self.goaway(ErrorCode.NO_ERROR)
            return
        waiting = [stream for stream in self.streams.values() if stream.pending_size]
        if waiting and self.sent == self.checked and self.transport is not None:
            log.info("HTTP/2 client %s read nothing for %.0f s: connection closed", self._peer(),
                     self.limits.send_timeout_s)
            self.closing = self.ended = True
            self.transport.abort()
            return
        for stream in waiting:
            if stream.sent == stream.checked:
                self.reset(stream, ErrorCode.CANCEL)
                stream.cancelled()
        for stream in self.streams.values():
            stream.checked = stream.sent
        self.checked = self.sent
        self.deadline = self.loop.time() + self.limits.send_timeout_s
        self.flush()

    def close_when_idle(self) -> None:
        """The server is stopping: GOAWAY now (no new streams), close once the open ones are answered."""
        self.closing = True
        if self.transport is None:
            return
        with contextlib.suppress(ngh2.NGH2Error):
            self.h2.send_goaway(ErrorCode.NO_ERROR)
        self.flush()
        if not self.streams:
            self.transport.close()

    def goaway(self, code: ErrorCode) -> None:
        self.closing = self.ended = True
        if self.transport is None:
            return
        try:
            self.h2.terminate_connection(code)
            self.flush()
        except ngh2.NGH2Error:
            pass
        self.transport.close()

    # --- frames in ------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.backlog = self.backlog + data if self.backlog else data
        if not self.work_scheduled and not self.writing_paused:
            self._work()

    def _work(self) -> None:
        """Handle what was received, TURN_BUDGET at most; the rest waits for the loop's next turn (with
        reading paused), so other connections of the worker are served in between."""
        self.work_scheduled = False
        if self.transport is None or self.ended:
            return
        self.batch_begun = False
        budget = TURN_BUDGET
        self.receiving = True
        try:
            while budget > 0 and not self.writing_paused:
                if self.events:
                    budget -= 1
                    if not self._event(self.events.popleft()):
                        return
                elif self.backlog:
                    budget -= SLICE_COST
                    data, self.backlog = self.backlog[:READ_SLICE], self.backlog[READ_SLICE:]
                    if not self._receive(data):
                        return
                else:
                    break
        finally:
            self.receiving = False
        self.flush()
        self._schedule_work()
        self._control_reading()

    def _receive(self, data: bytes) -> bool:
        connection = self.h2
        guard = self.guard
        try:
            error = guard.receive(data)
            self.events.extend(connection.events())
        except ngh2.ConnectionStateError:  # the library ended the connection itself: its GOAWAY goes out
            self.closing = self.ended = True
            self.flush()
            if self.transport is not None:
                self.transport.close()
            return False
        except ngh2.NGH2Error as exc:  # the library can send nothing more: our own GOAWAY
            log.debug("HTTP/2 protocol error from %s: %s", self._peer(), exc)
            self.closing = self.ended = True
            if self.transport is not None:
                code = ErrorCode.ENHANCE_YOUR_CALM if isinstance(exc, ngh2.DenialOfServiceError) else \
                    ErrorCode.PROTOCOL_ERROR
                # Every stream the client opened up to the refused frame counts as processed (RFC 9113 6.8: a
                # client retries those above the last stream id on a new connection), so that a stream refused
                # for itself (a header list past h2_max_header_list_size) is not sent again to be refused again.
                last = max(self.last_stream_id, guard.last)
                self.transport.write(GOAWAY.pack(0, 8, 7, 0, 0, last, code))  # 8-byte payload
                self.transport.close()
            return False
        if error is not None:
            log.debug("HTTP/2 protocol error from %s: %s (a stream rule)", self._peer(), error.name)
            self.goaway(error)
            return False
        while guard.streams_reset:  # streams reset for the client's frames count as its resets
            guard.streams_reset -= 1
            self._count_reset()
        return not self.ended

    def _event(self, event: ngh2.Event) -> bool:
        """Handle one event; False once the connection is ending."""
        if isinstance(event, ngh2.RequestReceived):
            self._request(event)
        elif isinstance(event, ngh2.DataReceived):
            self._data(event)
        elif isinstance(event, ngh2.TrailersReceived):
            self._trailers(event.stream_id)
        elif isinstance(event, ngh2.WindowUpdated):
            self._window_updated(event.stream_id)
        elif isinstance(event, ngh2.StreamReset):
            self._control_frame()
            self._reset_by_client(event.stream_id)
        elif isinstance(event, ngh2.StreamClosed):
            self._closed_by_library(event)
        elif isinstance(event, ngh2.SettingsReceived):
            self._control_frame()
            settings = event.settings
            if ngh2.Setting.MAX_HEADER_LIST_SIZE in settings:
                size = settings[ngh2.Setting.MAX_HEADER_LIST_SIZE]
                self.header_limit = size if size < self.limits.max_response_head else None
            if ngh2.Setting.INITIAL_WINDOW_SIZE in settings:
                # A larger initial window opens every stream's window (RFC 9113 6.9.2) with no WINDOW_UPDATE to say so.
                for each in list(self.streams.values()):
                    self.pump(each)
        elif isinstance(event, CONTROL_EVENTS):
            self._control_frame()
        elif isinstance(event, ngh2.GoAwayReceived) and event.error_code == ErrorCode.NO_ERROR and self.streams:
            # The client opens no more streams (RFC 9113 6.8, a graceful close: a proxy draining its pool): those
            # open are answered, and the connection closes once they are (as after the edge's own GOAWAY).
            self._control_frame()
            self.closing = True
        elif isinstance(event, (ngh2.ConnectionClosed, ngh2.GoAwayReceived)):
            self.closing = self.ended = True
            if self.transport is not None:
                self.flush()
                self.transport.close()
        return self.transport is not None and not self.ended

    def _window_updated(self, stream_id: int) -> None:
        # A client that reads sends WINDOW_UPDATE as DATA arrives; one that sends them otherwise is
        # counted as sending control frames.
        if stream_id == 0:
            if not self.data_sent:
                self._control_frame()
            self.data_sent = False
            for each in list(self.streams.values()):
                self.pump(each)
            return
        stream = self.streams.get(stream_id)
        if stream is None or not stream.data_sent:
            self._control_frame()
        if stream is not None:
            stream.data_sent = False
            self.pump(stream)

    def _control_frame(self) -> None:
        """Count a frame that carries no request (per second); past the limit, GOAWAY ENHANCE_YOUR_CALM."""
        now = self.loop.time()
        if now - self.control_since >= 1.0:
            self.control_since = now
            self.control_frames = 0
        self.control_frames += 1
        if self.control_frames > self.limits.max_control_frames_per_s and not self.ended:
            log.warning("HTTP/2 client %s sent more than %d control frames in a second: connection ended",
                        self._peer(), self.limits.max_control_frames_per_s)
            self.goaway(ErrorCode.ENHANCE_YOUR_CALM)

    def _closed_by_library(self, event: ngh2.StreamClosed) -> None:
        """libnghttp2 reset a stream itself (a stream error of the client's): its reader is told, as for a reset."""
        stream = self.streams.get(event.stream_id)
        if stream is not None and event.error_code != ErrorCode.NO_ERROR and not stream.ended:
            del self.streams[event.stream_id]
            stream.cancelled()
            self._forget(stream)
            self._relieve(stream)
            self._maybe_idle()

    def _request(self, event: ngh2.RequestReceived) -> None:
        stream_id = event.stream_id
        if self.closing:  # after our GOAWAY: refused, the client may retry it elsewhere
            with contextlib.suppress(ngh2.NGH2Error):
                self.h2.reset_stream(stream_id, ErrorCode.REFUSED_STREAM)
            return
        self.last_stream_id = stream_id
        decide: Decide | None = None
        if event.end_stream and self.direct:
            decide = self._answer_directly(stream_id, event.headers)
            if decide is None:
                return
        has_body = not event.end_stream
        try:
            method, head = request_head(event.headers, has_body)
        except MalformedRequest as exc:
            log.debug("malformed HTTP/2 request from %s: %s", self._peer(), exc)
            with contextlib.suppress(ngh2.NGH2Error):
                self.h2.reset_stream(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        stream = StreamTransport(self, stream_id, method)
        stream.chunked_body = has_body and b"\r\nTransfer-Encoding: chunked\r\n" in head
        stream.request_open = has_body
        self.streams[stream_id] = stream
        if not self.checking:
            self.checking = True
            self.checked = self.sent
            self.deadline = self.loop.time() + self.limits.send_timeout_s
        protocol = HitProtocol(self.hits)
        protocol.send_timeout_s = None  # progress is judged per connection (timed_out)
        if decide is not None:
            protocol.decide = decide
        stream.protocol = protocol
        protocol.connection_made(stream)
        protocol.data_received(head)
        if not has_body:
            stream.end_of_body()

    def _answer_directly(self, stream_id: int, headers: Sequence[Header]) -> Decide | None:
        """A GET or HEAD without a body answered by the hit path from the stream's fields (HitServer.answer_stream),
        its body sent from memory as the windows allow: None. Otherwise the stream's HTTP/1.1 request goes the
        usual way, answered by what is returned (a miss, a body on disk, anything the fields make unusual: what
        answer_stream decided, so its HTTP/1.1 side does not decide again). Fields malformed by RFC 9113 (CR, LF or
        NUL in a value, a name not a lowercase token) never get here: libnghttp2 resets their stream."""
        slots = self.request.headers
        slots[:] = NO_FIELDS
        wanted = self.wanted
        size = 0
        for name, value in headers:
            size += len(name) + len(value) + 4  # as a line of the HTTP/1.1 head the stream would make
            slot = wanted.get(name)
            if slot is not None:
                # A repeated field: the application decides, as on HTTP/1.1 (HitProtocol.on_header), where the
                # cache fields' slot may hold several (only whether one is there counts).
                if slots[slot] is not None and slot != CACHE_FIELDS:
                    return self.hits.answer
                slots[slot] = value
        method, path, authority = slots[METHOD], slots[PATH], slots[AUTHORITY]
        if method != GET and method != HEAD or path is None or size > MAX_HEAD or len(headers) > MAX_REQUEST_FIELDS:
            return self.hits.answer  # aiohttp's limits decide (its HTTP/1.1 side counts the head's fields)
        host = authority or slots[0]
        if host is None or SPACE in path or TAB in path or SPACE in host:
            return self.hits.answer
        hits = self.hits
        if not self.batch_begun:
            self.batch_begun = True
            hits.begin_batch()
        answer = hits.answer_stream(self.request, method == HEAD, host, path)
        if not isinstance(answer, tuple):
            return answer
        fields, body, delivery = answer
        stream = StreamTransport(self, stream_id, method)
        stream.closed = True  # no HTTP/1.1 side: the stream leaves the table once its answer is out
        stream.delivery = delivery
        self.streams[stream_id] = stream
        if not self.checking:
            self.checking = True
            self.checked = self.sent
            self.deadline = self.loop.time() + self.limits.send_timeout_s
        try:
            sent = self.header_limit is None or not self._too_large(stream_id, fields)
            if sent:
                self.h2.send_response(stream_id, fields, end_stream=body is None)
        except ngh2.NGH2Error:
            sent = False
        if not sent:
            del self.streams[stream_id]
            stream.finished(True)
            self._maybe_idle()
            return None
        stream.headers_sent = True
        if body is None:
            stream.finished(False)
            self.stream_done(stream)
        else:
            stream.end_pending = True
            stream.referenced = True
            stream.hold(memoryview(body))
        return None

    def _data(self, event: ngh2.DataReceived) -> None:
        data = event.data
        stream = self.streams.get(event.stream_id)
        if stream is None:  # a stream already answered or reset: its bytes still count for the connection
            with contextlib.suppress(ngh2.NGH2Error):
                self.h2.acknowledge_received_data(len(data), event.stream_id)
            return
        stream.unacknowledged += len(data)
        if data:
            stream.body(data)
        if not stream.reading_paused:
            self.acknowledge(stream)
        if event.end_stream and self.streams.get(event.stream_id) is stream:
            stream.end_of_body()

    def _trailers(self, stream_id: int) -> None:
        """A request's trailer section (RFC 9113 8.1: HEADERS with END_STREAM after its DATA) ends its body; the
        fields themselves are dropped, as the application drops an HTTP/1.1 request's trailer fields."""
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.end_of_body()

    def acknowledge(self, stream: StreamTransport) -> None:
        """Give the client back the window of body bytes the stream's reader has taken: also once its answer has
        ended (an early 413 or 503 while the client still sends), as `_forget` does, or those bytes would stay
        counted against the connection's window, every later request body on it waiting for a window never
        reopened."""
        count, stream.unacknowledged = stream.unacknowledged, 0
        if count and stream.stream_id in self.streams:
            try:
                self.h2.acknowledge_received_data(count, stream.stream_id)
            except ngh2.NGH2Error:
                pass
            self.schedule_flush()

    def _reset_by_client(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream.cancelled()
            self._forget(stream)
            self._relieve(stream)
        self._count_reset()
        self._maybe_idle()

    def _count_reset(self) -> None:
        """A stream reset by the client, or for its frames (assetcdn/edge/tls/h2_guard.py): past
        ``max_resets_per_10s``, GOAWAY ENHANCE_YOUR_CALM."""
        now = self.loop.time()
        resets = self.resets
        resets.append(now)
        while resets and resets[0] < now - RESET_WINDOW_S:
            resets.popleft()
        if len(resets) > self.limits.max_resets_per_10s and not self.ended:
            log.warning("HTTP/2 client %s reset %d streams in %.0f s: connection ended", self._peer(), len(resets),
                        RESET_WINDOW_S)
            self.goaway(ErrorCode.ENHANCE_YOUR_CALM)

    # --- frames out ----------------------------------------------------------------------------------

    def send_headers(self, stream: StreamTransport, headers: list[tuple[bytes, bytes]], *, end_stream: bool) -> None:
        if self.transport is None or stream.stream_id not in self.streams:
            return
        try:
            if self.header_limit is not None and self._too_large(stream.stream_id, headers):
                stream.drop_pending()
                stream.finished(True)
                self.schedule_flush()
                stream.cancelled()  # its reader learns it is gone, as for the client's own reset
                return
            self.h2.send_response(stream.stream_id, headers, end_stream=end_stream)
        except ngh2.NGH2Error:
            stream.cancelled()
            return
        self.schedule_flush()
        if end_stream:
            self._finished(stream)

    def _too_large(self, stream_id: int, fields: Sequence[Header]) -> bool:
        """Whether an answer's head is past the client's SETTINGS_MAX_HEADER_LIST_SIZE (`header_limit`, set): then
        its stream is reset (INTERNAL_ERROR), where the head sent would be a header block the client cannot take,
        a connection error that would end every other stream with it (HPACK's state is the connection's)."""
        size = header_list_size(fields)
        limit = self.header_limit
        if limit is None or size <= limit:
            return False
        HEADS_TOO_LARGE.log(logging.INFO, "head", "an answer's head of %d bytes is past HTTP/2 client %s's header "
                            "list size (%d): stream reset", size, self._peer(), limit)
        self.h2.reset_stream(stream_id, ErrorCode.INTERNAL_ERROR)
        return True

    def pump(self, stream: StreamTransport) -> None:
        """Send what the stream holds, as far as the windows and the socket allow; pause or resume the
        stream's producer by what is left."""
        if self.transport is None or stream.stream_id not in self.streams:
            return
        pending = stream.pending
        sent = False
        connection = self.h2
        stream_id = stream.stream_id
        try:
            if pending and not self.writing_paused:
                # Only what the windows let out now: the rest stays here, counted against the buffer marks.
                window = min(connection.stream_remote_window_size(stream_id) - connection.queued_body_size(stream_id),
                             connection.remote_window_size - connection.queued_body_size())
                while pending and window > 0:
                    piece = pending[0]
                    if len(piece) > window:
                        pending[0] = piece[window:]
                        piece = piece[:window]
                    else:
                        pending.popleft()
                    size = len(piece)
                    window -= size
                    stream.pending_size -= size
                    if not stream.referenced:
                        self.pending_total -= size
                    last = stream.end_pending and not pending
                    # libnghttp2 is given bytes: a bytes object is referenced as it is, a view copied slowly.
                    whole = piece.obj
                    data = whole if type(whole) is bytes and len(whole) == size else bytes(piece)
                    connection.send_data(stream_id, data, end_stream=last)
                    stream.sent += size  # handed to the library within the windows: what the delivery counts
                    self.sent += size
                    stream.data_sent = self.data_sent = sent = True
                    if last:
                        stream.end_pending = False
                        stream.finished(False)
            if not pending and stream.end_pending:
                stream.end_pending = False
                connection.end_stream(stream_id)
                sent = True
                stream.finished(False)
        except ngh2.NGH2Error:
            stream.cancelled()
            self.streams.pop(stream.stream_id, None)
            self._forget(stream)
            self._relieve(stream)
            return
        if sent:
            self.schedule_flush()
        self._producer(stream)
        self._relieve(stream)
        if stream.ended:
            self._finished(stream)

    def stop_sending_after_end(self, stream: StreamTransport) -> None:
        """The stream's HTTP/1.1 side closed before the client ended its request (an early 413, 503 or 504 while
        the client still sends its body): once its answer has ended, RST_STREAM NO_ERROR asks the client to stop
        sending (RFC 9113 8.1), as the close after such an answer ends an HTTP/1.1 upload. Otherwise the client
        went on sending the whole body for nothing, and the stream stayed open in the library (one of the client's
        concurrent streams) until it had, or for good when it never did."""
        if self.transport is not None:
            self.stop_sending.append(stream)
            self.schedule_flush()

    def _stop_sending(self) -> bool:
        """RST_STREAM NO_ERROR for the streams `stop_sending_after_end` named whose answers have ended, called once
        the library holds no other frame (their last frames are out: reset before, it would go first and drop
        them); one still sending waits, one reset meanwhile is left alone. Whether any was reset."""
        waiting: list[StreamTransport] = []
        reset = False
        for stream in self.stop_sending:
            if stream.aborted:  # reset meanwhile (its answer cut short, the client's own reset): told already
                continue
            if not stream.ended or stream.end_pending:
                waiting.append(stream)
            else:
                reset = True
                with contextlib.suppress(ngh2.NGH2Error):
                    self.h2.reset_stream(stream.stream_id, ErrorCode.NO_ERROR)
        self.stop_sending = waiting
        return reset

    def _relieve(self, done: StreamTransport) -> None:
        """The connection holds little again: the producers it paused for that go on."""
        if self.paused_producers and self.pending_total <= CONNECTION_BUFFER_LOW:
            for other in list(self.streams.values()):
                if other.producer_paused and other is not done:
                    self._producer(other)

    def _producer(self, stream: StreamTransport) -> None:
        """Pause the stream's producer (the hit path's file, or the application) while the stream holds too much,
        or holds bytes while the connection does; resume it once both are low, or once the stream holds none. A
        stream whose bytes all went out is not held up by others whose clients closed their own windows (a
        stalled stream blocking every other stream's answer on the connection until the send timeout)."""
        protocol = stream.protocol
        size = stream.pending_size
        if not stream.producer_paused:
            if size > STREAM_BUFFER_HIGH or size and self.pending_total > CONNECTION_BUFFER_HIGH:
                stream.producer_paused = True
                self.paused_producers += 1
                if protocol is not None:
                    protocol.pause_writing()
        elif size <= STREAM_BUFFER_LOW and (not size or self.pending_total <= CONNECTION_BUFFER_LOW):
            stream.producer_paused = False
            self.paused_producers -= 1
            if protocol is not None:
                protocol.resume_writing()

    def reset(self, stream: StreamTransport, code: ErrorCode) -> None:
        if stream.stream_id in self.streams and self.transport is not None:
            try:
                self.h2.reset_stream(stream.stream_id, code)
            except ngh2.NGH2Error:
                pass
            self.schedule_flush()
        stream.drop_pending()
        stream.finished(not stream.ended)
        self._relieve(stream)
        self._finished(stream)

    def _finished(self, stream: StreamTransport) -> None:
        """The stream's answer is out (or it was reset); it leaves the table once its HTTP/1.1 side closed."""
        if stream.closed:
            self.stream_done(stream)

    def stream_done(self, stream: StreamTransport) -> None:
        if stream.ended and self.streams.get(stream.stream_id) is stream:
            del self.streams[stream.stream_id]
            self._forget(stream)
            self._maybe_idle()

    def _forget(self, stream: StreamTransport) -> None:
        """The stream leaves the table: its producer no longer counts as paused, and the request body bytes it held
        back from flow control while its reader was paused are given back to the connection's window (they were
        received; kept, every later request body on the connection would wait for a window never reopened)."""
        if stream.producer_paused:
            stream.producer_paused = False
            self.paused_producers -= 1
        count, stream.unacknowledged = stream.unacknowledged, 0
        if count and self.transport is not None:
            with contextlib.suppress(ngh2.NGH2Error):
                self.h2.acknowledge_received_data(count, stream.stream_id)
            self.schedule_flush()

    def _maybe_idle(self) -> None:
        if self.streams:
            return
        if self.closing and self.transport is not None:
            self.flush()
            self.transport.close()
        self.checking = False
        self.deadline = self.loop.time() + self.limits.idle_timeout_s

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) else "?"
