"""Animated images in libvips are one tall strip of frames ('page-height' high each).

Operations that look at neighbouring pixels (crop, blur, sharpen) must run per frame, or they
would bleed one frame into the next.
"""

from __future__ import annotations

from collections.abc import Callable

import pyvips


def page_count(image: pyvips.Image) -> int:
    page_height = image.get_page_height()
    return image.height // page_height if page_height else 1


def split_frames(image: pyvips.Image) -> list[pyvips.Image]:
    page_height = image.get_page_height()
    return [image.crop(0, i * page_height, image.width, page_height) for i in range(page_count(image))]


def join_frames(frames: list[pyvips.Image]) -> pyvips.Image:
    """Stack frames back into a strip; delay and loop metadata ride on the first frame."""
    if len(frames) == 1:
        return frames[0]
    strip = pyvips.Image.arrayjoin(frames, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", frames[0].height)
    return strip


def map_frames(image: pyvips.Image, operation: Callable[[pyvips.Image], pyvips.Image]) -> pyvips.Image:
    if page_count(image) == 1:
        return operation(image)
    return join_frames([operation(frame) for frame in split_frames(image)])
