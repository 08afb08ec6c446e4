"""One worker's hit server: the state its public connections share, and the site that listens.

``HitSite`` takes the place of aiohttp's ``TCPSite`` for the public port: same address, options
and shutdown, but each connection is a ``HitProtocol`` (assetcdn/edge/fastpath/protocol.py), which answers
hits itself and hands everything else to the aiohttp application's request handlers.

``HitServer.answer`` is the hit itself. Per batch of pipelined requests (``begin_batch``) it picks
up the node's state once: the configuration (a new one drops the prepared hits it may answer otherwise), purges other
workers made (replayed on this worker's memory tier), the replica's entries and the cache status
`EdgeNode.hit_status` gives (not HIT: STALE, or not served from cache, which the application answers).
Per request: the Host's view, the path's prepared hit, its body from the memory tier or its file, and
the answer. Counting is what the application counts for the same answer: one request in the metrics
(under the delivery route's own label, batched: assetcdn/shared/metrics.py), one cache HIT, and, once
the connection knows what of the body reached the kernel (assetcdn/edge/fastpath/protocol.py; at once
for an answer the socket takes whole), bytes served and the delivery counted for analytics
(assetcdn/edge/delivery_log.py: a dictionary update, a sample offer, the access log when on).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from aiohttp import web
from ngh2 import NeverIndexedHeader

from assetcdn.edge.app_keys import NODE, SETTINGS
from assetcdn.edge.delivery_log import Pending, body_sent, country_code
from assetcdn.edge.fastpath.prepared import (
    HIT,
    ID_FIELD,
    HostView,
    Prepared,
    PulledHit,
    fields_cost,
    prepare,
    prepare_pull,
)
from assetcdn.edge.fastpath.protocol import (
    ANSWERED,
    APPLICATION_FIELDS,
    BUSY,
    CACHE_FIELDS,
    COUNTRY,
    FILL,
    HAND_OVER,
    WANTED,
    Decide,
    HitProtocol,
)
from assetcdn.edge.fastpath.proxy_protocol import ProxyHeaderReader, ProxyPolicy, proxy_policy
from assetcdn.edge.fastpath.pull_fill import PullFills
from assetcdn.edge.fastpath.sendfile import keep_alive_probes
from assetcdn.edge.routes.delivery import delivery_route_name
from assetcdn.edge.site_config import EdgeConfig, canonical_host, is_valid_host
from assetcdn.edge.states.deliver import content_range, parse_range
from assetcdn.edge.states.recv import PullPath
from assetcdn.edge.tls.h2 import Fields, response_fields
from assetcdn.edge.tls.policy import HSTS_HEADER, hsts_value, redirects_plain_http
from assetcdn.shared.conditionals import etag_matches
from assetcdn.shared.http_server import header_timeout_s
from assetcdn.shared.metrics import LATENCY_BUCKETS, METRICS
from assetcdn.shared.middleware import REQUEST_IDS

log = logging.getLogger(__name__)

# Distinct Host values kept (a tenant host or custom domain each, for an installation of thousands of zones); past
# it (a scan) the Host first seen goes with its heads, not every Host's (about 430 bytes a Host besides its heads).
MAX_HOSTS = 4096
# How a request field's value is read as text, as the application's parser (aiohttp) reads it, with surrogateescape:
# an If-None-Match naming an ETag beyond ASCII (an origin's UTF-8 one, passed on as it came) compares equal on both.
FIELD_CODING = "utf-8"
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Bytes looked for in a request target, as ints: `int in bytes` is a byte search, while a one-byte bytes value
# is first tried as an int, a failure that builds (and drops) a TypeError on every request.
PERCENT, HASH = ord("%"), ord("#")


class Request(Protocol):
    """What the hit decisions read of a request besides its method, Host and path: the values of the header
    fields in WANTED's slots (the HTTP/1.1 connection, or an HTTP/2 stream's, assetcdn/edge/tls/h2.py) and
    the client's address."""

    headers: list[bytes | None]
    peer: str | None


# An HTTP/2 stream's answer (answer_stream): its header fields, its body (None: none), its delivery.
StreamAnswer = tuple[Fields, bytes | memoryview | None, Pending]


def hand_over(conn: HitProtocol, buf: bytes, pos: int, head_end: int, out: list[Any]) -> int:
    """The decision of a request the application answers, taken already (an HTTP/2 stream's: answer_stream)."""
    return HAND_OVER


def date_line(now: float) -> bytes:
    t = time.gmtime(now)
    return (f"Date: {_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT\r\n").encode()


