"""Request bodies on both processes, bounded in size, in content coding and in time.

Size: a body whose Content-Length exceeds the limit is refused (413) before any of it is read; every
body is also counted as it is decoded, so a chunked body or a gzip bomb stops at the limit too.
Content codings: gzip and deflate are decoded here as the body is read, in steps of at most
INFLATE_STEP bytes with the event loop free between them, and never past the limit: the servers run
with aiohttp's own decoding off (assetcdn/shared/process.py), so what is left of a refused body is drained
(or dropped) as it was sent, never inflated. Any other coding is refused with 415 and an
``Accept-Encoding`` that names the two.
Time: a body must have arrived within ``body_timeout_s`` plus one second for every
``body_min_bytes_per_s`` bytes received, so a slow but steady upload of a large file finishes while a
client that trickles a byte now and then is cut off: 408, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import StreamReader, web
from aiohttp.typedefs import Handler, Middleware

from assetcdn.shared.config import Settings
from assetcdn.shared.errors import ApiError, as_legacy, bad_request, payload_too_large

KB = 1024
MB = 1024 * 1024


def batch_body_limit(max_upload_bytes: int) -> int:
    """The largest body of POST /api/storage/batch: base64 inflates a file by 4/3, and one batch may
    carry a full-size file, so at least that plus 1 MB of JSON, and never under 100 MB."""
    return max(max_upload_bytes * 4 // 3 + MB, 100 * MB)


@dataclass(frozen=True, slots=True)
class RouteBody:
    """How large a route's decoded body may be, and the envelope its 413 is answered in."""

    limit: int
    legacy: bool = False  # the route answers in the legacy envelope ({"error": "<text>"})


# Each route's body limit, named once: control reads its bodies with it and the edge receives the
# bodies it forwards with it, so neither inflates or keeps more of a body than the route accepts.
# Checked in order; a route not named here (most take a small JSON object, many none) gets DEFAULT_BODY.
# None as the limit: the configured upload limit ([control] max_upload_bytes), or the batch's from it.
DEFAULT_BODY = RouteBody(64 * KB)
RULES_CONTENT_MAX = 100_000  # spec: an edge rules file is at most 100,000 characters
_ROUTE_BODIES: tuple[tuple[str, re.Pattern[str], RouteBody | None], ...] = (
    ("PUT", re.compile(r"/api/storage/"), None),
    ("POST", re.compile(r"/api/storage/batch$"), None),
    # JSON escapes may take 6 bytes per character of content.
    ("POST", re.compile(r"/api/core/rules$"), RouteBody(6 * RULES_CONTENT_MAX + 4 * KB)),
    ("POST", re.compile(r"/api/pipeline$"), RouteBody(2 * MB)),  # a 1 MB SVG, base64-encoded, and the flags
    ("POST", re.compile(r"/api/chat$"), RouteBody(64 * KB, legacy=True)),
    ("POST", re.compile(r"/api/analytics$"), RouteBody(64 * KB, legacy=True)),
    ("POST", re.compile(r"/api/purge$"), RouteBody(64 * KB, legacy=True)),
    ("POST", re.compile(r"/api/ai/[a-z-]+$"), RouteBody(16 * KB)),  # a 2048-character url and little else
    ("POST", re.compile(r"/api/webhooks/replay$"), RouteBody(4 * KB)),
    ("POST", re.compile(r"/dashboard/login$"), RouteBody(8 * KB)),
)


def route_body(method: str, path: str, max_upload_bytes: int) -> RouteBody:
    """The body limit of `method path` (a request's path, as received)."""
    for route_method, pattern, body in _ROUTE_BODIES:
        if method == route_method and pattern.match(path):
            if body is not None:
                return body
            if method == "PUT":
                return RouteBody(max_upload_bytes)
            return RouteBody(batch_body_limit(max_upload_bytes))
    return DEFAULT_BODY
READ_CHUNK = 256 * 1024
INFLATE_STEP = 64 * 1024  # decoded bytes per inflation step
# What aiohttp's parser decodes; identity is no coding at all.
DECODED_CODINGS = ("gzip", "deflate")


def size_text(size: int) -> str:
    """Sizes in messages: MB for the usual limits, bytes when a small limit would round to '0 MB'."""
    return f"{size / MB:.1f} MB" if size >= MB else f"{size} bytes"


