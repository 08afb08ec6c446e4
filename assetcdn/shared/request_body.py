"""Request bodies on both processes, bounded in size, in content coding and in time.

Size: a body whose Content-Length exceeds the limit is refused (413) before any of it is read; every
body is also counted as it is decoded, so a chunked body or a gzip bomb stops at the limit too.
Content codings: gzip and deflate are decoded as the body arrives (aiohttp's parser does it, in
bounded steps); any other coding is refused with 415 and an ``Accept-Encoding`` that names the two.
Time: a body must have arrived within ``body_timeout_s`` plus one second for every
``body_min_bytes_per_s`` bytes received, so a slow but steady upload of a large file finishes while a
client that trickles a byte now and then is cut off: 408, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from aiohttp import StreamReader, web
from aiohttp.typedefs import Handler, Middleware

from assetcdn.shared.config import Settings
from assetcdn.shared.errors import ApiError, bad_request, payload_too_large

MB = 1024 * 1024


def batch_body_limit(max_upload_bytes: int) -> int:
    """The largest body of POST /api/storage/batch: base64 inflates a file by 4/3, and one batch may
    carry a full-size file, so at least that plus 1 MB of JSON, and never under 100 MB. The edge
    uses it as the bound of any forwarded body; control applies each endpoint's own limit."""
    return max(max_upload_bytes * 4 // 3 + MB, 100 * MB)
READ_CHUNK = 256 * 1024
# What aiohttp's parser decodes; identity is no coding at all.
DECODED_CODINGS = ("gzip", "deflate")


def size_text(size: int) -> str:
    """Sizes in messages: MB for the usual limits, bytes when a small limit would round to '0 MB'."""
    return f"{size / MB:.1f} MB" if size >= MB else f"{size} bytes"


def too_large(limit: int, size: int | None = None) -> ApiError:
    shown = size_text(size) if size is not None else "The body"
    return payload_too_large(f"Payload too large: {shown} exceeds the {size_text(limit)} limit.", limit)


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


async def body_chunks(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The decoded body in chunks, refused (413) as soon as it passes `limit` bytes."""
    check_body_headers(request, limit)
    content = request.content
    total = 0
    while True:
        try:
            chunk = await content.read(READ_CHUNK)
        except web.RequestPayloadError:  # a body that does not decode, or broken chunked framing
            abandon_body(request)
            raise bad_request("The request body could not be read: its content coding or chunked framing "
                              "is invalid.", code="InvalidBody") from None
        except ConnectionResetError:  # the client left mid-body; nobody will see the answer
            raise bad_request("The connection closed before the request body was complete.",
                              code="IncompleteBody") from None
        if not chunk:
            return
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        yield chunk


async def read_body(request: web.Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in body_chunks(request, limit)])


class _BodyDeadline:
    """Sets BodyTimeout on a body's stream once `timeout_s + received / min_bytes_per_s` has passed."""

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
        due = self._start + self._timeout_s + content.total_raw_bytes / self._min_rate
        if self._loop.time() >= due:
            content.set_exception(BodyTimeout())
        else:
            self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


@contextlib.contextmanager
def body_deadline(request: web.Request, settings: Settings) -> Iterator[None]:
    """Around the code that reads `request`'s body: a body that arrives too late raises a 408."""
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
