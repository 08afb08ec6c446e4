"""Which assets the public delivery routes may read: everything but the `private` category.

Product decision: an asset whose category is `private` (CDN path `<zone>/v1/private/...`, or
`stocks/private/...`) is never served on its public CDN path nor used as a source of a
transform, auto-format answer or placeholder; only `/api/signed` with a valid signature
delivers it. Every other asset may also be fetched through a signed URL.

Tenant hosts (a zone's custom domain, or `<zone>.<base domain>`) serve that zone's files and
the shared stock pool (`stocks/...`, which every zone may use) and nothing else: another
zone's path answers exactly as a path that does not exist (404), on every delivery route.
The default host (any other Host) serves every zone.
"""

from __future__ import annotations

from assetcdn.edge.node import EdgeNode
from assetcdn.edge.site_config import serves_on_host
from assetcdn.shared.manifest import ManifestEntry, classify

PRIVATE_CATEGORY = "private"


def is_private_path(cdn_path: str) -> bool:
    return classify(cdn_path)[1] == PRIVATE_CATEGORY


def is_private(entry: ManifestEntry) -> bool:
    return entry.category == PRIVATE_CATEGORY or is_private_path(entry.path)


class SourceRefused(Exception):
    """Why a route may not use a path as a source; each route renders it in its own envelope."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}  # the answer's own fields (Retry-After of a 503)


def not_found(cdn_path: str) -> SourceRefused:
    return SourceRefused(404, "AssetNotFound", f"No asset at '/{cdn_path}'.")


def manifest_loaded(node: EdgeNode) -> None:
    """SourceRefused 503 until this edge holds a manifest (from control, or persisted before a restart):
    the one place every delivery route learns it cannot answer yet."""
    if not node.replica.loaded:
        raise SourceRefused(503, "EdgeNotReady", "This edge has not loaded the manifest yet and control "
                            "is unreachable. Retry shortly.")


def find_source(node: EdgeNode, cdn_path: str, host_zone: str | None = None, *,
                private_ok: bool = False) -> ManifestEntry:
    """The manifest entry a delivery route may read; SourceRefused 404 (unknown, another zone's on a tenant host:
    `host_zone`, assetcdn/edge/site_config.py, or a file stored in a pull zone), 403 (private, unless `private_ok`:
    a signed URL) or 503 (no manifest yet)."""
    if not serves_on_host(cdn_path, host_zone):
        raise not_found(cdn_path)
    if node.config.pull_zones and cdn_path.split("/", 1)[0] in node.config.pull_zones:
        # A zone with an origin serves its origin's paths: the files stored in it are kept but not served while it
        # pulls, by any route (a signed URL made for one before the zone got its origin included).
        raise not_found(cdn_path)
    entry = node.replica.get(cdn_path)
    if entry is None:
        manifest_loaded(node)
        raise not_found(cdn_path)
    if not private_ok and is_private(entry):
        raise SourceRefused(403, "Forbidden", f"'/{cdn_path}' is in the private category: it is served only "
                            "through a signed URL (/api/signed).")
    return entry
