"""Format negotiation: which image format a client gets, from its request headers.

Pure functions over header values; the HTTP layer passes them in and writes `Vary` and
`X-Network-Aware` from the constants and `is_slow_network` here.

Rules (docs/api-guide.md "Image delivery", `/api/auto`):
- still chain, in order: jxl, avif, heic, heif, webp, png, svg. jxl, avif, heic and heif only
  when their MIME type is named in Accept; webp when `image/webp`, `image/*` or `*/*` is
  acceptable; png and svg always (universal fallbacks).
- animated chain (`anim=1`): avifs, webp, apng, gif. avifs when `image/avif-sequence` or
  `image/avif` is named; webp as above; apng only when `image/apng` is named; gif always.
- `Save-Data: on`, or `Sec-CH-Effective-Connection-Type` slow-2g, 2g or 3g: drop jxl and avif
  (and avifs: the reason, decode cost on slow devices, is the same) and answer
  `X-Network-Aware: slow`.
- path route: chain avif, webp, png, svg gated by Accept alone (its Vary is only Accept, so it
  must not look at Save-Data or ECT).

Accept is parsed as RFC 9110 media ranges: the most specific matching range decides, and
`q=0` refuses a type even when a wildcard would allow it. An empty or absent Accept
header names nothing, so only the universal fallbacks are served (the original service
did the same: it tests the header text).
"""

from __future__ import annotations

from dataclasses import dataclass

VARY_QUERY_ROUTE = "Accept, Save-Data, Sec-CH-Effective-Connection-Type"
VARY_PATH_ROUTE = "Accept"
NETWORK_AWARE_HEADER = "X-Network-Aware"
NETWORK_AWARE_SLOW = "slow"

STILL_ORDER = ("jxl", "avif", "heic", "heif", "webp", "png", "svg")
ANIMATED_ORDER = ("avifs", "webp", "apng", "gif")
PATH_ROUTE_CHAIN = ("avif", "webp", "png", "svg")

SLOW_EFFECTIVE_CONNECTION_TYPES = frozenset({"slow-2g", "2g", "3g"})
DROPPED_WHEN_SLOW = frozenset({"jxl", "avif", "avifs"})

# Content-Type to answer with for each chain entry. Animated AVIF is served as image/avif,
# the registered type every AVIF-capable browser sniffs sequences under.
FORMAT_MIME = {
    "jxl": "image/jxl", "avif": "image/avif", "avifs": "image/avif", "heic": "image/heic",
    "heif": "image/heif", "webp": "image/webp", "png": "image/png", "svg": "image/svg+xml",
    "apng": "image/apng", "gif": "image/gif", "jpeg": "image/jpeg",
}

# Types served only when the client names them (they opt in).
EXPLICIT_ONLY = {"jxl": ("image/jxl",), "avif": ("image/avif",), "heic": ("image/heic",),
                 "heif": ("image/heif",), "avifs": ("image/avif-sequence", "image/avif"),
                 "apng": ("image/apng",)}
ALWAYS = frozenset({"png", "svg", "gif"})

# Source formats that may carry transparency (format=auto then falls back to png, not jpeg)
# and those that may be animated (format=auto then avoids avif, which keeps one frame).
ALPHA_CAPABLE_SOURCES = frozenset({"png", "webp", "gif", "svg", "avif", "heic", "heif", "tif", "tiff", "jxl"})
ANIMATION_CAPABLE_SOURCES = frozenset({"gif", "webp"})


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str      # "image/webp", "image/*" or "*/*", lower-cased
    q: float


def parse_accept(accept: str | None) -> tuple[MediaRange, ...]:
    """Media ranges of an Accept header; malformed parts are skipped, a bad q counts as 1."""
    ranges: list[MediaRange] = []
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if "/" not in media:
            continue
        q = 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 1.0
        ranges.append(MediaRange(media, q))
    return tuple(ranges)


