"""GET/HEAD /api/signed?path=/<cdn path>&expires=<unix s>&sig=<hex HMAC-SHA256 of "{path}:{expires}">.

The signature is the credential (docs/api-guide.md "Image delivery", signed URLs). Checks run in the API reference's
order: the per-client rate limit first (429 with Retry-After), then the query, every refusal a 403 in
the legacy envelope; the comparison is constant time. A valid URL delivers the asset through the
serve sequence (assetcdn/edge/states/serve.py), privately cached for an hour. It is the only way to an asset
of the `private` category (assetcdn/edge/access.py), and counted as that asset's delivery. On a zone's own host `path=/v1/...` is that zone's file, signed
as its full path (`verify_signed_query`).
"""

from __future__ import annotations

import re
import time

from aiohttp import web

from assetcdn.edge.access import SourceRefused
from assetcdn.edge.app_keys import COUNTERS, NODE, SECRETS, SETTINGS
from assetcdn.edge.delivery_log import DELIVERED_PATH
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.fetch import AS_IS
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.shared.counter_store import client_key
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.limits import signed_per_client
from assetcdn.shared.paths import InvalidPath, parse_cdn_path
from assetcdn.shared.signing import signable_form, signature_matches

CACHE_CONTROL = "private, max-age=3600"
NOT_FOUND = "Asset not found (404)"
REQUIRED = ("path", "expires", "sig")
_EXPIRES = re.compile(r"^[0-9]{1,12}\Z")  # \Z: "$" passes "123\n"
_SIGNATURE = re.compile(r"^[0-9a-fA-F]{64}\Z")


def _refuse(message: str) -> LegacyError:
    return LegacyError(403, message)


def verify_signed_query(query: dict[str, str], secret: str, now: float, host_zone: str | None = None) -> str:
    """The CDN path a signed query grants (no leading slash); LegacyError(403) otherwise. On the tenant host of
    `host_zone` (a zone's own host or custom domain), `/v1/...` names that zone's file as its delivery does
    (tenant_path), and the signature is checked over the full path so named: a signature covers a zone's file,
    never a zone-less spelling another zone's host would read as its own."""
    missing = [name for name in REQUIRED if not query.get(name)]
    if missing:
        raise _refuse(f"Missing required parameter{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    path, expires, sig = query["path"], query["expires"], query["sig"]
    if not signable_form(path):
        raise _refuse("Invalid path format")
    path = tenant_path(host_zone, path)
    if not _EXPIRES.match(expires):
        raise _refuse("Invalid expires parameter")
    if now > int(expires):
        raise _refuse("URL expired")
    # The shape check reveals nothing about the secret; it keeps compare_digest on ASCII hex.
    if not _SIGNATURE.match(sig) or not signature_matches(secret, path, expires, sig):
        raise _refuse("Invalid signature")
    try:
        return parse_cdn_path(path)
    except InvalidPath:
        raise _refuse("Invalid path format") from None


def _refused(exc: SourceRefused) -> LegacyError:
    # Unknown, or another zone's on a tenant host (assetcdn/edge/access.py): the API reference's 404 message.
    return LegacyError(exc.status, NOT_FOUND if exc.status == 404 else exc.message, headers=exc.headers)


REFUSALS = Refusals(
    source=_refused,
    unreachable=lambda entry: LegacyError(502, f"'/{entry.path}' could not be fetched from the control plane. "
                                          "Retry shortly."),
    purged=lambda: LegacyError(503, "The asset was purged while it was being delivered. Retry."),
)
POLICY = ServePolicy(CACHE_CONTROL, REFUSALS, headers={"X-Signed-URL": "verified"})


async def signed_asset(request: web.Request) -> web.StreamResponse:
    # First, as published: each client address (IPv6: its /64) has signed_rate_limit requests per window,
    # counted by the shared counter store across every edge and worker. Every answer carries the count.
    limit = signed_per_client(request.app[SETTINGS])
    decision = await request.app[COUNTERS].hit(limit, client_key(request.remote or ""))
    if not decision.allowed:
        raise LegacyError(429, "Rate limit exceeded", f"At most {limit.limit} signed URL requests per client "
                          f"in {limit.window_s:g} s; retry in {decision.retry_after_s()} s.",
                          headers=decision.refusal_headers())
    try:
        return await _signed_asset(request, decision.headers())
    except LegacyError as exc:
        exc.headers = {**decision.headers(), **exc.headers}
        raise


async def _signed_asset(request: web.Request, rate_headers: dict[str, str]) -> web.StreamResponse:
    node = request.app[NODE]
    host_zone = node.config.zone_for_host(request_host(request))
    path = verify_signed_query(dict(request.query), request.app[SECRETS].signed_url_secret, time.time(), host_zone)
    # Delivered as it is, this is the asset's delivery: counted in its zone and under its path (a top asset), as on
    # its public path (assetcdn/edge/delivery_log.py); a URL refused above names none and stays an API answer.
    request[DELIVERED_PATH] = path
    # A tenant host serves its own zone and the stock pool only (assetcdn/edge/access.py), whatever is signed.
    entry = source_for(node, path, host_zone, REFUSALS, private_ok=True)
    policy = ServePolicy(CACHE_CONTROL, REFUSALS, headers={**POLICY.headers, **rate_headers})
    return await serve(request, entry, AS_IS, policy)
