"""format: the output format asked for; `auto` negotiates by Accept, absent keeps the source's.

The route resolves it to a concrete format (resolve_output_format in __init__.py), which ends
the cache key as its extension, so this option adds no key part of its own and no step (the
encode step at the end of the pipeline writes the format).
"""

from __future__ import annotations

from typing import Literal, cast

from assetcdn.edge.transform.options.base import Query, TransformOption, enum_param
from assetcdn.shared.errors import LegacyError

RequestedFormat = Literal["webp", "avif", "png", "jpeg", "auto"]
FORMATS: tuple[RequestedFormat, ...] = ("webp", "avif", "png", "jpeg", "auto")


_ASK_ANOTHER = "Ask for a smaller w or h, or another format."


def side_too_long(name: str, most: int, width: int, height: int) -> LegacyError:
    """The encoder's refusal of an output with a side longer than its format holds (assetcdn/edge/transform/encode.py)."""
    return LegacyError(422, f"{name} holds at most {most} pixels a side, and the output would be {width}x{height}. "
                       + _ASK_ANOTHER)


def is_side_too_long(exc: LegacyError) -> bool:
    """Whether a variant's refusal (made now, or remembered) is `side_too_long`'s: format=auto then asks again for
    a format that holds the output."""
    return exc.status == 422 and exc.error.endswith(_ASK_ANOTHER)


def parse(query: Query) -> RequestedFormat | None:
    return cast(RequestedFormat | None, enum_param(query, "format", FORMATS))


FORMAT: TransformOption[RequestedFormat | None] = TransformOption(name="format", params=("format",), default=None, parse=parse)
