"""trim: cut away the border around the picture, as libvips' find_trim finds it.

`trim=<threshold>` (1-255): a pixel is border while it differs from the top-left pixel by less
than the threshold, in 8-bit levels on every band (10 suits flat backgrounds; JPEG noise
needs more). On an image whose top-left pixel is transparent, the border is the
transparent margin, whatever colour its invisible pixels hold. An image that is all border
is left as it is. Animated images lose only what is border in every frame.
The step runs before the resize, so w and h size what is left; how much that is only the
pixels tell, so a trimmed source is decoded whole and the resize planned after the trim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assetcdn.edge.transform.frames import map_frames, page_count
from assetcdn.edge.transform.options.base import Query, Size, TransformOption, int_param

if TYPE_CHECKING:
    import pyvips

    from assetcdn.edge.transform.context import TransformContext
    from assetcdn.edge.transform.source import SourceImage

Box = tuple[int, int, int, int]   # left, top, width, height
MIN_SIDE = 3    # find_trim's 3x3 median window: it refuses a narrower image ("rank: window too large")


def content_box(frame: pyvips.Image, threshold: int) -> Box | None:
    """Where the picture is in `frame`, without its border; None when `frame` is all border. A frame narrower or
    lower than find_trim reads is looked at widened with copies of its last column or row, which add nothing of
    their own, and the box found is cut back to the frame."""
    frame_width, frame_height = frame.width, frame.height
    if frame_width < MIN_SIDE or frame_height < MIN_SIDE:
        frame = frame.embed(0, 0, max(frame_width, MIN_SIDE), max(frame_height, MIN_SIDE), extend="copy")
    top_left = frame.getpoint(0, 0)
    if frame.hasalpha() and top_left[-1] < 128:
        found = frame[frame.bands - 1].find_trim(threshold=threshold, background=[top_left[-1]])
    else:
        colour = frame.extract_band(0, n=frame.bands - 1) if frame.hasalpha() else frame
        found = colour.find_trim(threshold=threshold, background=top_left[:colour.bands])
    left, top, width, height = found
    width, height = min(width, frame_width - left), min(height, frame_height - top)
    return None if width <= 0 or height <= 0 else (left, top, width, height)


def _union(boxes: list[Box]) -> Box:
    left = min(box[0] for box in boxes)
    top = min(box[1] for box in boxes)
    right = max(box[0] + box[2] for box in boxes)
    bottom = max(box[1] + box[3] for box in boxes)
    return left, top, right - left, bottom - top


def trim(ctx: TransformContext) -> None:
    threshold = ctx.opts.get(TRIM)
    if threshold is None:
        return
    # Finding the border reads every pixel, and the crop reads them again: a sequential-access
    # decode cannot be read twice, so later steps get the copy, cut or not.
    image = ctx.image = ctx.require_image().copy_memory()
    page_height = image.get_page_height()
    boxes = []
    for index in range(page_count(image)):
        ctx.check_deadline("trim")
        box = content_box(image.crop(0, index * page_height, image.width, page_height), threshold)
        if box is not None:
            boxes.append(box)
    if not boxes:
        return          # nothing but border: keep the image as it is
    left, top, width, height = _union(boxes)
    if (width, height) == (image.width, page_height):
        return
    ctx.image = map_frames(image, lambda frame: frame.crop(left, top, width, height),
                           between_frames=lambda: ctx.check_deadline("trim"))


def unknown_size(threshold: int | None, _source: SourceImage, size: Size) -> Size | None:
    return None if threshold is not None else size


def parse(query: Query) -> int | None:
    return int_param(query, "trim", 1, 255)


def key(threshold: int | None, _output_format: str) -> str:
    return "" if threshold is None else f"trim{threshold}"


TRIM: TransformOption[int | None] = TransformOption(name="trim", params=("trim",), default=None, parse=parse,
                                                    key=key, steps=(("trim", trim),), reshape=unknown_size,
                                                    unshape=unknown_size)