def too_large(limit: int, size: int | None = None) -> ApiError:
    shown, limit_shown = size_text(size) if size is not None else "The body", size_text(limit)
    if shown == limit_shown:  # just over: "25.0 MB exceeds the 25.0 MB limit" says nothing; the bytes do
        shown, limit_shown = f"{size} bytes", f"{limit} bytes"
    return payload_too_large(f"Payload too large: {shown} exceeds the {limit_shown} limit.", limit)


class BodyTimeout(TimeoutError):
    """Set on a body's stream when its deadline passes, so the handler's next read raises it.

    A TimeoutError on purpose: when a handler answers without reading the whole body, aiohttp drains
    the rest for a while (``lingering_time``); that drain ends quietly on a TimeoutError and then
    closes the connection, where any other exception is logged as unhandled.
    """


class BodyAbandoned(TimeoutError):
    """Set on a body that will not be read any further (it could not be decoded): see BodyTimeout."""


def request_timeout() -> ApiError:
    return ApiError(408, "RequestTimeout", "The request body was not received in time; the connection is "
                    "closed. Send the body without pauses.", headers={"Connection": "close"})


def unsupported_coding(coding: str) -> ApiError:
    return ApiError(415, "UnsupportedContentEncoding",
                    f"Content-Encoding '{coding}' is not supported; send the body uncompressed, or gzip or "
                    "deflate encoded.", target="Content-Encoding",
                    headers={"Accept-Encoding": ", ".join(DECODED_CODINGS)})


