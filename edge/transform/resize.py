"""Fit semantics, as geometry: what size the decoded image must have.

- only w or only h: scale keeping the aspect ratio (fit and gravity do not matter).
- contain (and inside, its other name): the largest size within w x h keeping the aspect ratio.
- fill: exactly w x h, the aspect ratio is not kept.
- cover: the smallest size covering w x h keeping the aspect ratio; the gravity step then
  crops it to exactly w x h.
- outside: the same covering size as cover, without the crop.
Sizes may go up as well as down (as Cloudflare's contain/cover do); the pixel budget bounds them.

The decode step shrinks on load straight to the planned size; `resize` below only acts when
a decoder could not (HEIC is decoded whole), so in the usual case it does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edge.transform.options import TransformOptions

if TYPE_CHECKING:
    from edge.transform.context import TransformContext


@dataclass(frozen=True, slots=True)
class ResizePlan:
    width: int                        # decoded size, per frame
    height: int
    crop_to: tuple[int, int] | None   # cover: the final w x h the gravity step cuts out


def plan_resize(source_width: int, source_height: int, opts: TransformOptions) -> ResizePlan | None:
    w, h = opts.width, opts.height
    if w is None and h is None:
        return None
    if w is None or h is None:
        scale = w / source_width if w is not None else (h or 1) / source_height
        return ResizePlan(max(1, round(source_width * scale)), max(1, round(source_height * scale)), None)
    if opts.fit == "fill":
        return ResizePlan(w, h, None)
    if opts.fit in ("contain", "inside"):
        scale = min(w / source_width, h / source_height)
        return ResizePlan(min(w, max(1, round(source_width * scale))),
                          min(h, max(1, round(source_height * scale))), None)
    scale = max(w / source_width, h / source_height)
    covering = (max(w, round(source_width * scale)), max(h, round(source_height * scale)))
    return ResizePlan(*covering, None if opts.fit == "outside" else (w, h))


def resize(ctx: TransformContext) -> None:
    """Bring the decoded image to the planned size if the decoder did not already."""
    image = ctx.require_image()
    plan = ctx.plan
    if plan is None or (image.width, image.get_page_height()) == (plan.width, plan.height):
        return
    ctx.image = image.thumbnail_image(plan.width, height=plan.height, size="force")
