"""What a transform option module declares, and the parsers the modules share.

An option is one module in this package holding one `TransformOption`: the query parameters it
reads and how they are validated (`parse`), the part it adds to the variant's cache key (`key`),
the pipeline steps that apply it (`steps`) and, for an option that changes the image's shape
before the resize, how (`reshape` / `unshape`). `OPTIONS` in `__init__.py` lists them; parsing,
the pipeline's steps and its size planning iterate that list, in its order; the cache key's parts
follow `KEY_ORDER` there, which never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from assetcdn.shared.errors import LegacyError

if TYPE_CHECKING:
    from assetcdn.edge.transform.context import TransformContext
    from assetcdn.edge.transform.source import SourceImage

T = TypeVar("T")
Size = tuple[int, int]
Step = Callable[["TransformContext"], None]
Query = Mapping[str, str]

MAX_DIGITS = 6   # an integer parameter's digits (leading zeros included); more is refused unread


def _no_key(_value: object, _output_format: str) -> str:
    return ""


def _same_size(_value: object, _source: SourceImage, size: Size) -> Size | None:
    return size


@dataclass(frozen=True, slots=True)
class TransformOption(Generic[T]):
    """One option of /api/transform, declared in one module.

    - name: where its value is kept in TransformOptions (one value per option, even when it
      reads several parameters).
    - params: the query parameters it reads, in the order it validates them.
    - parse: the value from the query (`default` when absent); LegacyError(400) naming the
      parameter on a bad value.
    - key: its part of the cache key ("" adds nothing) for a value and the output format; an
      option whose default adds nothing keeps every existing key when it is added.
    - steps: (name, step) pairs run by the pipeline, in OPTIONS order; a step does nothing when
      its option is not asked for. The name is what a budget or decode error reports.
    - reshape: the image's size after this option's steps from its size before, read from the
      source's header only; None when only the pixels tell (the pipeline then decodes the whole
      source and plans the resize once the steps before it ran). Options whose steps run after
      the resize keep the default (size unchanged).
    - unshape: the inverse, for decoding straight at the size the resize will want.
    """

    name: str
    params: tuple[str, ...]
    default: T
    parse: Callable[[Query], T]
    key: Callable[[T, str], str] = _no_key
    steps: tuple[tuple[str, Step], ...] = ()
    reshape: Callable[[T, SourceImage, Size], Size | None] = _same_size
    unshape: Callable[[T, SourceImage, Size], Size | None] = _same_size


def bad_parameter(message: str) -> LegacyError:
    return LegacyError(400, message)


def given_twice(name: str) -> LegacyError:
    return bad_parameter(f"Parameter '{name}' is given more than once; give it once.")


def int_param(query: Query, name: str, low: int, high: int) -> int | None:
    """An integer parameter within [low, high]; None when absent."""
    raw = query.get(name)
    if raw is None:
        return None
    # Digits alone: not " 5" (w=+5 or w=%205 in the URL), nor "+5"; each would be a variant URL of its own.
    if not (len(raw) <= MAX_DIGITS and raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise bad_parameter(f"Invalid parameter '{name}': '{raw}'. Must be an integer from {low} to {high}.")
    return int(raw)


def enum_param(query: Query, name: str, allowed: tuple[str, ...]) -> str | None:
    """One of `allowed` (ASCII case-insensitive; `jpg` is `jpeg`); None when absent."""
    raw = query.get(name)
    if raw is None:
        return None
    # As it is: not " cover" (fit=%20cover in the URL), which would be a variant URL of its own, as int_param's.
    value = raw.lower() if raw.isascii() else raw
    if value == "jpg" and "jpeg" in allowed:
        value = "jpeg"
    if value not in allowed:
        raise bad_parameter(f"Invalid parameter '{name}': '{raw}'. Allowed values: {', '.join(allowed)}.")
    return value
