"""sharpen: libvips unsharp masking, in Lab, with strength from the API's 1-10 amount.

amount maps to sigma = 0.5 + amount / 10 (the size of detail lifted) and m2 = amount (the
slope in busy areas); flat areas are left alone (m1 = 0) so noise is not amplified.
libvips' `sharpen` refuses 'multiband' images, so the interpretation is set to sRGB first,
and alpha is carried around it untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assetcdn.edge.transform.frames import map_frames
from assetcdn.edge.transform.options.base import Query, TransformOption, int_param

if TYPE_CHECKING:
    import pyvips

    from assetcdn.edge.transform.context import TransformContext


def unsharp(image: pyvips.Image, amount: int) -> pyvips.Image:
    if image.interpretation == "multiband":
        image = image.copy(interpretation="srgb" if image.bands >= 3 else "b-w")
    alpha = None
    if image.hasalpha():
        image, alpha = image.extract_band(0, n=image.bands - 1), image[image.bands - 1]
    sharpened = image.sharpen(sigma=0.5 + amount / 10, m1=0, m2=amount).cast("uchar")
    return sharpened.bandjoin(alpha) if alpha is not None else sharpened


def sharpen(ctx: TransformContext) -> None:
    amount = ctx.opts.get(SHARPEN)
    if amount is None:
        return
    ctx.image = map_frames(ctx.require_image(), lambda frame: unsharp(frame, amount),
                           between_frames=lambda: ctx.check_deadline("sharpen"))


def parse(query: Query) -> int | None:
    return int_param(query, "sharpen", 1, 10)


def key(amount: int | None, _output_format: str) -> str:
    return "" if amount is None else f"sharpen{amount}"


SHARPEN: TransformOption[int | None] = TransformOption(name="sharpen", params=("sharpen",), default=None, parse=parse, key=key,
                                      steps=(("sharpen", sharpen),))
