"""The query of /api/lqip and /api/blurhash: the source's path, `size` and (lqip only) `blur`.

Both endpoints use the standard error envelope, hence ApiError here. Kept apart from the pixel work
(assetcdn/edge/transform/placeholder_images.py), which only the image workers load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from assetcdn.edge.transform.options import AssetUrlError, parse_source_url
from assetcdn.shared.decimal_fields import bounded_decimal
from assetcdn.shared.errors import ApiError
from assetcdn.shared.query_params import repeated

SIZE_RANGE = (8, 64)
BLUR_RANGE = (1, 250)
DEFAULT_SIZE = 32
DEFAULT_BLUR = 30
READ_PARAMS = frozenset(("url", "size", "blur"))   # each at most once (assetcdn/shared/query_params.py)
_URL_ERROR_CODES = {"missing": "MissingUrl", "absolute": "AbsoluteUrlForbidden",
                    "too_long": "UrlTooLong", "invalid": "InvalidUrl"}


@dataclass(frozen=True, slots=True)
class PlaceholderParams:
    url: str              # CDN path, no leading slash
    size: int
    blur: int | None      # None for blurhash (its blur is fixed)


def _parse_int(query: Mapping[str, str], name: str, bounds: tuple[int, int], default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    low, high = bounds
    # Digits alone (not " 16", which size=+16 is, nor "+16"); "²".isdigit() is True; past `high`, the digits are
    # not converted (int() refuses more than 4,300).
    if not (raw.isascii() and raw.isdigit()) or not low <= (number := bounded_decimal(raw, high + 1)) <= high:
        raise ApiError(400, "InvalidParameter",
                       f"Parameter '{name}' must be an integer from {low} to {high} (default {default}); got '{raw}'.",
                       target=name)
    return number


def parse_placeholder_params(query: Mapping[str, str], *, with_blur: bool) -> PlaceholderParams:
    """Validate lqip (`with_blur=True`) or blurhash query parameters; ApiError(400) on bad input, or on one
    given more than once."""
    twice = repeated(query, READ_PARAMS)
    if twice is not None:
        raise ApiError(400, "InvalidParameter", f"Parameter '{twice}' is given more than once; give it once.",
                       target=twice)
    try:
        url = parse_source_url(query.get("url"))
    except AssetUrlError as exc:
        raise ApiError(400, _URL_ERROR_CODES[exc.kind], exc.message, target="url") from exc
    size = _parse_int(query, "size", SIZE_RANGE, DEFAULT_SIZE)
    blur = _parse_int(query, "blur", BLUR_RANGE, DEFAULT_BLUR) if with_blur else None
    return PlaceholderParams(url=url, size=size, blur=blur)