def _quality_for(ranges: tuple[MediaRange, ...], mime: str, *, wildcards: bool) -> float:
    """q of `mime`: the exact range wins over `image/*`, which wins over `*/*` (RFC 9110 12.5.1)."""
    major = mime.split("/", 1)[0] + "/*"
    candidates = (mime, major, "*/*") if wildcards else (mime,)
    for candidate in candidates:
        for media_range in ranges:
            if media_range.type == candidate:
                return media_range.q
    return 0.0


def accepts(accept: str | None, mime: str, *, wildcards: bool = True) -> bool:
    """Whether `mime` is acceptable; with wildcards=False it must be named explicitly."""
    return _quality_for(parse_accept(accept), mime, wildcards=wildcards) > 0.0


def is_slow_network(save_data: str | None, ect: str | None) -> bool:
    """Save-Data: on, or an effective connection type of slow-2g, 2g or 3g."""
    if save_data is not None and save_data.strip().lower() == "on":
        return True
    return ect is not None and ect.strip().lower() in SLOW_EFFECTIVE_CONNECTION_TYPES


def _allowed(fmt: str, ranges: tuple[MediaRange, ...]) -> bool:
    if fmt in ALWAYS:
        return True
    explicit = EXPLICIT_ONLY.get(fmt)
    if explicit is not None:
        # Explicitly named with q > 0; an explicit q=0 on one name does not cancel the other.
        return any(_quality_for(ranges, mime, wildcards=False) > 0.0 for mime in explicit)
    return _quality_for(ranges, FORMAT_MIME[fmt], wildcards=True) > 0.0


def _chain(order: tuple[str, ...], accept: str | None, slow: bool) -> list[str]:
    ranges = parse_accept(accept)
    return [fmt for fmt in order
            if not (slow and fmt in DROPPED_WHEN_SLOW) and _allowed(fmt, ranges)]


def still_chain(accept: str | None, save_data: str | None = None, ect: str | None = None) -> list[str]:
    """Still-image formats to probe, best first. Check `is_slow_network` for X-Network-Aware."""
    return _chain(STILL_ORDER, accept, is_slow_network(save_data, ect))


def animated_chain(accept: str | None, save_data: str | None = None, ect: str | None = None) -> list[str]:
    """Animated formats to probe for `anim=1`, best first."""
    return _chain(ANIMATED_ORDER, accept, is_slow_network(save_data, ect))


def path_route_chain(accept: str | None) -> list[str]:
    """Chain of `/api/auto/{path}`: avif, webp, png, svg gated by Accept only (Vary: Accept)."""
    return _chain(PATH_ROUTE_CHAIN, accept, slow=False)


def best_transform_format(accept: str | None, source_format: str, *, slow: bool = False) -> str:
    """Output format for `/api/transform?format=auto`, decided without reading the source bytes.

    avif when named in Accept (not for gif/webp sources, which may be animated and avif output
    keeps one frame), else webp when acceptable, else gif for gif sources (keeps animation),
    png for sources that may have alpha, jpeg otherwise. `slow` (the caller's
    `is_slow_network`) skips avif; a caller that passes it must Vary on Save-Data and ECT.
    """
    source = source_format.lower()
    ranges = parse_accept(accept)
    if not slow and source not in ANIMATION_CAPABLE_SOURCES and _allowed("avif", ranges):
        return "avif"
    if _allowed("webp", ranges):
        return "webp"
    return universal_format(source)


def universal_format(source_format: str) -> str:
    """What `format=auto` gives a client that takes neither AVIF nor WebP (every client takes it): gif for a gif
    source (keeps its animation), png for a source that may have alpha, jpeg otherwise. Also its answer when the
    output has a side longer than AVIF or WebP holds (assetcdn/edge/routes/transform.py)."""
    source = source_format.lower()
    if source == "gif":
        return "gif"
    return "png" if source in ALPHA_CAPABLE_SOURCES else "jpeg"