def check_body_headers(request: web.Request, limit: int) -> None:
    """What can be refused before any of the body is read: an unknown coding (415), a size over the limit (413)."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding and coding != "identity" and coding not in DECODED_CODINGS:
        raise unsupported_coding(coding)
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit, request.content_length)


def abandon_body(request: web.Request) -> None:
    """Stop aiohttp from draining a body nobody will read: the connection closes after the answer."""
    if not request.content.is_eof():
        request.content.set_exception(BodyAbandoned())


def invalid_body(request: web.Request) -> ApiError:
    abandon_body(request)
    return bad_request("The request body could not be read: its content coding or chunked framing "
                       "is invalid.", code="InvalidBody")


class _Inflater:
    """gzip (one member or several, RFC 1952) or deflate (zlib-wrapped, or raw as some clients send
    it), decoded in bounded steps."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._decoder: Any = None  # chosen from the first byte for deflate

    def _start(self, data: bytes) -> Any:
        if self._coding == "gzip":
            return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        return zlib.decompressobj(wbits=zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS)

    def steps(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, at most INFLATE_STEP at a time; zlib.error when it does not decode."""
        while data:
            if self._decoder is None:
                self._decoder = self._start(data)
            decoder = self._decoder
            if decoder.eof:  # what follows a gzip member is another member; deflate has one stream
                if self._coding != "gzip":
                    raise zlib.error("data after the end of the compressed stream")
                self._decoder = decoder = self._start(data)
            out = decoder.decompress(data, INFLATE_STEP)
            data = decoder.unconsumed_tail or decoder.unused_data
            if out:
                yield out

    def check_complete(self) -> None:
        if self._decoder is not None and not self._decoder.eof:
            raise zlib.error("the compressed stream is truncated")


async def read_hashed(request: web.Request, limit: int) -> tuple[bytes, str]:
    """The body (at most `limit` bytes, else 413: `body_chunks`) and its SHA-256, hashed as it arrives: what a
    signature over a declared body hash is checked against once the head's signature holds (the cluster routes)."""
    digest = hashlib.sha256()
    chunks = []
    async for chunk in body_chunks(request, limit):
        digest.update(chunk)
        chunks.append(chunk)
    return b"".join(chunks), digest.hexdigest()


async def body_chunks(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The decoded body in chunks, refused (413) as soon as it passes `limit` bytes: nothing past the
    limit is decoded."""
    check_body_headers(request, limit)
    content = request.content
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    # aiohttp decodes itself where it was not switched off (a test server): then its stream says so.
    inflater = _Inflater(coding) if coding in DECODED_CODINGS and content.total_compressed_bytes is None else None
    total = 0
    while True:
        try:
            chunk = await content.read(READ_CHUNK)
        except web.RequestPayloadError:  # a body that does not decode, or broken chunked framing
            raise invalid_body(request) from None
        except ConnectionResetError:  # the client left mid-body; nobody will see the answer
            raise bad_request("The connection closed before the request body was complete.",
                              code="IncompleteBody") from None
        if not chunk:
            if inflater is not None:
                try:
                    inflater.check_complete()
                except zlib.error:
                    raise invalid_body(request) from None
            return
        pieces: Iterator[bytes] = iter((chunk,)) if inflater is None else inflater.steps(chunk)
        while True:
            try:
                piece = next(pieces, None)
            except zlib.error:
                raise invalid_body(request) from None
            if piece is None:
                break
            total += len(piece)
            if total > limit:
                raise too_large(limit)
            yield piece
            if inflater is not None:
                await asyncio.sleep(0)  # between inflation steps, other requests run


async def read_body(request: web.Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in body_chunks(request, limit)])


@contextlib.contextmanager
def in_route_envelope(body: RouteBody) -> Iterator[None]:
    """Around a read of `body`'s route: its refusals (413, 415, 400) in the route's own envelope."""
    try:
        yield
    except ApiError as exc:
        if not body.legacy:
            raise
        raise as_legacy(exc) from None


class _BodyDeadline:
    """Sets BodyTimeout on a body's stream once `timeout_s + received / min_bytes_per_s` has passed (`timeout_s` alone
    when `min_bytes_per_s` is 0 or less: no time is allowed per byte)."""

    def __init__(self, content: StreamReader, timeout_s: float, min_bytes_per_s: float) -> None:
        self._content = content
        self._timeout_s = timeout_s
        self._min_rate = min_bytes_per_s
        self._loop = asyncio.get_running_loop()
        self._start = self._loop.time()
        self._handle = self._loop.call_at(self._start + timeout_s, self._check)

    def _check(self) -> None:
        content = self._content
        if content.is_eof() or content.exception() is not None:
            return
        # total_raw_bytes: as received on the wire (before gzip is decoded).
        due = self._start + self._timeout_s
        if self._min_rate > 0:  # 0 divided by (ZeroDivisionError in this timer: no deadline at all)
            due += content.total_raw_bytes / self._min_rate
        if self._loop.time() >= due:
            content.set_exception(BodyTimeout())
        else:
            self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


def unsupported_transfer_coding(request: web.BaseRequest) -> ApiError | None:
    """501 for a body sent under another transfer coding than chunked (`gzip, chunked`: RFC 9112 6.1); None for any
    other request. The server takes the chunks off and leaves the other coding on the bytes, which would then be
    read, stored or forwarded as the content itself (the field that named the coding is hop-by-hop)."""
    if "Transfer-Encoding" not in request.headers:
        return None
    codings = [coding.strip().lower() for value in request.headers.getall("Transfer-Encoding")
               for coding in value.split(",") if coding.strip()]
    if all(coding == "chunked" for coding in codings):
        return None
    return ApiError(501, "UnsupportedTransferCoding", f"The request's transfer coding {', '.join(codings)!r} is not "
                    "one this server takes: send the body chunked or with a Content-Length (a compressed body with "
                    "Content-Encoding).")


@contextlib.contextmanager
def body_deadline(request: web.Request, settings: Settings) -> Iterator[None]:
    """Around the code that reads `request`'s body: a body that arrives too late raises a 408; one under another
    transfer coding than chunked is refused at once (`unsupported_transfer_coding`)."""
    if (refused := unsupported_transfer_coding(request)) is not None:
        raise refused
    if not request.body_exists:
        yield
        return
    deadline = _BodyDeadline(request.content, float(settings.get("server", "body_timeout_s")),
                             float(settings.get("server", "body_min_bytes_per_s")))
    try:
        yield
    except BodyTimeout:
        raise request_timeout() from None
    finally:
        deadline.cancel()


def body_deadline_middleware(settings: Settings) -> Middleware:
    """For an app whose handlers read bodies; install it inside the envelope middleware."""

    @web.middleware
    async def with_body_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        with body_deadline(request, settings):
            return await handler(request)

    return with_body_deadline
