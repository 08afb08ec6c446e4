"""GET/HEAD /api/signed?path=/<cdn path>&expires=<unix s>&sig=<hex HMAC-SHA256 of "{path}:{expires}">.

The signature is the credential (spec "Signed URL rules"). Checks run in the published order
(contract-notes §9), every refusal a 403 in the legacy envelope; the comparison is constant
time. A valid URL delivers the asset through the normal look-up and fetch, privately cached
for an hour. It is the only way to an asset of the `private` category (edge/access.py).
"""

from __future__ import annotations

import re
import time

from aiohttp import web

from edge.access import serves_on_host
from edge.state import NODE, SECRETS
from edge.states.deliver import deliver
from edge.states.fetch import OriginUnavailable, cached_asset
from shared.errors import LegacyError
from shared.paths import InvalidPath, parse_cdn_path
from shared.signing import signature_matches

CACHE_CONTROL = "private, max-age=3600"
NOT_FOUND = "Asset not found (404)"
REQUIRED = ("path", "expires", "sig")
_EXPIRES = re.compile(r"^[0-9]{1,12}\Z")  # \Z: "$" passes "123\n"
_SIGNATURE = re.compile(r"^[0-9a-fA-F]{64}\Z")


def _refuse(message: str) -> LegacyError:
    return LegacyError(403, message)


def verify_signed_query(query: dict[str, str], secret: str, now: float) -> str:
    """The CDN path a signed query grants (no leading slash); LegacyError(403) otherwise."""
    missing = [name for name in REQUIRED if not query.get(name)]
    if missing:
        raise _refuse(f"Missing required parameter{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    path, expires, sig = query["path"], query["expires"], query["sig"]
    if not path.startswith("/") or ".." in path or "\x00" in path or "//" in path:
        raise _refuse("Invalid path format")
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


async def signed_asset(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    path = verify_signed_query(dict(request.query), request.app[SECRETS].signed_url_secret, time.time())
    # A tenant host serves its own zone and the stock pool only (edge/access.py), whatever is signed.
    if not serves_on_host(path, node.config.zone_for_host(request.host)):
        raise LegacyError(404, NOT_FOUND)
    entry = node.replica.get(path)
    if entry is None:
        if not node.replica.loaded:
            raise LegacyError(503, "This edge has not loaded the manifest yet. Retry shortly.")
        raise LegacyError(404, NOT_FOUND)
    extra = {"X-Signed-URL": "verified"}
    for _attempt in range(2):  # a second pass only when the body was purged during delivery
        try:
            obj, status, head = await cached_asset(node, entry)
        except OriginUnavailable:
            raise LegacyError(502, f"'/{path}' could not be fetched from the control plane. "
                              "Retry shortly.") from None
        try:
            return await deliver(request, obj, cache_status=status, cache_control=CACHE_CONTROL,
                                 extra_headers=extra, head=head)
        except FileNotFoundError:
            continue
    raise LegacyError(503, "The asset was purged while it was being delivered. Retry.")
