"""Sharpen step: libvips unsharp masking, in Lab, with strength from the spec's 1-10 amount.

amount maps to sigma = 0.5 + amount / 10 (the size of detail lifted) and m2 = amount (the
slope in busy areas); flat areas are left alone (m1 = 0) so noise is not amplified.
`sharpen` refuses 'multiband' images, so the interpretation is set to sRGB first (FACTS.md),
and alpha is carried around it untouched.
"""

from __future__ import annotations

import pyvips

from edge.transform.context import TransformContext
from edge.transform.frames import map_frames


def unsharp(image: pyvips.Image, amount: int) -> pyvips.Image:
    if image.interpretation == "multiband":
        image = image.copy(interpretation="srgb" if image.bands >= 3 else "b-w")
    alpha = None
    if image.hasalpha():
        image, alpha = image.extract_band(0, n=image.bands - 1), image[image.bands - 1]
    sharpened = image.sharpen(sigma=0.5 + amount / 10, m1=0, m2=amount).cast("uchar")
    return sharpened.bandjoin(alpha) if alpha is not None else sharpened


def sharpen(ctx: TransformContext) -> None:
    if ctx.opts.sharpen is None:
        return
    amount = ctx.opts.sharpen
    ctx.image = map_frames(ctx.require_image(), lambda frame: unsharp(frame, amount),
                           between_frames=lambda: ctx.check_deadline("sharpen"))