class HitServer:
    """`secure`: the connections are TLS (assetcdn/edge/tls/site.py): every answer carries HSTS when it is
    configured, and bodies are written through TLS, never sendfile'd."""

    def __init__(self, app: web.Application, web_server: web.Server, *, secure: bool = False,
                 answer_hits: bool = True) -> None:
        settings = app[SETTINGS]
        self.secure = secure
        # Plain HTTP redirected to https: the application answers every request (with the redirect).
        self.answers_hits = answer_hits and (secure or not redirects_plain_http(settings))
        hsts = hsts_value(settings, secure=secure)
        self.extra_head = f"{HSTS_HEADER}: {hsts}\r\n".encode() if hsts else b""
        # This site writes its own HSTS field (as the application's hook sets it): an origin's is left out.
        self.own_hsts = bool(hsts)
        self.app = app
        self.web_server = web_server
        self.node = app[NODE]
        self.deliveries = self.node.deliveries
        self.metrics = app[METRICS]
        self.route = delivery_route_name(app)  # the metrics label the application counts deliveries under
        self.header_timeout_s = header_timeout_s(settings)
        self.send_timeout_s = float(settings.get("tls", "send_timeout_s"))  # a TLS client that reads nothing
        self.max_hits = max(1, int(settings.get("edge", "hot_heads_max")))
        self.wanted = dict(WANTED)
        self.wanted.setdefault(str(settings.get("analytics", "country_header")).lower().encode(), COUNTRY)
        self.memory = self.node.cache.memory
        self.memory.head_holders += 1  # the http and https sites' hit servers share the heads' room
        self._sync_purges = self.node.cache.sync_purges
        self._hit_status = self.node.hit_status
        self.loop = asyncio.get_running_loop()
        self.ids = app[REQUEST_IDS]  # the application's own (assetcdn/shared/middleware.py)
        self.connections: set[HitProtocol] = set()
        self.h2_connections = 0  # HTTP/2 connections open (assetcdn/edge/tls/h2.py keeps the count and its cap)
        self.hosts: dict[bytes, HostView] = {}
        self.prepared = 0  # prepared hits held, over every Host
        self.head_bytes = 0  # what they cost (their `cost`), charged to the memory tier's budget
        self.config: Any = None
        self.entries: dict[str, Any] = {}
        self.answering = False
        self.confirmed = False  # a stored zone's hits: control reachable (`begin_batch`)
        self.started = 0.0
        self.date = date_line(time.time()) + self.extra_head  # the lines every answer has before its id
        self.stream_date = b""            # `date` as HTTP/2 fields (`stream_tail`), made once per second
        self.stream_tail: Fields = ()
        self.cache_hit = self.metrics.cache_result("HIT")
        self.served = 0  # requests answered here (the rest went to the application)
        # Counted here in plain ints, moved into the metrics when they flush (collect_metrics):
        # requests per (status << 1 | HEAD), their latencies (per LATENCY_BUCKETS, +Inf, sum). The body bytes
        # served are the delivery log's (`DeliveryLog.sent`), counted as each delivery is recorded.
        self.counts: dict[int, int] = {}
        self.latency: list[float] = [0] * (len(LATENCY_BUCKETS) + 2)
        self.now = time.time()
        self._tick: asyncio.TimerHandle | None = None
        self.fills = PullFills(self)  # pull zones' plain misses (assetcdn/edge/fastpath/pull_fill.py)

    def protocol(self) -> HitProtocol:
        return HitProtocol(self)

    # --- once a second: Date, head deadlines -------------------------------------------------------

    def start(self) -> None:
        self.metrics.add_source(self.collect_metrics)
        self._on_tick()

    def _on_tick(self) -> None:
        now = time.time()
        self.date = date_line(now) + self.extra_head
        loop = self.loop
        clock = loop.time()
        for connection in [c for c in self.connections if c.deadline <= clock]:
            connection.timed_out()
        self._tick = loop.call_later(1.0 - now % 1.0 + 0.001, self._on_tick)

    def stop(self) -> None:
        self.collect_metrics()
        self.metrics.remove_source(self.collect_metrics)
        self._forget_hosts()
        self.memory.head_holders -= 1
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        for connection in list(self.connections):
            connection.close_when_idle()

    # --- hits ------------------------------------------------------------------------------------------

    def begin_batch(self) -> None:
        node = self.node
        if node.config is not self.config:
            self._take_config(node.config)
        self._sync_purges()
        self.entries = node.replica.entries
        self.answering = self.answers_hits
        # A stored zone's cached files, by the serve sequence's own decision (assetcdn/edge/states/serve.py): HIT,
        # or STALE / not at all while control is unreachable, which the application answers. A pull zone's answers
        # do not depend on control (the origin's freshness decides them, here as in the application).
        self.confirmed = self._hit_status() == HIT
        self.started = time.perf_counter()
        self.now = time.time()

    def collect_metrics(self) -> None:
        """What the application counts for each answer (assetcdn/shared/metrics.py middleware): the request
        by route, method and status and its latency, a cache HIT."""
        counts, self.counts = self.counts, {}
        metrics = self.metrics
        hits = 0
        for code, count in counts.items():
            metrics.add_requests(self.route, "HEAD" if code & 1 else "GET", str(code >> 1), count)
            hits += count
        if hits:
            latency, self.latency = self.latency, [0] * (len(LATENCY_BUCKETS) + 2)
            metrics.add_latencies(self.route, latency)
            self.cache_hit.inc(hits)

    def answer(self, conn: HitProtocol, buf: bytes, pos: int, head_end: int, out: list[Any]) -> int:
        """Answer the request whose head is ``buf[pos:head_end]`` (parsed into ``conn``) if it is a hit;
        ANSWERED (response appended to ``out``), BUSY (head appended; its file follows) or HAND_OVER."""
        try:
            return self._answer(conn, buf, pos, head_end, out)
        except Exception:  # never a broken connection for a hit: the application answers instead
            log.exception("hit path failed; handing the request to the application")
            return HAND_OVER

    def _answer(self, conn: HitProtocol, buf: bytes, pos: int, head_end: int, out: list[Any]) -> int:
        method = conn.parser.get_method()
        if method == b"GET":
            head_only = False
        elif method == b"HEAD":
            head_only = True
        else:
            return HAND_OVER
        line_end = buf.find(b"\r\n", pos)
        if not buf.endswith(b" HTTP/1.1", pos, line_end) or not self.answering:
            return HAND_OVER
        headers = conn.headers
        host = headers[0]
        if host is None or conn.repeated or headers[APPLICATION_FIELDS] is not None:  # Expect, If-Match...
            return HAND_OVER
        url = conn.url
        query = url.find(b"?")
        path = url if query < 0 else url[:query]
        if path[:1] != b"/" or PERCENT in path:
            return HAND_OVER
        view = self.hosts.get(host)
        if view is None:
            view = self._host_view(host)
            if view is None:
                return HAND_OVER
        hit = view.hits.get(path)
        if hit is None:
            pulled = view.pulls.get(url)
            if pulled is not None:
                return self._answer_pull(conn, view, url, pulled, head_only, out)
        elif not self.confirmed:  # a stored zone's: STALE, or not served from cache, the application's
            return HAND_OVER
        elif hit.file is None and self.entries.get(hit.cdn_path) is hit.entry:
            # The usual hit, inline: `_find`'s first step for a body in the memory tier.
            obj = self.memory.hit(hit.key)
            if obj is not None:
                return self._respond(conn, view, hit, obj, -1, head_only, out)
        found = self._find(conn, view, path, head_only, self.confirmed)  # no file opened for a hit declined
        if isinstance(found, PullPath):
            return self._answer_pull(conn, view, url, None, head_only, out, found)
        if found is None:
            return HAND_OVER
        hit, obj, fileno = found
        if not self.confirmed:  # STALE, or not served from cache: the application's
            return self._decline(fileno)
        try:
            return self._respond(conn, view, hit, obj, fileno, head_only, out)
        except BaseException:
            if fileno >= 0:
                os.close(fileno)
            raise

    def _find(self, conn: Request, view: HostView, path: bytes, head_only: bool,
              files: bool) -> tuple[Prepared, Any, int] | PullPath | None:
        """The hit of ``path`` on ``view``'s host, valid now: (prepared hit, its memory-tier object, or
        the descriptor of its file opened for a body to send, else -1; with ``files`` False, a body on disk only
        is neither opened nor looked for: its object is None); a pull zone's path (its own hits are
        ``_answer_pull``'s); None when the application answers."""
        hit = view.hits.get(path)
        obj: Any = None
        fileno = -1
        for _attempt in range(2):
            if hit is None or self.entries.get(hit.cdn_path) is not hit.entry:
                made = self._prepare(view, path)
                if made is None or isinstance(made, PullPath):
                    return made
                hit, obj = made
            if hit.file is None:
                if obj is None:
                    obj = self.memory.hit(hit.key)
                if obj is not None:
                    return hit, obj, fileno
            elif not files:
                return hit, None, fileno
            else:
                try:
                    if head_only or self._revalidated(conn, hit):  # no body to send: see that it is there
                        os.stat(hit.file)
                    else:
                        fileno = os.open(hit.file, os.O_RDONLY | os.O_CLOEXEC)
                    return hit, obj, fileno
                except FileNotFoundError:  # purged or evicted: the application fetches it again
                    pass
            self._drop(view, path)
            hit = obj = None
        return None

    @staticmethod
    def _revalidated(conn: Request, hit: Prepared) -> bool:
        """The request's If-None-Match names this hit's ETag: it is answered 304, without a body."""
        if_none_match = conn.headers[1]
        return if_none_match is not None and etag_matches(if_none_match.decode(FIELD_CODING, "surrogateescape"), hit.etag)

    def _respond(self, conn: HitProtocol, view: HostView, hit: Prepared, obj: Any, fileno: int,
                 head_only: bool, out: list[Any]) -> int:
        headers = conn.headers
        size = hit.size
        start, end = 0, size
        if self._revalidated(conn, hit):
            status = 304
            head = hit.head_304 or hit.not_modified_head()
        else:
            status = 200
            head = hit.head
            if headers[2] is not None:
                if headers[CACHE_FIELDS] is not None:  # If-Range among them, maybe: the application compares it
                    return self._decline(fileno)
                parsed = parse_range(headers[2].decode("latin-1"), size)
                if parsed is False:  # 416: the application answers it
                    return self._decline(fileno)
                if parsed is not None:
                    status = 206
                    start, end = parsed
                    head = hit.partial_head(start, end)
        request_id = self.ids.of(headers[3])
        if conn.keep_alive:
            out.append(head + self.date + b"X-Request-ID: " + request_id + b"\r\n\r\n")
        else:
            conn.closing = True
            out.append(head + self.date + b"Connection: close\r\nX-Request-ID: " + request_id + b"\r\n\r\n")
        sent = body_sent(head_only, status, end - start)
        if sent:
            if fileno < 0:
                out.append(obj.body if status == 200 else memoryview(obj.body)[start:end])
        elif fileno >= 0:
            os.close(fileno)
            fileno = -1
        pending = self._count(conn, view, hit, status, sent, head_only, request_id)
        if fileno >= 0:
            conn.pending_file = (fileno, start, sent, pending)
            return BUSY
        conn.records.append(pending)  # recorded once `out` is written (HitProtocol._flush)
        return ANSWERED

    # --- pull zones' hits (assetcdn/edge/states/pull.py) -------------------------------------------------

    def _answer_pull(self, conn: HitProtocol, view: HostView, url: bytes, pulled: PulledHit | None,
                     head_only: bool, out: list[Any], named: PullPath | None = None) -> int:
        """A pull zone's request: answered when the memory tier holds its prepared response and freshness.py
        says it is fresh for a request without directives of its own; anything else is the application's.
        `named`: what `recv.resolve` made of its path, when `prepare` resolved it already."""
        found = self._fresh_pull(conn, view, url, pulled, named)
        if not isinstance(found, tuple):  # True: a miss
            return FILL if found and self.fills.claim(conn, view, url, head_only, named) else HAND_OVER
        pulled, body = found
        headers = conn.headers
        answer = self._pulled_answer(headers, pulled)
        if answer is None:  # 416: the application answers it
            return HAND_OVER
        status, start, end, head = answer
        request_id = self.ids.of(headers[3])
        if conn.keep_alive:  # the head ends in the X-Request-ID field's name
            out.append(head + request_id + b"\r\n\r\n")
        else:
            conn.closing = True
            out.append(head + request_id + b"\r\nConnection: close\r\n\r\n")
        sent = body_sent(head_only, status, end - start)
        if sent:
            out.append(body if status == 200 else memoryview(body)[start:end])
        conn.records.append(self._count(conn, view, pulled, status, sent, head_only, request_id))
        return ANSWERED

    def _fresh_pull(self, conn: Request, view: HostView, url: bytes, pulled: PulledHit | None,
                    named: PullPath | None) -> tuple[PulledHit, bytes] | bool:
        """The prepared hit of a pull zone's request target `url` (`pulled`: the one held for it, if any) and its
        body, when the memory tier holds it and freshness.py says it is fresh for a request without directives of
        its own; True when the memory tier holds nothing for it (a miss, which the hit path may fill); False when
        the application answers (request directives, a stale entry, anything `prepare_pull` declines)."""
        if conn.headers[CACHE_FIELDS] is not None:
            return False
        obj = None if pulled is None else self.memory.hit(pulled.key)
        if obj is None or pulled is None or obj is not pulled.entry() or (body := obj.body) is None:
            if pulled is not None:
                self._drop_pull(view, url)  # refreshed, replaced, purged or evicted
            if HASH in url:  # the application's (so never prepared: a prepared hit's target has none)
                return False
            prepared = self._prepare_pull(view, url, named)
            if not isinstance(prepared, PulledHit):  # True: not in the memory tier; False: the application's
                return prepared
            pulled = prepared
            obj = pulled.entry()  # the memory tier's entry `prepare_pull` found, that instant
            if obj is None or (body := obj.body) is None:
                self._drop_pull(view, url)
                return False
        if self.now >= pulled.fresh_until:  # freshness.py's `reuse` for a request without directives: not FRESH
            return False  # stale: the application revalidates (or serves it stale, saying so)
        return pulled, body

    def _prepare_pull(self, view: HostView, url: bytes, named: PullPath | None) -> PulledHit | bool:
        """`prepare_pull` of request target `url`, kept for the next requests for it."""
        try:
            target = url.decode("ascii")
        except UnicodeDecodeError:
            return False
        pulled = prepare_pull(self.node, self.config, view, target, named, own_hsts=self.own_hsts,
                              scheme="https" if self.secure else "http")
        if not isinstance(pulled, PulledHit):
            return pulled
        self._hold(view, url, pulled)
        return pulled

    def _drop_pull(self, view: HostView, url: bytes) -> None:
        head = view.pulls.pop(url, None)
        if head is not None:
            self._let_go(head)

    def _decline(self, fileno: int) -> int:
        if fileno >= 0:
            os.close(fileno)
        return HAND_OVER

    def _count(self, conn: Request, view: HostView, hit: Prepared | PulledHit, status: int, sent: int, head_only: bool,
               request_id: bytes) -> Pending:
        """Count the request; return its delivery, which the connection records once its body is out."""
        self.served += 1
        code = status << 1 | head_only
        counts = self.counts
        counts[code] = counts.get(code, 0) + 1
        seconds = time.perf_counter() - self.started
        latency = self.latency
        latency[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency[-1] += seconds
        country = conn.headers[COUNTRY]
        # As DeliveryLog.record counts the application's answers.
        return (self.now, view.name, "HEAD" if head_only else "GET", hit.cdn_path, hit.zone, status, sent, "HIT",
                "XX" if country is None else country_code(country.decode("utf-8", "surrogateescape")), request_id,
                conn.peer, seconds)

    # --- HTTP/2 streams (assetcdn/edge/tls/h2.py) -----------------------------------------------------

    def answer_stream(self, request: Request, head_only: bool, host: bytes, path: bytes) -> StreamAnswer | Decide:
        """An HTTP/2 stream's GET (or HEAD) without a body, its fields in ``request``, answered as ``_answer``
        answers the same request over HTTP/1.1, by the same decisions (``_find``, ``_fresh_pull``, ``_count``),
        with no HTTP/1.1 head made or parsed: a stored zone's prepared hit's fields are split once and kept on it,
        a pull zone's made from its heads once per second (``_answer_pull_stream``). Otherwise how the stream's
        HTTP/1.1 side answers, decided here once: the application (a stored zone's miss, anything unusual), the
        hit found here sent from its file (a body kept on disk only), or a pull zone's miss filled on the hit path
        (``_fill_stream``). ``begin_batch`` has run in this loop turn."""
        try:
            return self._answer_stream(request, head_only, host, path)
        except Exception:  # never a broken stream for a hit: the application answers instead
            log.exception("hit path failed; handing the request to the application")
            return hand_over

    def _answer_stream(self, request: Request, head_only: bool, host: bytes, path: bytes) -> StreamAnswer | Decide:
        headers = request.headers
        if not self.answering or headers[APPLICATION_FIELDS] is not None:  # Expect, If-Match...
            return hand_over
        target = path  # a pull zone's heads are held by the whole request target, query included
        query = path.find(b"?")
        if query >= 0:
            path = path[:query]
        if path[:1] != b"/" or PERCENT in path:
            return hand_over
        view = self.hosts.get(host)
        if view is None:
            view = self._host_view(host)
            if view is None:
                return hand_over
        if path not in view.hits:
            pulled = view.pulls.get(target)
            if pulled is not None:
                return self._answer_pull_stream(request, view, target, pulled, head_only)
        elif not self.confirmed:  # a stored zone's: STALE, or not served from cache
            return hand_over
        found = self._find(request, view, path, head_only, False)
        if found is None:
            return hand_over
        if isinstance(found, PullPath):
            return self._answer_pull_stream(request, view, target, None, head_only, found)
        if not self.confirmed:  # STALE, or not served from cache: the application's
            return hand_over
        hit, obj, _ = found
        if obj is None:
            return partial(self._answer_file, view, path, hit)
        size = hit.size
        start, end = 0, size
        date = self.date
        if date is not self.stream_date:
            self.stream_date = date
            self.stream_tail = response_fields(date)
        if self._revalidated(request, hit):
            status = 304
            fields = hit.h2_head_304
            if fields is None:
                fields = hit.h2_head_304 = self._charge(
                    view, path, hit, response_fields(hit.head_304 or hit.not_modified_head()))
            fields += self.stream_tail
        elif headers[2] is None:
            status = 200
            # The head with this second's Date, made once a second per hit: a request adds only its id.
            dated = hit.h2_dated
            if dated is None or dated[0] is not date:
                fields = hit.h2_head
                if fields is None:
                    fields = hit.h2_head = self._charge(view, path, hit, response_fields(hit.head))
                fields += self.stream_tail
                if dated is None:  # the next seconds' replace it
                    self._charge(view, path, hit, fields, dated=True)
                dated = hit.h2_dated = (date, fields)
            fields = dated[1]
        else:
            if headers[CACHE_FIELDS] is not None:  # If-Range among them, maybe: the application compares it
                return hand_over
            parsed = parse_range(headers[2].decode("latin-1"), size)
            if parsed is False:  # 416: the application answers it
                return hand_over
            if parsed is None:  # a range ignored: the whole body
                status = 200
                fields = hit.h2_head
                if fields is None:
                    fields = hit.h2_head = self._charge(view, path, hit, response_fields(hit.head))
            else:
                status = 206
                start, end = parsed
                fields = hit.h2_head_206
                if fields is None:
                    fields = hit.h2_head_206 = self._charge(view, path, hit, response_fields(hit.partial_lines()))
                fields += ((b"content-range", content_range(start, end, size).encode()),
                           (b"content-length", b"%d" % (end - start)))
            fields += self.stream_tail
        request_id = self.ids.of(headers[3])
        fields += (NeverIndexedHeader(b"x-request-id", request_id),)
        sent = body_sent(head_only, status, end - start)
        body = None if not sent else obj.body if status == 200 else memoryview(obj.body)[start:end]
        return fields, body, self._count(request, view, hit, status, sent, head_only, request_id)

    def _answer_pull_stream(self, request: Request, view: HostView, target: bytes, pulled: PulledHit | None,
                            head_only: bool, named: PullPath | None = None) -> StreamAnswer | Decide:
        """A pull zone's stream, answered as ``_answer_pull`` answers the same request over HTTP/1.1, by the same
        decision (``_fresh_pull``), from the prepared hit's heads turned into fields; a miss is filled by the
        stream's HTTP/1.1 side (``_fill_stream``); anything else is the application's."""
        found = self._fresh_pull(request, view, target, pulled, named)
        if not isinstance(found, tuple):  # True: a miss, which the stream's HTTP/1.1 side may fill
            return partial(self._fill_stream, view, target, named) if found else hand_over
        pulled, body = found
        headers = request.headers
        answer = self._pulled_answer(headers, pulled)
        if answer is None:  # 416: the application answers it
            return hand_over
        status, start, end, head = answer
        if status == 200:
            fields = self._pulled_fields(view, target, pulled, head)
        else:
            fields = response_fields(head[:-len(ID_FIELD)])
        request_id = self.ids.of(headers[3])
        fields += (NeverIndexedHeader(b"x-request-id", request_id),)
        sent = body_sent(head_only, status, end - start)
        data = None if not sent else body if status == 200 else memoryview(body)[start:end]
        return fields, data, self._count(request, view, pulled, status, sent, head_only, request_id)

    def _fill_stream(self, view: HostView, target: bytes, named: PullPath | None, conn: HitProtocol, buf: bytes,
                     pos: int, head_end: int, out: list[Any]) -> int:
        """The HTTP/1.1 side of an HTTP/2 stream whose pull zone miss answer_stream found: filled on the hit path
        (``PullFills.claim``) without deciding again; the application's when it may not be."""
        head_only = conn.parser.get_method() == b"HEAD"
        return FILL if self.fills.claim(conn, view, target, head_only, named) else HAND_OVER

    def _pulled_answer(self, headers: list[bytes | None], pulled: PulledHit) -> tuple[int, int, int, bytes] | None:
        """The status, byte range and head (through ``ID_FIELD``) of `pulled`'s answer now to a request with the
        If-None-Match and Range of `headers`, over either protocol; None for a range it cannot satisfy (416)."""
        now, size = self.now, pulled.size
        tail = self.date if not pulled.dated else self.extra_head
        if headers[1] is not None and etag_matches(headers[1].decode(FIELD_CODING, "surrogateescape"), pulled.etag):
            return 304, 0, size, pulled.not_modified_head(now, tail)
        if headers[2] is not None:
            parsed = parse_range(headers[2].decode("latin-1"), size)
            if parsed is False:
                return None
            if parsed is not None:  # else the range is ignored: the whole body
                start, end = parsed
                return 206, start, end, pulled.partial_head(start, end, now, tail)
        return 200, 0, size, pulled.whole_head(now, tail)

    def _pulled_fields(self, view: HostView, target: bytes, pulled: PulledHit, block: bytes) -> Fields:
        """The fields of `pulled`'s 200 head `block` (`PulledHit.whole_head`'s): made again only when that head is
        (once a second or so), the first ones charged to the memory budget as the next seconds' replace them."""
        if block is not pulled.h2_block:
            first = pulled.h2_block is None
            pulled.h2_block = block
            pulled.h2_fields = response_fields(block[:-len(ID_FIELD)])
            if first:
                self._charge(view, target, pulled, pulled.h2_fields)
        return pulled.h2_fields

    def _answer_file(self, view: HostView, path: bytes, hit: Prepared, conn: HitProtocol, buf: bytes, pos: int,
                     head_end: int, out: list[Any]) -> int:
        """The HTTP/1.1 side of an HTTP/2 stream whose hit answer_stream found with its body on disk only:
        answered from its file (``_find`` with files, without deciding again); the application's when the file
        is gone."""
        head_only = conn.parser.get_method() == b"HEAD"
        fileno = -1
        try:
            if head_only or self._revalidated(conn, hit):  # no body to send: see that it is there
                os.stat(hit.file)  # type: ignore[arg-type]  # a hit on disk has its file
            else:
                fileno = os.open(hit.file, os.O_RDONLY | os.O_CLOEXEC)  # type: ignore[arg-type]
        except FileNotFoundError:  # purged or evicted: the application fetches it again
            self._drop(view, path)
            return HAND_OVER
        try:
            return self._respond(conn, view, hit, None, fileno, head_only, out)
        except Exception:  # as `answer`: the application answers instead
            if fileno >= 0:
                os.close(fileno)
            log.exception("hit path failed; handing the request to the application")
            return HAND_OVER

    def stream_sent(self, pending: Pending, sent: int, aborted: bool) -> None:
        """A stream's hit is out (or the stream ended first, ``aborted``): ``sent`` body bytes went in DATA."""
        self.deliveries.settle(pending, sent, aborted)

    def _host_view(self, host: bytes) -> HostView | None:
        try:
            name = host.decode("ascii")
        except UnicodeDecodeError:
            return None
        if not is_valid_host(name):  # the application answers 400
            return None
        if len(self.hosts) >= MAX_HOSTS:
            self._forget_view(next(iter(self.hosts)))
        name = canonical_host(name)  # the one form the application's path uses too
        zone = self.config.zone_for_host(name)
        # A pull zone's paths are `/<zone>/...` on the default host (no tenant zone), every path on its own hosts.
        view = self.hosts[host] = HostView(host, name, zone, self.config.cookie_host(name, shared_host=zone is None))
        return view

    def _prepare(self, view: HostView, path: bytes) -> tuple[Prepared, Any] | PullPath | None:
        try:
            text = path.decode("ascii")
        except UnicodeDecodeError:
            return None
        made = prepare(self.node, self.config, view, text)
        if made is None or isinstance(made, PullPath):
            self._drop(view, path)
            return made
        hit, obj = made
        # Kept (`_hold`) only when the next request can find the body again the same way (memory tier or file).
        if hit.file is not None or hit.key in self.memory:
            self._hold(view, path, hit)
        return made

    def _drop(self, view: HostView, path: bytes) -> None:
        head = view.hits.pop(path, None)
        if head is not None:
            self._let_go(head)

    def _hold(self, view: HostView, target: bytes, head: Prepared | PulledHit) -> None:
        """Keep `head` for `target` on `view` (a pull zone's in its pulls, a stored zone's in its hits) within
        this server's part of ``max_hits`` heads (`edge.hot_heads_max`, the worker's) and of the heads' room in the
        memory tier's budget, which is charged what they hold (its entries make room): past either, the oldest of
        the view's table go, or, when it has none, those of the Host first seen that has some (heads are made again
        on use)."""
        pull = isinstance(head, PulledHit)
        table: dict[bytes, Any] = view.pulls if pull else view.hits
        old = table.pop(target, None)
        if old is not None:
            self._let_go(old)
        memory = self.memory
        holders = max(1, memory.head_holders)  # the http and https sites' hit servers: `hot_heads_max` is per worker
        room, most = memory.heads_room // holders, max(1, self.max_hits // holders)
        while self.head_bytes and (self.prepared >= most or self.head_bytes + head.cost > room):
            oldest = table or self._held_longest()
            if not oldest:
                break
            self._let_go(oldest.pop(next(iter(oldest))))
        table[target] = head
        self.prepared += 1
        self.head_bytes += head.cost
        memory.charge_heads(head.cost)

    def _held_longest(self) -> dict[bytes, Any] | None:
        """The heads (a table of pull zones' or stored zones') of the Host first seen that has some (the Hosts
        keep the order they came in: none is moved per request)."""
        for other in self.hosts.values():
            if other.pulls:
                return other.pulls
            if other.hits:
                return other.hits
        return None

    def _charge(self, view: HostView, path: bytes, hit: Prepared | PulledHit, fields: Fields, *,
                dated: bool = False) -> Fields:
        """`hit` holds `fields` more (an HTTP/2 head made on use; `dated`: with this second's Date): while `view`
        holds it for `path` (a pull zone's by its request target) it is held again at its new cost (`_hold`: room
        made for it as for any head; its let-go gives it all back); a head not held is let go with its request.
        Returns `fields`."""
        table: dict[bytes, Any] = view.pulls if isinstance(hit, PulledHit) else view.hits
        if table.get(path) is hit:
            self._let_go(table.pop(path))
            hit.cost += fields_cost(fields, dated=dated)
            self._hold(view, path, hit)
        return fields

    def _let_go(self, head: Prepared | PulledHit) -> None:
        self.prepared -= 1
        self.head_bytes -= head.cost
        self.memory.charge_heads(-head.cost)

    def _take_config(self, config: EdgeConfig) -> None:
        """A new configuration (once per config change, not per request): the prepared heads it may answer
        otherwise go, every one when its rules or hosts changed, else only those of the zones whose origin came,
        went or changed (`EdgeConfig.zones_changed`): one zone's change leaves the others' heads."""
        changed = config.zones_changed(self.config)
        self.config = config
        if changed is None:
            self._forget_hosts()
            return
        if not changed:
            return
        for view in self.hosts.values():
            for table in (view.hits, view.pulls):
                gone = list(table) if view.zone in changed else [
                    target for target, head in table.items() if head.zone in changed]
                for target in gone:
                    self._let_go(table.pop(target))

    def _forget_view(self, host: bytes) -> None:
        """One Host's view goes, and with it its heads."""
        view = self.hosts.pop(host)
        for table in (view.hits, view.pulls):
            for head in table.values():
                self._let_go(head)
            table.clear()  # a stream still answering from the view holds nothing more in it (`_charge`)

    def _forget_hosts(self) -> None:
        self.hosts = {}
        self.prepared = 0
        self.memory.charge_heads(-self.head_bytes)
        self.head_bytes = 0


class HitSite(web.TCPSite):
    """aiohttp's TCPSite with hit connections (assetcdn/edge/fastpath/protocol.py) in front of the application.
    The https site (assetcdn/edge/tls/site.py) is one with TLS connections."""

    answer_hits = True  # the https site without [edge] fast_hits: every request to the application
    secure = False      # the https site: its connections are TLS (started by its connection protocol)

    def __init__(self, runner: web.BaseRunner, host: str | None = None, port: int | None = None, *,
                 sock: Any = None, **options: Any) -> None:
        super().__init__(runner, host, port, **options)
        self.sock = sock
        self.hits: HitServer | None = None

    def connections(self, hits: HitServer) -> asyncio.Protocol:
        """A new connection's protocol."""
        return hits.protocol()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        runner = self._runner
        assert isinstance(runner, web.AppRunner) and runner.server is not None
        hits = self.hits = HitServer(runner.app, runner.server, secure=self.secure, answer_hits=self.answer_hits)
        loop = asyncio.get_running_loop()
        factory: Callable[[], asyncio.Protocol] = partial(self.connections, hits)
        # With [edge] proxy_protocol on, each connection reads its PROXY header first (per connection, never per request).
        proxying = proxy_policy(runner.app[SETTINGS], runner.app[METRICS].proxy_header_refusals)
        if proxying is not None:
            factory = partial(ProxyHeaderReader, proxying, factory)
        if self.sock is not None:
            self._server = await loop.create_server(factory, sock=self.sock, backlog=self._backlog)
        else:
            self._server = await loop.create_server(
                factory, self._host, self._port, backlog=self._backlog,
                reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = getattr(self._server, "sockets", None)
        for listening in sockets or ():
            keep_alive_probes(listening)
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
        hits.start()

    async def stop(self) -> None:
        if self.hits is not None:
            self.hits.stop()
        await super().stop()


class ProxiedTCPSite(web.TCPSite):
    """aiohttp's own site (``[edge] fast_hits = false``) with each connection's PROXY header read first."""

    def __init__(self, runner: web.BaseRunner, host: str | None = None, port: int | None = None, *,
                 policy: ProxyPolicy, **options: Any) -> None:
        super().__init__(runner, host, port, **options)
        self.policy = policy

    async def start(self) -> None:
        await web.BaseSite.start(self)
        runner = self._runner
        assert isinstance(runner, web.AppRunner) and runner.server is not None
        server = runner.server
        policy = self.policy
        self._server = await asyncio.get_running_loop().create_server(
            lambda: ProxyHeaderReader(policy, server), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
