"""Transform options: the query parsed and validated once into an immutable value.

The cache key is built from this value (plus the source's content id and the resolved
output format), never from the raw query string, so `?w=400&q=80` and `?q=80&w=400&x=1`
share one entry.

Defaults: `fit=cover` (with both w and h the answer is exactly w x h, what a caller asking for
a 400x300 thumbnail expects; `contain` must be asked for), `gravity=center`. `fit` and
`gravity` only matter when both w and h are given; the cache key drops them otherwise.
`inside` is `contain` by another name (within w x h, aspect kept, no padding); `outside` is
`cover` without the crop. Gravity takes the nine compass points (`north` keeps the top edge,
`southeast` the bottom-right corner...), `face` and `auto`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from edge.negotiate import best_transform_format
from shared.errors import LegacyError
from shared.paths import InvalidPath, parse_cdn_path

Fit = Literal["cover", "contain", "fill", "inside", "outside"]
Gravity = Literal["center", "north", "south", "east", "west", "northeast", "northwest", "southeast",
                  "southwest", "face", "auto"]
RequestedFormat = Literal["webp", "avif", "png", "jpeg", "auto"]

FITS: tuple[Fit, ...] = ("cover", "contain", "fill", "inside", "outside")
# In the order the published API documents them.
GRAVITIES: tuple[Gravity, ...] = ("center", "north", "south", "east", "west", "northeast", "northwest",
                                  "southeast", "southwest", "face", "auto")
# Fits that give the same pixels share one cache entry.
_SAME_OUTPUT_FIT = {"inside": "contain"}
FORMATS: tuple[RequestedFormat, ...] = ("webp", "avif", "png", "jpeg", "auto")
# Spec "Limits": w, h 1-8192; q 1-100; blur 1-250; sharpen 1-10.
INT_RANGES = {"w": (1, 8192), "h": (1, 8192), "q": (1, 100), "blur": (1, 250), "sharpen": (1, 10)}
MAX_URL_LENGTH = 2048
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_INTEGER = re.compile(r"^\+?[0-9]{1,6}\Z")

# Output formats the encoders always offer; a source kept "as is" maps into this set.
SOURCE_TO_OUTPUT = {
    "jpeg": "jpeg", "jpg": "jpeg", "png": "png", "webp": "webp", "gif": "gif", "avif": "avif",
    "svg": "png", "heic": "jpeg", "heif": "jpeg", "tif": "png", "tiff": "png",
}
# Formats whose encoder takes a quality; for the others q does not change the bytes.
LOSSY_OUTPUTS = frozenset({"jpeg", "webp", "avif", "heic", "jxl"})


class AssetUrlError(ValueError):
    """A `url` parameter that is not a relative asset path of this CDN.

    `kind` is "missing", "absolute", "too_long" or "invalid"; callers map it to their envelope.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def parse_asset_url(raw: str | None) -> str:
    """Validate the `url` parameter shared by transform, lqip and blurhash; return it without a leading '/'."""
    if raw is None or raw.strip() == "":
        raise AssetUrlError("missing", "Missing required parameter: url")
    if len(raw) > MAX_URL_LENGTH:
        raise AssetUrlError("too_long", f"Parameter 'url' is longer than {MAX_URL_LENGTH} characters.")
    if raw.startswith("//") or _SCHEME.match(raw):
        raise AssetUrlError("absolute", "Parameter 'url' must be a relative asset path of this CDN "
                            "(e.g. /<zone>/v1/logos/logo.svg), not an absolute URL.")
    try:
        return parse_cdn_path(raw)
    except InvalidPath as exc:
        raise AssetUrlError("invalid", f"Parameter 'url' is not a valid asset path: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TransformOptions:
    url: str                      # CDN path, no leading slash
    width: int | None = None
    height: int | None = None
    fit: Fit = "cover"
    format: RequestedFormat | None = None   # None: keep the source's format (see resolve_output_format)
    quality: int | None = None    # None: the encoder's default for the output format
    blur: int | None = None
    sharpen: int | None = None
    gravity: Gravity = "center"

    @property
    def crops(self) -> bool:
        """Whether a crop happens: cover with both sides given."""
        return self.fit == "cover" and self.width is not None and self.height is not None

    def cache_key(self, source_id: str, output_format: str) -> str:
        """Stable key: source content id + the options that change the bytes + output format.

        The url is not part of it: edge/states/variant.py scopes the key to the source's path, so
        each path keeps (and purges) its own variants. Options that cannot change the output
        (fit and gravity without both sides, gravity unless cropping, q for png/gif) are
        normalised away.
        """
        parts = [f"w{self.width}" if self.width else "", f"h{self.height}" if self.height else ""]
        if self.width is not None and self.height is not None:
            parts.append(_SAME_OUTPUT_FIT.get(self.fit, self.fit))
            if self.crops:
                parts.append(f"g-{self.gravity}")
        if self.quality is not None and output_format in LOSSY_OUTPUTS:
            parts.append(f"q{self.quality}")
        if self.blur is not None:
            parts.append(f"blur{self.blur}")
        if self.sharpen is not None:
            parts.append(f"sharpen{self.sharpen}")
        spec = "-".join(p for p in parts if p) or "orig"
        return f"tf1/{source_id}/{spec}.{output_format}"


def _bad(message: str) -> LegacyError:
    return LegacyError(400, message)


def _parse_int(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    low, high = INT_RANGES[name]
    text = raw.strip()
    if not _INTEGER.match(text) or not low <= int(text) <= high:
        raise _bad(f"Invalid parameter '{name}': '{raw}'. Must be an integer from {low} to {high}.")
    return int(text)


def _parse_enum(query: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    raw = query.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value == "jpg" and "jpeg" in allowed:
        value = "jpeg"
    if value not in allowed:
        raise _bad(f"Invalid parameter '{name}': '{raw}'. Allowed values: {', '.join(allowed)}.")
    return value


def parse_transform_options(query: Mapping[str, str]) -> TransformOptions:
    """Validate `/api/transform`'s query; LegacyError(400) naming the parameter on any bad value."""
    try:
        url = parse_asset_url(query.get("url"))
    except AssetUrlError as exc:
        raise _bad(exc.message) from exc
    return TransformOptions(
        url=url,
        width=_parse_int(query, "w"),
        height=_parse_int(query, "h"),
        fit=cast(Fit, _parse_enum(query, "fit", FITS) or "cover"),
        format=cast(RequestedFormat | None, _parse_enum(query, "format", FORMATS)),
        quality=_parse_int(query, "q"),
        blur=_parse_int(query, "blur"),
        sharpen=_parse_int(query, "sharpen"),
        gravity=cast(Gravity, _parse_enum(query, "gravity", GRAVITIES) or "center"),
    )


def resolve_output_format(requested: str | None, source_format: str, accept: str | None, *,
                          slow: bool = False) -> str:
    """Concrete output format for a request: the explicit one, `auto` by Accept, None = the source's.

    None keeps the source format when it can be encoded (svg and tiff become png, heic and
    heif jpeg, since browsers cannot show them); an unknown source format raises 415.
    """
    source = source_format.lower()
    if requested is not None and requested != "auto":
        return requested
    if requested == "auto":
        return best_transform_format(accept, source, slow=slow)
    try:
        return SOURCE_TO_OUTPUT[source]
    except KeyError:
        raise LegacyError(415, f"Cannot transform a '{source_format}' source: supported source "
                          f"formats are {', '.join(sorted(SOURCE_TO_OUTPUT))}.") from None
