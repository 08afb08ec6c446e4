"""How both processes serve HTTP: a deadline and limits for request heads, and the product's name in `Server`.

Body deadlines and limits are per request (assetcdn/shared/request_body.py); this is what the server itself
is started with.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import http_writer, web, web_protocol, web_request, web_response
from aiohttp.http_exceptions import LineTooLong

from assetcdn.shared import process
from assetcdn.shared.config import Settings
from assetcdn.shared.content_security import NOSNIFF, NOSNIFF_HEADER
from assetcdn.shared.errors import ApiError, as_legacy
from assetcdn.shared.middleware import error_response, new_request_id, uses_legacy_envelope

SERVER_NAME = "assetcdn"


def name_the_server() -> None:
    """Every response says `Server: assetcdn`, without versions.

    aiohttp sets `Server: Python/3.x aiohttp/x.y` on each response it prepares unless the response
    already has one, including those it answers before any application code runs (a malformed
    request line, oversize headers); its default comes from this module attribute.
    """
    web_response.SERVER_SOFTWARE = SERVER_NAME


# What aiohttp's parser reads of a request line and of a header field (its name and value), set on every application
# of both processes (`HANDLER_ARGS`, aiohttp's `handler_args`): aiohttp's default of 8190 for the request line, one
# byte less for a field. Its parsers (C and Python) raise the same LineTooLong for either, naming the limit passed (its
# second argument): the two limits differing, that tells a URL too long (414) from a field (431).
MAX_REQUEST_LINE = 8190
MAX_FIELD = 8189
HANDLER_ARGS: dict[str, Any] = {"max_line_size": MAX_REQUEST_LINE, "max_field_size": MAX_FIELD}
# (status, code, message) of a request line or a header field past its limit, by the limit. (Named here: `HTTPStatus`
# calls 414 "Request-URI Too Long" before Python 3.13.)
_TOO_LONG = {
    MAX_REQUEST_LINE: (414, "URITooLong", f"414 URI Too Long: the request's URL is longer than the {MAX_REQUEST_LINE} "
                                          "bytes the server reads."),
    MAX_FIELD: (431, "RequestHeaderFieldsTooLarge", f"431 Request Header Fields Too Large: a header field is longer "
                                                    f"than the {MAX_FIELD} bytes the server reads (its name and value "
                                                    "together)."),
}

_AIOHTTP_ERROR_PAGE = web_protocol.RequestHandler.handle_error


def _too_long(exc: BaseException | None) -> tuple[int, str, str] | None:
    """(414 or 431, its code and message) for aiohttp's refusal of a request line or a header field past its limit."""
    return _TOO_LONG.get(exc.args[1]) if isinstance(exc, LineTooLong) and len(exc.args) > 1 else None


def _unread_path(request: web_request.BaseRequest, exc: BaseException | None, status: int) -> str:
    """The path the client asked for, as far as it was read. A request line over the limit never became a
    request (aiohttp then passes a placeholder for `/`), but its error quotes the target's first 100 bytes."""
    if status == 414 and isinstance(exc, LineTooLong) and isinstance(exc.args[0], (bytes, bytearray)) \
            and exc.args[0].startswith(b"/"):
        return bytes(exc.args[0]).decode("latin-1").partition("?")[0]
    return request.path


