"""The edge worker application: a route table for what the edge serves itself; every other /api/...
path is forwarded to control. A second, private site carries control's signed pushes to this worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from assetcdn.edge.app_keys import (
    COUNTERS,
    FORWARD_SPOOL,
    IMAGE_POOL,
    NODE,
    PROXY_SESSION,
    SECRETS,
    SETTINGS,
)
from assetcdn.edge.cache.fill_lock import FILL_LOCK_FILE, NodeFillLock
from assetcdn.edge.cache.store import EdgeCache
from assetcdn.edge.circuit_breaker import CircuitBreaker
from assetcdn.edge.control_client import ControlClient
from assetcdn.edge.image_pool import ImagePool
from assetcdn.edge.node import EdgeNode, store_writer
from assetcdn.edge.proxied_body import ForwardSpool
from assetcdn.edge.proxy import forward_to_control, open_proxy_session
from assetcdn.edge.routes import (
    auto,
    cluster,
    delivery,
    health,
    placeholders,
    shield,
    signed,
    stream,
    transform,
)
from assetcdn.edge.shield import INVALIDATE_PATH
from assetcdn.edge.site_config import EDGE_PATHS, FORWARDED, apply_rule_changes, host_middleware
from assetcdn.edge.states import pull, pull_source
from assetcdn.edge.states.deliver import request_header_changes
from assetcdn.edge.states.too_large import TooLarge
from assetcdn.edge.tls import policy
from assetcdn.shared import deliveries
from assetcdn.shared.cluster import PREFIX, ReplayGuard
from assetcdn.shared.config import Settings
from assetcdn.shared.cors import PUBLIC_READ, RATE_LIMITED_READ, cross_origin, preflight
from assetcdn.shared.counter_store import counters_from_settings
from assetcdn.shared.host_url import host_url
from assetcdn.shared.http_server import HANDLER_ARGS, client_keepalive_s
from assetcdn.shared.metrics import (
    METRICS,
    METRICS_KEY,
    Metrics,
    metrics_handler,
    metrics_middleware,
)
from assetcdn.shared.middleware import install_envelopes, no_such_method
from assetcdn.shared.openapi import api_docs, openapi_document
from assetcdn.shared.process import CannotListen
from assetcdn.shared.request_body import body_deadline_middleware
from assetcdn.shared.secrets import Secrets
from assetcdn.shared.tls_state import TLS_STATE_PATH

CLUSTER_SHUTDOWN_GRACE_S = 2.0  # for a push being applied when the worker stops

# aiohttp's own route definitions (method, path, handler); control's `Route` adds its access rules.
# CDN paths come first (the hot path: the router tries routes in order) and exclude what the other
# routes serve; then specific /api routes, then the forwarder for the rest of /api and for the
# dashboard (control sends it to its own origin; `dashboard` is a reserved zone name, so no CDN path is lost).
# Newlines too (`[\s\S]`, not `.`): the delivery route refuses a path with a control character (400 InvalidPath).
# `/` too: a pull zone's own host serves its origin's, and a `_redirects` rule may name it (else the delivery route
# answers 404 for it, as for a path no route takes).
CDN_PATH = r"/{path:(?!" + EDGE_PATHS + r")[\s\S]*}"
# The /api routes the edge answers itself. Those a page reads from another origin answer its CORS preflight.
read_preflight = preflight()
# Their CORS fields, which their GETs' answers and errors carry (the handlers' own) and their 405s too.
CROSS_ORIGIN: Mapping[str, Mapping[str, str]] = {
    "/api/transform": RATE_LIMITED_READ, "/api/auto": PUBLIC_READ, "/api/auto/{path:.*}": PUBLIC_READ,
    "/api/lqip": RATE_LIMITED_READ, "/api/blurhash": RATE_LIMITED_READ, "/api/stream": stream.CORS}
EDGE_API_ROUTES: tuple[web.RouteDef, ...] = (
    web.route("GET", "/api/health", health.health),
    web.route("GET", "/api/transform", transform.transform_image),
    web.route("OPTIONS", "/api/transform", read_preflight),
    web.route("GET", "/api/auto", auto.auto_query),
    web.route("OPTIONS", "/api/auto", read_preflight),
    web.route("GET", "/api/auto/{path:.*}", auto.auto_path),  # no segments: 400, as a missing path query
    web.route("OPTIONS", "/api/auto/{path:.*}", read_preflight),
    web.route("GET", "/api/lqip", placeholders.lqip),
    web.route("OPTIONS", "/api/lqip", read_preflight),
    web.route("GET", "/api/blurhash", placeholders.blurhash),
    web.route("OPTIONS", "/api/blurhash", read_preflight),
    web.route("GET", "/api/signed", signed.signed_asset),
    web.route("GET", "/api/stream", stream.stream),
    web.route("OPTIONS", "/api/stream", stream.stream_preflight),
    web.route("GET", "/api/openapi.json", openapi_document),  # served here too: available while control is down
    web.route("GET", "/api/docs", api_docs),
)
PUBLIC_ROUTES: tuple[web.RouteDef, ...] = (
    web.route("GET", CDN_PATH, delivery.serve_asset),
    # A pull zone's other methods go to its origin; a body over the limit is refused before any 100 Continue.
    web.route("*", CDN_PATH, delivery.serve_asset, expect_handler=delivery.expect_body),
    web.route("GET", "/metrics", metrics_handler),
    web.route("GET", policy.CHALLENGE_ROUTE, policy.acme_challenge),  # ACME HTTP-01 (assetcdn/edge/tls/policy.py)
    *EDGE_API_ROUTES,
    # Another method on those paths is 405 naming theirs (control, which has no such path, would answer 404), with
    # the CORS fields of a path a page reads from another origin, as its other errors.
    *(web.route("*", path, cross_origin(no_such_method, CROSS_ORIGIN[path]) if path in CROSS_ORIGIN else no_such_method)
      for path in dict.fromkeys(route.path for route in EDGE_API_ROUTES)),
    # Public, and readable from any origin as control answers it: the edge's own refusals too (503 while control is
    # unreachable, and its Retry-After). Its other methods go on to control, which answers 405.
    web.route("GET", "/api/search", cross_origin(forward_to_control, RATE_LIMITED_READ)),
    web.route("OPTIONS", "/api/search", read_preflight),  # control's own preflight, answered here without a trip
    web.route("*", r"/api/{tail:[\s\S]*}", forward_to_control),  # newlines too: control answers 400 (or acts)
    web.route("*", "/dashboard", forward_to_control),
    web.route("*", r"/dashboard/{tail:[\s\S]*}", forward_to_control),
)
CLUSTER_ROUTES: tuple[web.RouteDef, ...] = (
    web.route("POST", PREFIX + "/push", cluster.push),
    web.route("POST", PREFIX + TLS_STATE_PATH, cluster.tls),
    web.route("GET", shield.ROUTE, shield.shield),  # another edge's cache fill (assetcdn/edge/shield.py)
    web.route("POST", INVALIDATE_PATH, shield.invalidate),  # and what its unsafe requests changed
)


def _add_routes(app: web.Application, routes: tuple[web.RouteDef, ...], *, heads: bool) -> None:
    # Each as listed (in order: the router tries routes in order) and, with `heads`, each GET's HEAD just after it,
    # with the GET's handler (RFC 9110 9.3.2: HEAD is allowed wherever GET is; aiohttp leaves out the body).
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler, **route.kwargs)
        if heads and route.method == "GET":
            app.router.add_route("HEAD", route.path, route.handler, **route.kwargs)


@dataclass(frozen=True)
class EdgeIdentity:
    name: str                 # node name
    worker: int               # worker index within the node
    control_url: str
    cache_dir: Path
    advertise_host: str       # where control reaches this worker's private cluster site
    data_dir: Path | None = None  # where the embedded counter store is shared (None: the cache directory)
    workers: int = 0              # the node's worker processes (0: not known, taken as several)

    @property
    def member(self) -> str:
        return f"{self.name}/{self.worker}"


def create_cluster_app(node_app: web.Application) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024, handler_args=HANDLER_ARGS)
    # Counted beside the public site's requests, under their own routes (other edges' shield requests, control's
    # pushes), with the status the caller gets.
    app.middlewares.append(metrics_middleware)
    install_envelopes(app)
    app.middlewares.append(body_deadline_middleware(node_app[SETTINGS]))
    app[METRICS] = node_app[METRICS]
    app[NODE] = node_app[NODE]
    app[SECRETS] = node_app[SECRETS]
    app[cluster.PUSH_REPLAY_GUARD] = ReplayGuard()
    # Shield requests are served by the pull sequence, collapsed with the worker's own clients' requests.
    app[pull.FLIGHTS] = node_app[pull.FLIGHTS]
    app.on_response_prepare.append(shield.name_shield)
    _add_routes(app, CLUSTER_ROUTES, heads=False)  # the cluster protocol: GETs of its own, no HEAD
    return app


ANSWERED_CACHE_CONTROL = frozenset(("cache-control",))


def is_delivery(request: web.Request) -> bool:
    """Answers the `_headers` rules apply to (assetcdn/shared/deliveries.py)."""
    return deliveries.is_delivery(request.path, forwarded=bool(request.get(FORWARDED)))


async def _on_delivery_response(request: web.Request, response: web.StreamResponse) -> None:
    node = request.app[NODE]
    if is_delivery(request):
        # Every answer of a delivery route, errors and redirects too. A delivered body's headers had them
        # already (`final_headers`): again here, after the stamp (idempotent), a detached X-API-Version stays so.
        # But the Cache-Control of a 412 or 416 (a stored file's: no-store) and of a 5xx (an origin's own, or none), as
        # it was: a 412 answers this request's If-Match, a 416 its Range, a 5xx this moment's failure (a busy worker,
        # an origin down), not the URL, and a rule's year of `public` would let a shared cache answer every later
        # request with it.
        status = response.status
        transient = status == 412 or status == 416 or status >= 500
        apply_rule_changes(request_header_changes(request), response.headers,
                           kept=ANSWERED_CACHE_CONTROL if transient else frozenset())
    node.deliveries.record(request, response)


def create_app(settings: Settings, secrets: Secrets, identity: EdgeIdentity) -> web.Application:
    app = web.Application(client_max_size=settings.get("control", "max_upload_bytes") + 1024 * 1024,
                          handler_args=HANDLER_ARGS)  # aiohttp's head limits (assetcdn/shared/http_server.py)
    app.middlewares.append(metrics_middleware)  # outside the envelopes: counts the status clients get
    https_port = int(settings.get("tls", "https_port"))
    if policy.redirects_plain_http(settings):
        app.middlewares.append(policy.redirect_middleware(int(settings.get("tls", "redirect_port")) or https_port))
    install_envelopes(app)
    app.middlewares.append(host_middleware)  # inside the envelopes: its 400 is in the route's envelope
    app[METRICS] = Metrics("edge")
    app[METRICS_KEY] = secrets.metrics_key
    app[SETTINGS], app[SECRETS] = settings, secrets
    app[pull.FLIGHTS] = pull.Flights()
    app[pull_source.TOO_LARGE_SOURCES] = TooLarge()
    # Embedded: the machine's counters.sqlite3 in the data directory, shared with control and every edge.
    app[COUNTERS] = counters_from_settings(settings.section("counters"), identity.data_dir or identity.cache_dir)
    _add_routes(app, PUBLIC_ROUTES, heads=True)
    app.on_response_prepare.append(_on_delivery_response)
    if https_port and (hsts := policy.hsts_value(settings, secure=True)):
        app.on_response_prepare.append(policy.hsts_on_prepare(hsts))

    async def open_node(app: web.Application, opened: contextlib.AsyncExitStack) -> None:
        """Open the cache, the control client, the proxy session and the private cluster site and start
        the node's background work, registering each one's closing on `opened` as soon as it is open."""
        edge = settings.section("edge")
        opened.push_async_callback(app[COUNTERS].close)
        identity.cache_dir.mkdir(parents=True, exist_ok=True)
        cache = EdgeCache.from_settings(edge, identity.cache_dir / "cache")
        # One worker: the keys on disk are read into a filter once (every row's key: off the event loop).
        await asyncio.to_thread(setattr, cache, "alone", identity.workers == 1)
        cache.disk.report_to(app[METRICS])
        cache.memory.report_to(app[METRICS])
        # The thread that writes pull zone fills: told to end once the cache has closed (its last batches may still
        # run in it), or it would hold the worker process at its exit.
        stores = store_writer()
        opened.callback(stores.shutdown, wait=False)
        opened.push_async_callback(cache.aclose)  # waits for the disk writer off the event loop
        control = ControlClient(identity.control_url, secrets.cluster_secret, float(edge["origin_timeout_s"]),
                                client_keepalive_s(settings),
                                probe_timeout_s=float(edge["control_probe_timeout_s"]),
                                breaker=CircuitBreaker(int(edge["breaker_failures"]), float(edge["breaker_open_s"])),
                                signed_url_secret=secrets.signed_url_secret)
        await control.start()
        opened.push_async_callback(control.close)
        node = EdgeNode(settings, identity.member, control, cache, identity.cache_dir, app[METRICS], stores)
        node.replica.state_file = identity.cache_dir / f"manifest-{identity.worker}.json"
        node.config_file = identity.cache_dir / f"edge-config-{identity.worker}.json"
        node.tls.state_file = identity.cache_dir / f"tls-state-{identity.worker}.json"
        node.load_persisted()
        app[NODE] = node
        node.origins.report_to(app[METRICS])
        flights = app[pull.FLIGHTS]
        if identity.workers > 1 and node.shields.shares_fills:  # one fill per URL for the edge's workers
            fill_lock = NodeFillLock.open(identity.cache_dir / FILL_LOCK_FILE)
            if fill_lock is not None:
                opened.callback(fill_lock.close)
                flights.share_fills(fill_lock, node.origins.limits)
        metrics = app[METRICS]
        deliveries = node.deliveries
        metrics.follow_counts([(metrics.fill_waiters.labels(metrics.kind), lambda: flights.waiters),
                               (metrics.bytes_served.labels(metrics.kind), lambda: deliveries.sent)])
        app[PROXY_SESSION] = open_proxy_session(settings)
        app[FORWARD_SPOOL] = ForwardSpool(int(edge["proxy_body_disk_mb"]) * 1024 * 1024)
        app[FORWARD_SPOOL].report_to(app[METRICS])
        # The private cluster site: control pushes to each worker directly.
        cluster_runner = web.AppRunner(create_cluster_app(app), access_log=None,
                                       shutdown_timeout=CLUSTER_SHUTDOWN_GRACE_S)
        await cluster_runner.setup()
        opened.push_async_callback(app[PROXY_SESSION].close)
        opened.push_async_callback(cluster_runner.cleanup)
        cluster_port, advertised = int(edge["cluster_port"]), int(edge["cluster_advertise_port"])
        own_port = cluster_port + identity.worker if cluster_port else 0
        site = web.TCPSite(cluster_runner, identity.advertise_host, own_port)
        try:
            await site.start()
        except OSError as exc:  # a fixed port another program holds: named with what moves it, not a traceback
            address = host_url(identity.advertise_host, own_port).removeprefix("http://")
            moved = ("choose another with ASSETCDN_EDGE_CLUSTER_PORT ([edge] cluster_port)" if cluster_port else
                     "any free port was asked for")
            raise CannotListen(f"cannot listen on {address}, worker {identity.worker}'s cluster port: "
                               f"{os.strerror(exc.errno) if exc.errno else exc}; {moved}") from None
        port = advertised + identity.worker if advertised else cluster_runner.addresses[0][1]
        opened.push_async_callback(node.stop)
        # An IPv6 address in brackets (`host_url`): `http://::1:9788` is no URL control or a peer could use.
        await node.start(host_url(identity.advertise_host, port))
        flushing = asyncio.create_task(app[METRICS].flush_forever())  # counts reach sibling workers' /metrics
        opened.callback(flushing.cancel)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        # Closed in reverse order on shutdown; a failing start or close still closes the rest.
        async with contextlib.AsyncExitStack() as opened:
            await open_node(app, opened)
            yield

    async def image_lifecycle(app: web.Application) -> AsyncIterator[None]:
        app[IMAGE_POOL] = ImagePool.from_settings(settings)
        if settings.get("transform", "prestart_workers"):
            app[IMAGE_POOL].start()   # worker processes load while the edge starts
        yield
        await app[IMAGE_POOL].close()

    app.cleanup_ctx.append(lifecycle)
    app.cleanup_ctx.append(image_lifecycle)
    return app
