"""Transform options: the query parsed and validated once into an immutable value.

Each option is one module of this package declaring its parameters, their validation, its
part of the cache key and its pipeline steps (base.py says how); `OPTIONS` below is the one
list of them. Adding an option is a new module, a line in `OPTIONS` and one at the end of `KEY_ORDER`.

The cache key is built from this value (plus the source's content id and the resolved
output format), never from the raw query string, so `?w=400&q=80` and `?q=80&w=400&x=1`
share one entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from assetcdn.edge.negotiate import best_transform_format
from assetcdn.edge.states.keys import transform_key
from assetcdn.edge.transform.options.base import TransformOption, bad_parameter, given_twice
from assetcdn.edge.transform.options.blur import BLUR
from assetcdn.edge.transform.options.format import FORMAT
from assetcdn.edge.transform.options.quality import QUALITY
from assetcdn.edge.transform.options.resize import RESIZE
from assetcdn.edge.transform.options.rotate import ROTATE
from assetcdn.edge.transform.options.sharpen import SHARPEN
from assetcdn.edge.transform.options.trim import TRIM
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.paths import InvalidPath, check_pull_path, parse_cdn_path
from assetcdn.shared.query_params import repeated

# Every option, in the order their parameters are validated and their steps run (between the
# pipeline's decode and encode). An option whose steps change the image's shape before the resize
# comes before RESIZE.
OPTIONS: tuple[TransformOption[Any], ...] = (
    ROTATE,
    TRIM,
    RESIZE,
    FORMAT,
    QUALITY,
    BLUR,
    SHARPEN,
)
# The order their parts join the cache key, apart from OPTIONS so that reordering the steps keeps every
# stored key (tests/edge/transform/test_options.py pins them). Never reordered; a new option goes last.
KEY_ORDER: tuple[TransformOption[Any], ...] = (
    ROTATE,
    TRIM,
    RESIZE,
    FORMAT,
    QUALITY,
    BLUR,
    SHARPEN,
)
# What /api/transform reads from its query: each at most once (assetcdn/shared/query_params.py).
READ_PARAMS = frozenset(("url", *(param for option in OPTIONS for param in option.params)))

T = TypeVar("T")
MAX_URL_LENGTH = 2048
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

# Output formats the encoders always offer; a source kept "as is" maps into this set.
SOURCE_TO_OUTPUT = {
    "jpeg": "jpeg", "jpg": "jpeg", "png": "png", "webp": "webp", "gif": "gif", "avif": "avif",
    "svg": "png", "heic": "jpeg", "heif": "jpeg", "tif": "png", "tiff": "png",
}


class AssetUrlError(ValueError):
    """A `url` parameter that is not a relative asset path of this CDN.

    `kind` is "missing", "absolute", "too_long" or "invalid"; callers map it to their envelope.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def parse_source_url(raw: str | None) -> str:
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
        path = raw[1:] if raw.startswith("/") else raw
        try:
            check_pull_path(path)  # a pull zone's image may bear a name no stored file may: its route decides
        except InvalidPath:
            raise AssetUrlError("invalid", f"Parameter 'url' is not a valid asset path: {exc}") from exc
        return path


def check_stored_source(url: str) -> None:
    """AssetUrlError("invalid") when a source path `parse_source_url` took as a pull zone's name is a stored
    file's (it named no pull zone): a stored file's path keeps the stored names' rules."""
    try:
        parse_cdn_path(url)
    except InvalidPath as exc:
        raise AssetUrlError("invalid", f"Parameter 'url' is not a valid asset path: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TransformOptions:
    """The validated options of one transform: the source's path and each option's value.

    `values` holds (option name, value) pairs for the options not at their default, in OPTIONS
    order, so two requests asking for the same thing compare equal; read them with `get`.
    """

    url: str                      # CDN path, no leading slash
    values: tuple[tuple[str, object], ...] = ()

    def get(self, option: TransformOption[T]) -> T:
        for name, value in self.values:
            if name == option.name:
                return cast(T, value)   # parse_transform_options stored it from this option's parse
        return option.default

    def cache_key(self, source_id: str, output_format: str) -> str:
        """Stable key: source content id + the options that change the bytes + output format.

        The url is not part of it: assetcdn/edge/states/variant.py scopes the key to the source's path, so
        each path keeps (and purges) its own variants. Each option adds its own part, and leaves
        out what cannot change the output (fit and gravity without both sides, gravity unless
        cropping, q for png/gif).
        """
        return transform_key(source_id, (option.key(self.get(option), output_format) for option in KEY_ORDER),
                             output_format)


def parse_transform_options(query: Mapping[str, str]) -> TransformOptions:
    """Validate `/api/transform`'s query; LegacyError(400) naming the parameter on any bad value, or on one it
    reads given more than once."""
    twice = repeated(query, READ_PARAMS)
    if twice is not None:
        raise given_twice(twice)
    try:
        url = parse_source_url(query.get("url"))
    except AssetUrlError as exc:
        raise bad_parameter(exc.message) from exc
    values = []
    for option in OPTIONS:
        value = option.parse(query)
        if value != option.default:
            values.append((option.name, value))
    return TransformOptions(url=url, values=tuple(values))


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
