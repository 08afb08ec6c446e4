"""Animated images in libvips are one tall strip of frames ('page-height' high each).

Operations that look at neighbouring pixels (crop, blur, sharpen) must run per frame, or they
would bleed one frame into the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyvips


def page_count(image: pyvips.Image) -> int:
    page_height = image.get_page_height()
    return image.height // page_height if page_height else 1


def first_frame(image: pyvips.Image) -> pyvips.Image:
    page_height = image.get_page_height()
    return image.crop(0, 0, image.width, page_height) if page_height < image.height else image


def join_frames(frames: list[pyvips.Image]) -> pyvips.Image:
    """Stack frames back into a strip; delay and loop metadata ride on the first frame."""
    import pyvips  # noqa: PLC0415 (the edge's own process loads this module, never libvips: see image_pool.py)

    if len(frames) == 1:
        return frames[0]
    strip = pyvips.Image.arrayjoin(frames, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", frames[0].height)
    return strip


def map_frames(image: pyvips.Image, operation: Callable[[pyvips.Image], pyvips.Image], *,
               between_frames: Callable[[], None] | None = None) -> pyvips.Image:
    """`operation` applied to each frame on its own; `between_frames` runs before each (a deadline check).

    Frames are rendered one at a time into memory. Left lazy, every frame would be its own
    libvips pipeline with its own buffers, all alive at once when the strip is encoded, which
    took an order of magnitude more memory on a long GIF (benchmarks/ARCHIVE.md, "Figures behind
    comments in the source").
    """
    count = page_count(image)
    if count == 1:
        return operation(image)
    strip = image.copy_memory()
    page_height = strip.get_page_height()
    frames = []
    for index in range(count):
        if between_frames is not None:
            between_frames()
        frames.append(operation(strip.crop(0, index * page_height, strip.width, page_height)).copy_memory())
    return join_frames(frames)
