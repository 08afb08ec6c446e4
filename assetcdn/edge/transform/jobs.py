"""The work the image pool runs in its worker processes, one function per kind of variant.

A job is sent to a worker by reference (module and name, pickled) with plain arguments, the
source's bytes last, and returns the Variant to cache. A transform is also told the source's SHA-256
as the manifest names it (the edge checked the bytes against it when it fetched them), so the
worker keys its kept decodes without hashing the bytes again. Nothing here may close over request
state: it runs in another process.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import orjson

from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.decoded import DecodedSources
from assetcdn.edge.transform.options import TransformOptions
from assetcdn.shared.timestamps import utc_now_iso

# The pixel work (assetcdn/edge/transform/steps.py, placeholder_images.py and the codecs they load) is
# imported inside the jobs: an image worker loads it before it reports ready (PRELOAD in
# assetcdn/edge/image_pool.py), and the edge process, which only names the jobs, never does.

JSON = "application/json"
# The decodes this process keeps for a picture's other variants: bounded by the image pool when it
# starts a worker ([transform] decoded_cache_mb), off (0 bytes) in any other process.
DECODED_SOURCES = DecodedSources(0)
MAX_SVG_FILTER_PIXELS = TransformLimits().max_svg_filter_pixels   # a placeholder job's bound when none is given


@dataclass(frozen=True, slots=True)
class Variant:
    """What a job returns: the bytes to cache and their type. Defined here, not beside the miss
    that caches it (assetcdn/edge/states/variant.py), so a worker loads no more than the jobs."""

    body: bytes
    content_type: str


def keep_decoded_sources(max_bytes: int) -> None:
    """Run by each image worker as it starts (assetcdn/edge/image_pool.py)."""
    DECODED_SOURCES.set_bound(max_bytes)


def transform_variant(source_format: str, opts: TransformOptions, output_format: str,
                      limits: TransformLimits, source: bytes, *, source_sha256: str | None = None) -> Variant:
    """/api/transform and /api/auto conversions: the pipeline's output. `source_sha256`: the hex
    SHA-256 the source's bytes were verified against (None: the worker hashes them)."""
    from assetcdn.edge.transform.steps import run_transform  # noqa: PLC0415 (see above)

    digest = bytes.fromhex(source_sha256) if source_sha256 is not None else None
    result = run_transform(source, source_format, opts, output_format, limits, DECODED_SOURCES, digest)
    return Variant(result.body, result.content_type)


def checked_as_is(source_format: str, output_format: str, limits: TransformLimits, source: bytes) -> Variant:
    """/api/auto of a pull zone's image it may send as it is (assetcdn/edge/states/pull_variant.py `AsItIs`): what
    the bytes are, read from their header as a transform reads them (its format's name, the body), within the
    bounds a conversion of them to `output_format` has (`check_source`): its LegacyError (415, 422) past one."""
    from assetcdn.edge.transform.source import read_source  # noqa: PLC0415 (see above)
    from assetcdn.edge.transform.steps import check_source  # noqa: PLC0415

    image_source = read_source(source, source_format)
    # An SVG sent as it is is drawn by the browser at the page's size: no pixels of it are made here.
    check_source(image_source, output_format, limits, rendered_at_size=output_format == "svg")
    return Variant(image_source.format.encode(), "text/plain")


def _data_uri(webp: bytes) -> str:
    return "data:image/webp;base64," + base64.b64encode(webp).decode("ascii")


def lqip_variant(source_format: str, size: int, blur: int, max_pixels: int, source: bytes, *,
                 max_svg_filter_pixels: int = MAX_SVG_FILTER_PIXELS) -> Variant:
    """/api/lqip's JSON: a `size`-px-wide WebP blurred by `blur`, as a data URI. `max_svg_filter_pixels`: the
    transforms' bound ([transform] max_svg_filter_pixels)."""
    from assetcdn.edge.transform.placeholder_images import make_lqip  # noqa: PLC0415 (see above)

    webp, width = make_lqip(source, source_format, size, blur, max_pixels=max_pixels,
                            max_svg_filter_pixels=max_svg_filter_pixels)
    return Variant(orjson.dumps({"lqip": _data_uri(webp), "bytes": len(webp), "width": width,
                                 "dateGenerated": utc_now_iso()}), JSON)


def blurhash_variant(source_format: str, size: int, max_pixels: int, source: bytes, *,
                     max_svg_filter_pixels: int = MAX_SVG_FILTER_PIXELS) -> Variant:
    """/api/blurhash's JSON (the route adds `url` and `source`); `max_svg_filter_pixels` as lqip_variant's."""
    from assetcdn.edge.transform.placeholder_images import make_blurhash_placeholder  # noqa: PLC0415

    webp, width, real_blurhash = make_blurhash_placeholder(source, source_format, size, max_pixels=max_pixels,
                                                           max_svg_filter_pixels=max_svg_filter_pixels)
    # `hash` is what the original service called its blurhash: the SHA-256 prefix of the WebP.
    return Variant(orjson.dumps({"hash": hashlib.sha256(webp).hexdigest()[:40], "dataUri": _data_uri(webp),
                                 "width": width, "bytes": len(webp), "dateGenerated": utc_now_iso(),
                                 "blurhash": real_blurhash}), JSON)
