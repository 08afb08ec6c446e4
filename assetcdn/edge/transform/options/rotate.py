"""rotate: the image turned clockwise by 90, 180 or 270 degrees, after its EXIF orientation.

Cameras store pixels as the sensor read them, with an EXIF Orientation tag saying how to show
them. Browsers honour the tag, but the encoders strip metadata, so this step applies it to
the pixels on every transform, asked for or not, and then turns the image by `rotate`
(0 is accepted and does nothing). w and h are the output's axes, after rotation, as in
Cloudflare's and imgproxy's rotate: a quarter turn swaps which side of the source they size.
The step runs before the resize; the decode shrinks on load to the size before rotation, so
a rotated photo costs no more to decode than an upright one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assetcdn.edge.transform.frames import map_frames
from assetcdn.edge.transform.options.base import Query, Size, TransformOption, enum_param

if TYPE_CHECKING:
    import pyvips

    from assetcdn.edge.transform.context import TransformContext
    from assetcdn.edge.transform.source import SourceImage

ANGLES = ("0", "90", "180", "270")
# EXIF orientations 5-8 store the picture transposed: shown upright, its width is its height.
TRANSPOSED_ORIENTATIONS = frozenset({5, 6, 7, 8})


def upright(frame: pyvips.Image, orientation: int) -> pyvips.Image:
    """`frame` as its EXIF orientation (1-8) says it is shown; the tag is gone afterwards."""
    import pyvips  # noqa: PLC0415 (the edge's own process loads this module, never libvips: see image_pool.py)

    tagged = frame.copy()
    tagged.set_type(pyvips.GValue.gint_type, "orientation", orientation)
    return tagged.autorot()


def turn(frame: pyvips.Image, angle: int) -> pyvips.Image:
    return frame.rot(f"d{angle}") if angle else frame


def rotate(ctx: TransformContext) -> None:
    angle = ctx.opts.get(ROTATE)
    orientation = ctx.source.orientation
    if angle == 0 and orientation == 1:
        return
    # Rotating reads the rows out of order, which a sequential-access decode cannot give.
    image = ctx.require_image().copy_memory()
    ctx.image = map_frames(image, lambda frame: turn(upright(frame, orientation), angle),
                           between_frames=lambda: ctx.check_deadline("rotate"))


def swaps_sides(angle: int, source: SourceImage) -> bool:
    return (angle in (90, 270)) != (source.orientation in TRANSPOSED_ORIENTATIONS)


def reshape(angle: int, source: SourceImage, size: Size) -> Size:
    width, height = size
    return (height, width) if swaps_sides(angle, source) else size


def parse(query: Query) -> int:
    return int(enum_param(query, "rotate", ANGLES) or 0)


def key(angle: int, _output_format: str) -> str:
    return f"rot{angle}" if angle else ""


# A quarter turn is its own inverse as far as the size goes: unshape is reshape.
ROTATE: TransformOption[int] = TransformOption(name="rotate", params=("rotate",), default=0, parse=parse, key=key,
                                               steps=(("rotate", rotate),), reshape=reshape, unshape=reshape)
