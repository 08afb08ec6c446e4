"""Which assets the public delivery routes may read: everything but the `private` category.

Product decision: an asset whose category is `private` (CDN path `<zone>/v1/private/...`, or
`stocks/private/...`) is never served on its public CDN path nor used as a source of a
transform, auto-format answer or placeholder; only `/api/signed` with a valid signature
delivers it. Every other asset may also be fetched through a signed URL.
"""

from __future__ import annotations

from edge.node import EdgeNode
from shared.manifest import ManifestEntry, classify

PRIVATE_CATEGORY = "private"


def is_private_path(cdn_path: str) -> bool:
    return classify(cdn_path)[1] == PRIVATE_CATEGORY


def is_private(entry: ManifestEntry) -> bool:
    return entry.category == PRIVATE_CATEGORY or is_private_path(entry.path)


class SourceRefused(Exception):
    """Why a route may not use a path as a source; each route renders it in its own envelope."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def public_source(node: EdgeNode, cdn_path: str) -> ManifestEntry:
    """The manifest entry of a public asset; SourceRefused 404 (unknown), 403 (private) or 503 (no manifest)."""
    entry = node.replica.get(cdn_path)
    if entry is None:
        if not node.replica.loaded:
            raise SourceRefused(503, "EdgeNotReady", "This edge has not loaded the manifest yet and control "
                                "is unreachable. Retry shortly.")
        raise SourceRefused(404, "AssetNotFound", f"No asset at '/{cdn_path}'.")
    if is_private(entry):
        raise SourceRefused(403, "Forbidden", f"'/{cdn_path}' is in the private category: it is served only "
                            "through a signed URL (/api/signed).")
    return entry
