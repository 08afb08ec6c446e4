"""aiohttp middlewares both processes install: request ids, version headers, error envelopes, and the
headers that keep stored files from running as the service (assetcdn/shared/content_security.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import MutableMapping

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.shared import API_VERSION
from assetcdn.shared.content_security import protect
from assetcdn.shared.errors import ApiError, LegacyError, as_legacy
from assetcdn.shared.request_body import BodyAbandoned, BodyTimeout

log = logging.getLogger(__name__)

REQUEST_ID = web.RequestKey("request_id", str)
# The answer whose head was made (`_stamp_headers`): the status its client gets, however its body ends.
PREPARED = web.RequestKey("prepared_response", web.StreamResponse)
# How long a connection cut off for a body that came too slowly is still read after its 408 (`LingeringAnswer`).
LINGER_S = 2.0
# The transport extra (`get_extra_info`) naming the HTTP/2 stream a request came on (its id): an answer's close ends
# that stream only, and the connection is not the request's to linger on (`LingeringAnswer`).
HTTP2_STREAM = "http2_stream"

# Paths whose errors use the legacy envelope (docs/api-guide.md "Auth and errors"); the other routes use the
# standard envelope.
LEGACY_PREFIXES = ("/api/auto", "/api/transform", "/api/purge", "/api/stream", "/api/analytics", "/api/signed",
                   "/api/search", "/api/chat")


def uses_legacy_envelope(path: str) -> bool:
    return path.startswith(LEGACY_PREFIXES)


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                        headers=headers)


# '<', '>' and '&' only occur inside JSON strings, where these escapes mean the same characters: an error
# that quotes a path or a value back never holds markup, whatever a browser takes the body for.
_MARKUP_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"))


def text_as_sent(value: str) -> str:
    """`value`, a request's text, with its surrogate escapes (the bytes that are not UTF-8, as the servers read them,
    which neither JSON nor SQLite can hold) written as the bytes they stand for, `\\xff`."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def as_sent(value: object) -> object:
    """`value` with every string in it, dict keys included, as `text_as_sent` writes it."""
    if isinstance(value, str):
        return text_as_sent(value)
    if isinstance(value, dict):
        return {as_sent(key): as_sent(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_sent(item) for item in value]
    return value


def error_response(error: ApiError | LegacyError, request_id: str) -> web.Response:
    headers = {"X-Request-ID": request_id, "X-API-Version": API_VERSION, **error.headers}
    try:
        body = orjson.dumps(error.body(request_id))
    except TypeError:  # a message quoting what a client sent in bytes that are not UTF-8
        body = orjson.dumps(as_sent(error.body(request_id)))
    for markup, escape in _MARKUP_ESCAPES:
        body = body.replace(markup, escape)
    return web.Response(body=body, status=error.status, content_type="application/json", headers=headers)


KEPT_FIELD_PREFIX = "access-control-"


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> ApiError | LegacyError:
    status = exc.status
    # A 405 names the methods the resource takes (RFC 9110 15.5.6): aiohttp's exception carries them in Allow. The
    # CORS fields a route readable from another origin gave it (assetcdn/shared/cors.py) stay too: a page reads why.
    headers = {name: value for name, value in exc.headers.items() if name.lower().startswith(KEPT_FIELD_PREFIX)}
    if status == 405 and "Allow" in exc.headers:
        headers["Allow"] = exc.headers["Allow"]
    if status == 404:
        message = f"No endpoint matches {request.method} {request.path}. See the interface specification for the available paths."
        code = "NotFound"
    elif status == 405:
        message = f"Method {request.method} is not allowed on {request.path}."
        code = "MethodNotAllowed"
    elif status == 413:
        message = "Request body too large."
        code = "PayloadTooLarge"
    else:
        message = exc.reason or "Request failed."
        code = exc.reason.replace(" ", "") if exc.reason else "Error"
    if uses_legacy_envelope(request.path):
        return LegacyError(status, message, headers=headers)
    return ApiError(status, code, message, headers=headers)


def new_request_id() -> str:
    """An id for an answer given outside any application (aiohttp's own error pages)."""
    # Request ids are correlation handles, not secrets: no system call per request for os.urandom.
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


_LOW_DIGITS = tuple(b"%03x" % low for low in range(4096))  # a request id's last 3 digits (RequestIds.new)


class RequestIds:
    """X-Request-ID values, one source per application (``REQUEST_IDS``), which the edge's hit path
    (assetcdn/edge/fastpath/) uses too: a caller's own id when it is a uuid (canonical form: the
    envelope's requestId is a uuid string), else a fresh uuid-shaped id made from a random
    per-process prefix and a counter (unique, no system call, no uuid4 per request). The counter's
    last 12 hexadecimal digits are written as the prefix and the top 9 digits (made once per 4096 ids)
    joined to the last 3 from a table: no number formatting per id."""

    __slots__ = ("_prefix", "_counter", "_high")

    def __init__(self) -> None:
        bits = random.getrandbits(80)
        # version 4 and the RFC 4122 variant, so the ids read as uuid4.
        self._prefix = (f"{bits >> 48:08x}-{(bits >> 32) & 0xFFFF:04x}-4{(bits >> 20) & 0xFFF:03x}-"
                        f"{0x8000 | ((bits >> 6) & 0x3FFF):04x}-").encode()
        self._counter = counter = random.getrandbits(40)
        self._high = self._high_digits(counter)

    def _high_digits(self, counter: int) -> bytes:
        return self._prefix + b"%09x" % ((counter >> 12) & 0xFFFFFFFFF)

    def new(self) -> bytes:
        counter = self._counter = self._counter + 1
        low = counter & 0xFFF
        if not low:
            self._high = self._high_digits(counter)
        return self._high + _LOW_DIGITS[low]

    def of(self, sent: bytes | None) -> bytes:
        """The id of a request whose X-Request-ID header is ``sent`` (None: it has none)."""
        if not sent:
            return self.new()
        try:
            return str(uuid.UUID(sent.decode("latin-1"))).encode()
        except ValueError:
            return self.new()


REQUEST_IDS = web.AppKey("request_ids", RequestIds)


def stamp_headers(headers: MutableMapping[str, str]) -> None:
    """What every answer carries besides its request id: the API version, nosniff, and the sandbox CSP
    on any active type without a policy of its own (assetcdn/shared/content_security.py). Idempotent."""
    headers.setdefault("X-API-Version", API_VERSION)
    protect(headers)


@web.middleware
async def envelope_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, stamp version headers, and render errors in the right envelope."""
    # A caller's own id is kept when it is a uuid, in canonical form (the envelope's requestId is a uuid string).
    sent = request.headers.get("X-Request-ID")
    request_id = request.app[REQUEST_IDS].of(sent.encode("utf-8", "surrogateescape") if sent else None).decode("ascii")
    request[REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except Exception as exc:
        if answer_begun(request):
            prepared: web.StreamResponse | None = request.get(PREPARED)
            if isinstance(exc, ConnectionError) and prepared is not None and client_gone(request):
                # The client went mid-answer (a download cancelled, a player seeking): nothing failed here. The answer
                # ends as far as it went; aiohttp finds the connection gone as it ends it, and the metrics count the
                # status the client got. A traceback per cancelled download would let any client flood the log.
                log.debug("client of %s %s went before its answer was whole (request %s)", request.method,
                          request.rel_url.raw_path, request_id)
                return prepared
            # Part of an answer went out (a streamed body failing midway): another answer written after it would be
            # read as the rest of its body, or as the next request's answer. aiohttp closes the connection instead.
            log.exception("error on %s %s after its answer began (request %s); the connection is closed",
                          request.method, request.rel_url.raw_path, request_id)
            raise
        answer = error_answer(request, request_id, exc)
        if answer.status == 408 and isinstance(answer, web.Response) and body_timed_out(request):
            return LingeringAnswer(request, answer)
        return answer
    return response


def body_timed_out(request: web.Request) -> bool:
    """Whether `request`'s body stopped being read because it came too slowly (assetcdn/shared/request_body.py)."""
    return request.body_exists and isinstance(request.content.exception(), BodyTimeout)


class LingeringAnswer(web.Response):
    """The 408 of a body that came too slowly (`answer`), written as the handler's answer is, then this side of the
    connection ended (FIN) and whatever the client still sends read and dropped for LINGER_S before the connection
    closes, as nginx's lingering close does. Closed at once, the connection would often hold bytes of the body the
    client went on sending, unread: the kernel then resets it (RST) rather than end it, and a client still sending
    loses the answer it had not read yet (aiohttp's own lingering read ends at once on the body's timeout). Only for
    such a 408: a connection that stays open a little longer per client that was cut off anyway.

    The linger runs in `write_eof`, which aiohttp calls once the middlewares returned the answer: the request's
    latency (assetcdn/shared/metrics.py) and control's request log entry are the answer's, as any answer's, not the
    answer's plus the linger's; the connection is still held by its request until the linger ends (as the sleep of
    a handler, which a stopping server waits for). Over TLS, which has no half-close (its transports cannot write
    EOF: the close_notify comes with the close), the connection is read and dropped all the same, without the FIN
    first. Not an HTTP/2 stream (the edge's, assetcdn/edge/tls/h2.py: `HTTP2_STREAM`), whose close ends that
    stream only, never the connection."""

    def __init__(self, request: web.Request, answer: web.Response) -> None:
        super().__init__(body=answer.body, status=answer.status, headers=answer.headers)
        self._lingering_request = request

    async def write_eof(self, data: bytes = b"") -> None:
        await super().write_eof(data)
        request = self._lingering_request
        transport = request.transport
        if transport is None or transport.is_closing() or transport.get_extra_info(HTTP2_STREAM) is not None:
            return
        if transport.can_write_eof():
            transport.write_eof()
        # aiohttp's handler of the connection takes nothing more from it: what arrives is dropped as it comes (no
        # parsing, no buffer), however much, and reading goes on where the body's buffer (128 KB) had paused it.
        # Read only to that buffer, the rest would wait in the kernel, and the close would reset the connection.
        request.protocol.close()
        transport.resume_reading()
        await asyncio.sleep(LINGER_S)


def client_gone(request: web.Request) -> bool:
    """Whether the connection `request` came on is lost or being closed (its client went, or was cut off)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def answer_begun(request: web.Request) -> bool:
    """Whether bytes of an answer to `request` went out already (a streamed response's head, part of its body)."""
    return getattr(request.writer, "output_size", 0) > 0


def error_answer(request: web.Request, request_id: str, exc: Exception) -> web.StreamResponse:
    """The answer to `exc`, which the handler of `request` raised (called while it is handled), in the right
    envelope; a redirect is raised again."""
    if isinstance(exc, ApiError):
        # A shared piece (body limits, path checks) may raise the standard error on a legacy path.
        return error_response(as_legacy(exc) if uses_legacy_envelope(request.path) else exc, request_id)
    if isinstance(exc, LegacyError):
        return error_response(exc, request_id)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            exc.headers["X-Request-ID"] = request_id
            exc.headers["X-API-Version"] = API_VERSION
            raise exc
        return error_response(_from_http_exception(request, exc), request_id)
    # The path as sent (percent-encoded): decoded, a %0d%0a in it would start a line of the caller's own.
    log.exception("unhandled error on %s %s (request %s)", request.method, request.rel_url.raw_path, request_id)
    error: ApiError | LegacyError
    text = "Internal server error. Retry later; report the request id if it persists."
    error = LegacyError(500, text) if uses_legacy_envelope(request.path) else ApiError(500, "InternalError", text)
    return error_response(error, request_id)


async def _stamp_headers(request: web.Request, response: web.StreamResponse) -> None:
    request[PREPARED] = response
    # on_response_prepare also covers streamed responses (SSE, large bodies).
    response.headers.setdefault("X-Request-ID", request.get(REQUEST_ID) or request.app[REQUEST_IDS].new().decode())
    # On everything: errors, redirects, proxied and streamed responses included.
    stamp_headers(response.headers)
    if "Transfer-Encoding" in request.headers:
        # A chunked body (the request parser refuses any other transfer coding). aiohttp's C parser keeps the last
        # field of its trailer section pending and adds it to the next request it reads on the connection (behind a
        # balancer pooling its connections, another client's request): that next request is never read from here.
        response.force_close()
        response.headers["Connection"] = "close"  # the head was made before this hook: the client is told too
    elif request.body_exists and isinstance(request.content.exception(), BodyAbandoned):
        # A body left unread (`abandon_body`: an invalid coding or framing, an unauthenticated upload) is never
        # drained: the connection closes after this answer, and the client is told so rather than find it closed
        # under its next request.
        response.force_close()
        response.headers["Connection"] = "close"
    close_after_unframed_body(request, response)


def close_after_unframed_body(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """An HTTP/1.0 client's answer of no declared length (a streamed or relayed body: HTTP/1.0 has no chunks) ends
    at the connection's close, so the connection closes after it. aiohttp sends such an answer without `Connection:
    keep-alive` but keeps the connection open all the same when the client asked to keep it, and the client, which
    reads the body to the close, then waits for the idle timeout before it has the whole answer."""
    if request.version >= (1, 1) or not response.keep_alive or request.method == "HEAD":
        return
    status = response.status
    if status < 200 or status in (204, 304):  # no body at all
        return
    headers = response.headers
    if "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        response.force_close()


async def no_such_method(request: web.Request) -> web.StreamResponse:
    """The handler of a catch-all route: 405 naming the methods the other routes take `request`'s path with (RFC 9110
    15.5.6), or 404 when none takes it. Without it the catch-all would answer 404 for a path that exists, as aiohttp's
    router cannot say 405 once a route matched. Only a request no other route took pays for the look."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            match, methods = await resource.resolve(request)
            if match is None:
                allowed |= methods
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, sorted(allowed))
    raise web.HTTPNotFound()


def install_envelopes(app: web.Application) -> None:
    app[REQUEST_IDS] = RequestIds()
    app.middlewares.append(envelope_middleware)
    app.on_response_prepare.append(_stamp_headers)
