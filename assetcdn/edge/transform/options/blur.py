"""blur: Gaussian blur of the given radius (1-250).

The API's `blur` is a radius; libvips takes a sigma, and a Gaussian's visible radius is
about two sigmas, so sigma = radius / 2. Transparent images are blurred premultiplied so
transparent pixels do not bleed a dark fringe into the visible ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assetcdn.edge.transform.frames import map_frames
from assetcdn.edge.transform.options.base import Query, TransformOption, int_param

if TYPE_CHECKING:
    import pyvips

    from assetcdn.edge.transform.context import TransformContext


def gaussian_blur(image: pyvips.Image, radius: int) -> pyvips.Image:
    sigma = max(radius / 2, 0.5)
    if image.hasalpha():
        return image.premultiply().gaussblur(sigma).unpremultiply().cast("uchar")
    return image.gaussblur(sigma)


def blur(ctx: TransformContext) -> None:
    radius = ctx.opts.get(BLUR)
    if radius is None:
        return
    ctx.image = map_frames(ctx.require_image(), lambda frame: gaussian_blur(frame, radius),
                           between_frames=lambda: ctx.check_deadline("blur"))


def parse(query: Query) -> int | None:
    return int_param(query, "blur", 1, 250)


def key(radius: int | None, _output_format: str) -> str:
    return "" if radius is None else f"blur{radius}"


BLUR: TransformOption[int | None] = TransformOption(name="blur", params=("blur",), default=None, parse=parse, key=key,
                                   steps=(("blur", blur),))
