"""Blur step: Gaussian blur of the given radius.

The spec's `blur` is a radius 1-250; libvips takes a sigma, and a Gaussian's visible radius
is about two sigmas, so sigma = radius / 2. Transparent images are blurred premultiplied so
transparent pixels do not bleed a dark fringe into the visible ones.
"""

from __future__ import annotations

import pyvips

from edge.transform.context import TransformContext
from edge.transform.frames import map_frames


def gaussian_blur(image: pyvips.Image, radius: int) -> pyvips.Image:
    sigma = max(radius / 2, 0.5)
    if image.hasalpha():
        return image.premultiply().gaussblur(sigma).unpremultiply().cast("uchar")
    return image.gaussblur(sigma)


def blur(ctx: TransformContext) -> None:
    if ctx.opts.blur is None:
        return
    radius = ctx.opts.blur
    ctx.image = map_frames(ctx.require_image(), lambda frame: gaussian_blur(frame, radius),
                           between_frames=lambda: ctx.check_deadline("blur"))
