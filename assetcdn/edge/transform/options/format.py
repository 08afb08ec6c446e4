"""format: the output format asked for; `auto` negotiates by Accept, absent keeps the source's.

The route resolves it to a concrete format (resolve_output_format in __init__.py), which ends
the cache key as its extension, so this option adds no key part of its own and no step (the
encode step at the end of the pipeline writes the format).
"""

from __future__ import annotations

from typing import Literal, cast

from assetcdn.edge.transform.options.base import Query, TransformOption, enum_param

RequestedFormat = Literal["webp", "avif", "png", "jpeg", "auto"]
FORMATS: tuple[RequestedFormat, ...] = ("webp", "avif", "png", "jpeg", "auto")


def parse(query: Query) -> RequestedFormat | None:
    return cast(RequestedFormat | None, enum_param(query, "format", FORMATS))


FORMAT: TransformOption[RequestedFormat | None] = TransformOption(name="format", params=("format",), default=None, parse=parse)