def _json_error_page(self: web_protocol.RequestHandler, request: web_request.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
    """aiohttp's own answer to a request it could not read (bad request line, oversize head, a crash
    before any handler), in the standard envelope with nosniff: its default is text, or HTML when the
    client asks for it, and may quote the request back. A 4xx is the client's fault and is logged at
    DEBUG: aiohttp's ERROR with a traceback per request let any stranger flood the logs. aiohttp answers every
    unreadable head 400; a request line past its limit is 414 URI Too Long (RFC 9110 15.5.15) here, a header field
    past its limit 431 Request Header Fields Too Large (RFC 6585 5)."""
    too_long = _too_long(exc) if status == 400 else None
    if too_long is not None:
        status = too_long[0]
    if status >= 500:
        _AIOHTTP_ERROR_PAGE(self, request, status, exc, message)  # its logging and its already-sent check
    else:
        self.logger.debug("Unreadable request from %s: %s", request.remote, exc)
        if request.writer.output_size > 0:  # as aiohttp: part of an answer is out, the connection is broken
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
    if request._message is web_protocol.ERROR:  # a request not read: no middleware of the application saw it
        _count_unreadable(self, request.method, status)
    if too_long is not None:
        error = ApiError(*too_long)
    else:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        error = ApiError(status, phrase.replace(" ", "").replace("-", ""),
                         f"{status} {phrase}: the request could not be read (its request line, headers or body "
                         "encoding).")
    # The routes that answer in the legacy envelope do so for these errors too (an over-long signed URL).
    response = error_response(as_legacy(error) if uses_legacy_envelope(_unread_path(request, exc, status)) else error,
                              new_request_id())
    response.headers[NOSNIFF_HEADER] = NOSNIFF
    response.force_close()
    return response


UNREADABLE_ROUTE = "unreadable"


def _count_unreadable(handler: web_protocol.RequestHandler, method: str, status: int) -> None:
    """A request aiohttp could not read is answered without the application's metrics middleware: counted here on
    /metrics as route `unreadable` (its method is aiohttp's `UNKNOWN`), so that a client's malformed requests show
    among the answers by status."""
    # Imported here, loaded by then: an edge sets PROMETHEUS_MULTIPROC_DIR before prometheus_client is imported.
    from assetcdn.shared.metrics import METRICS

    app = getattr(handler._request_handler, "__self__", None)  # the application's `_handle`, bound
    metrics = app.get(METRICS) if isinstance(app, web.Application) else None
    if metrics is not None:
        metrics.add_requests(UNREADABLE_ROUTE, method, str(status), 1)


def cut_short(request: web.BaseRequest) -> None:
    """End a response whose body has begun and cannot be completed: the connection is closed and never
    reused, so the client sees a broken answer. Closing `request.transport` is not that on the edge: a
    request the hit path handed to aiohttp (assetcdn/edge/fastpath/protocol.py) writes to a transport whose
    close hands the connection back for its next request, whose answer would then read as the rest of
    this body."""
    request.protocol.force_close()


def answer_unreadable_requests_in_json() -> None:
    """Every error both processes send is JSON (docs/security.md), aiohttp's own included."""
    web_protocol.RequestHandler.handle_error = _json_error_page  # type: ignore[method-assign]


class _LastRequests(deque[Any]):
    """A half-closed client's requests still to answer (aiohttp's `_messages`): once its loop takes the last one, the
    connection closes after that answer."""

    def __init__(self, requests: deque[Any], handler: web_protocol.RequestHandler) -> None:
        super().__init__(requests)
        self.handler: web_protocol.RequestHandler | None = handler

    def popleft(self) -> Any:
        request = super().popleft()
        if not self and self.handler is not None:
            self.handler._close = True
            self.handler = None
        return request


def _answer_then_close(self: web_protocol.RequestHandler) -> bool | None:
    """A client that shut its side of the connection (SHUT_WR, a half-close) after sending its requests: aiohttp closed
    the connection at that EOF, cancelling the request's handler, so the client never had its answer (and a request
    already sent on, a pull zone's POST to its origin, ran without its client hearing how). The connection now stays
    open for the answers to what the client sent, and closes after the last one. Idle, or with a request whose body was
    cut short by that EOF (it can never be complete), it closes at once as before."""
    if self._force_close or self._close:
        return None
    messages = self._messages
    # Its loop (`start`) waits for the next request on `_waiter`, and holds none while it answers one (taken from
    # `_messages`, its handler maybe not begun yet).
    unanswered = len(messages) + (self._waiter is None)
    if not unanswered:
        return None  # nothing sent that is unanswered
    current = self._current_request
    if (current is not None and not current.content.is_eof()) or (messages and not messages[-1][1].is_eof()):
        return None  # a body cut short: the request cannot be answered
    if unanswered == 1:
        self._close = True  # the loop ends after this last request, closing the connection
    elif len(messages) < self._max_msg_queue_size:  # (a full queue: more may wait in the parser, closed when idle)
        self._messages = _LastRequests(messages, self)
    return True


def answer_half_closed_clients() -> None:
    """aiohttp's connections answer what a client sent before it half-closed (`_answer_then_close`)."""
    web_protocol.RequestHandler.eof_received = _answer_then_close  # type: ignore[method-assign,assignment]


# What a request's connection tells once it is lost (`watch_lost`).
CLIENT_LOST = web.RequestKey[Callable[[], None]]("client_lost")
_AIOHTTP_CONNECTION_LOST = web_protocol.RequestHandler.connection_lost


def _tell_lost(self: web_protocol.RequestHandler, exc: BaseException | None) -> None:
    """aiohttp's connection_lost, then the request under way is told (`watch_lost`) that its client is gone."""
    request = self._current_request
    _AIOHTTP_CONNECTION_LOST(self, exc)
    if request is not None:
        told = request.pop(CLIENT_LOST, None)
        if told is not None:
            told()


def watch_lost(request: web.BaseRequest, told: Callable[[], None] | None) -> None:
    """Have `told` called once `request`'s connection is lost, at once when it is already (None: no longer): a pull
    zone fill's client lagging behind it gives its places back then (assetcdn/edge/states/feed.py `ClientFeed`).
    Nothing tells aiohttp's handler of it otherwise: a handler that is not writing learns it only at its next write.
    Needs `tell_lost_connections`."""
    if told is None:
        request.pop(CLIENT_LOST, None)
    elif request.transport is None:
        told()
    else:
        request[CLIENT_LOST] = told


def tell_lost_connections() -> None:
    """aiohttp's connections tell the request under way that its connection is lost (`watch_lost`)."""
    web_protocol.RequestHandler.connection_lost = _tell_lost  # type: ignore[method-assign]


def write_bodies_uncopied() -> None:
    """aiohttp writes an answer's head and body as two pieces (`writelines`), not joined into one new object: on the
    Pythons before 3.12.9 it joins them (its `SKIP_WRITELINES`), which copies every body it writes in one piece. There
    the join guards asyncio's own socket transport, whose `writelines` of 3.12.0 to 3.12.8 (and 3.13.0 to 3.13.1) was
    unsafe (CVE-2024-12254) and before 3.12 joined them itself; the servers run on uvloop, whose transports (and the
    edge's own in front of them) take the pieces as they are. Left as aiohttp has it on the unsafe Pythons, and on
    any later one, which writes them as two pieces already. Over TLS the edge keeps what a client has not read of an
    answer as a reference to what was written (assetcdn/edge/fastpath/sendfile.py `PacedWrites`): joined, that
    was a copy of the body per connection (12 MB for a 12 MB memory-tier body), held for as long as the client
    reads none of it."""
    if sys.version_info < (3, 12):
        http_writer.SKIP_WRITELINES = False  # a module constant, read at each write


def header_timeout_s(settings: Settings) -> float:
    return float(settings.get("server", "header_timeout_s"))


def server_options(settings: Settings) -> dict[str, Any]:
    # aiohttp closes a connection that has not delivered a complete request head within
    # keepalive_timeout of connecting, or of its previous response (web_protocol's keep-alive
    # check), so this one setting is both the header deadline and the idle keep-alive limit.
    return {"keepalive_timeout": header_timeout_s(settings),
            "shutdown_timeout": float(settings.get("server", "shutdown_grace_s"))}


def client_keepalive_s(settings: Settings) -> float:
    """How long a client of the other process keeps an idle connection: well inside the server's
    limit, so a request is never sent on a connection the server is closing at that moment."""
    return min(15.0, header_timeout_s(settings) / 2)


def as_served() -> None:
    """aiohttp as this project's processes run it (each changes it for the whole process): `Server: assetcdn`, its
    own error pages in JSON, a half-closed client answered, a lost connection told, an answer's head and body
    written apart. The test suite runs so too (tests/conftest.py), whatever module came first."""
    name_the_server()
    answer_unreadable_requests_in_json()
    answer_half_closed_clients()
    tell_lost_connections()
    write_bodies_uncopied()


def serve(app: web.Application, settings: Settings, *, host: str, port: int, **options: Any) -> int:
    """Run `app` until SIGTERM/SIGINT (assetcdn/shared/process.py: bounded, signal-safe stop); its exit status."""
    as_served()
    return process.serve(app, host=host, port=port, **server_options(settings), **options)
