"""Every cache key the edge stores under, built here only.

A key names what a response depends on. The asset's own bytes are keyed per path *and* content
(an overwrite changes the key; a purge of one path leaves another path with the same bytes alone);
a variant (a transform, a conversion, a placeholder, an HLS segment or playlist) is keyed by the source's
content id and then scoped to the source's path (`variant_key`), so purging that path's URL or tags
drops exactly its variants. Keys never hold ':' in the path part (not a path character).
A pull zone's image has no content id: its variants are keyed by its validator (`pull_source_id`) and
scoped to its URL's key (`pull_source_variant_key`).

These strings are stored on disk: changing one orphans every entry of its kind, so tests pin them
(tests/edge/transform/test_options.py, tests/edge/routes/test_serve_sequence.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from assetcdn.shared.manifest import ManifestEntry

TRANSFORM_VERSION = "tf1"
# "2": a portrait picture's placeholders are `size` wide (they were fitted into a `size` square, narrower):
# those kept before under "1" are not answered again.
PLACEHOLDER_VERSION = "2"


def asset_key(entry: ManifestEntry) -> str:
    """A path's own bytes: per path (purges and tags stay per path) and per content id."""
    return f"asset:{entry.blob_id}:{entry.path}"


def variant_key(entry: ManifestEntry, content_key: str) -> str:
    """A variant's key (one of the keys below) scoped to the source's path."""
    return f"{content_key}|{entry.path}"


def transform_key(source_id: str, option_parts: Iterable[str], output_format: str) -> str:
    """A transform or format conversion: the source's content id, each option's key part in KEY_ORDER
    (assetcdn/edge/transform/options/__init__.py; empty parts, options at their default, add nothing) and
    the output format."""
    spec = "-".join(part for part in option_parts if part) or "orig"
    return f"{TRANSFORM_VERSION}/{source_id}/{spec}.{output_format}"


def placeholder_key(kind: str, source_id: str, size: int, blur: int | None) -> str:
    """An lqip or blurhash placeholder (`kind`) of the source's content at `size` (and `blur`)."""
    spec = f"s{size}" + (f"-b{blur}" if blur is not None else "")
    return f"{kind}{PLACEHOLDER_VERSION}/{source_id}/{spec}"


def as_is_check_key(source_id: str, output_format: str) -> str:
    """The check that a pull zone's image may be answered as it is in `output_format` by /api/auto (what its bytes
    are, within the bounds of their conversion to it), of the source's content."""
    return f"asis1/{source_id}/{output_format}"


def segment_key(source_id: str, index: int) -> str:
    """HLS segment `index` of a rendition file, cut from the rendition's cached bytes."""
    return f"segment:{source_id}:{index}"


def playlist_key(index_id: str, quality: int | None) -> str:
    """An HLS playlist built from a video's index: the master one (`quality` None) or one rendition's."""
    return f"playlist:{index_id}:{quality if quality is not None else 'master'}"


PULL_KEY_PREFIX = "pull:"  # every pull zone key starts with it: what a soft purge keeps and marks stale


def pull_key(zone: str, path: str, query: str, scheme: str = "http") -> str:
    """A pull zone's URL (its percent-encoded path and query as requested) and the scheme it was asked over:
    hashed, so that any URL makes a key of one length with no ':' in it. The origin is told the scheme
    (X-Forwarded-Proto) and may answer it differently (a redirect of plain HTTP to https), so an https URL has a
    key of its own; a plain HTTP one keeps the key it had before the scheme counted."""
    url = f"{zone}{path}?{query}" if query else f"{zone}{path}"
    if scheme == "https":
        url = "https:" + url  # no zone name holds ':'
    return f"{PULL_KEY_PREFIX}{hashlib.sha256(url.encode('utf-8', 'surrogateescape')).hexdigest()[:40]}"


def pull_variant_key(url_key: str, selector: str) -> str:
    """One response of a pull zone's URL that varies (the request fields its Vary names select it), or
    another thing kept per URL (`selector`)."""
    return f"{url_key}|{hashlib.sha256(selector.encode('utf-8', 'surrogateescape')).hexdigest()[:24]}"


def pull_source_id(etag: str | None, last_modified: str | None, size: int, body_sha256: str | None = None) -> str:
    """What names a pull zone image's content in its variants' keys, as imgproxy keys an HTTP source: its
    strong ETag, else its Last-Modified and length (and its weak ETag, when it has one: a file replaced within
    Last-Modified's second by one of the same length changes only that), else the SHA-256 of its body
    (`body_sha256`, needed only then). A new validator from the origin makes new keys."""
    if etag is not None and not etag.startswith("W/"):
        basis = f"etag\n{etag}"
    elif last_modified is not None:
        basis = f"modified\n{last_modified}\n{size}" + (f"\n{etag}" if etag is not None else "")
    elif body_sha256 is not None:
        basis = f"sha256\n{body_sha256}"
    else:
        raise ValueError("a source without ETag or Last-Modified is named by its body's SHA-256")
    return "p" + hashlib.sha256(basis.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def pull_source_variant_key(url_key: str, content_key: str) -> str:
    """A variant (`transform_key`, `placeholder_key` of a `pull_source_id`) of a pull zone's image, kept
    under its URL's key (`pull_key`)."""
    return pull_variant_key(url_key, f"variant\n{content_key}")


def pull_variants_made_key(url_key: str) -> str:
    """The `pull_source_id` a pull zone image's variants were last made from (to retire them when it changes)."""
    return pull_variant_key(url_key, "variants-made-from")
