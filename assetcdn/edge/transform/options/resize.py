"""w, h, fit and gravity: the size of the output, as geometry, and the crop that gets there.

- only w or only h: scale keeping the aspect ratio (fit and gravity do not matter).
- contain (and inside, its other name): the largest size within w x h keeping the aspect ratio.
- fill: exactly w x h, the aspect ratio is not kept.
- cover: the smallest size covering w x h keeping the aspect ratio; the gravity step then
  crops it to exactly w x h.
- outside: the same covering size as cover, without the crop.
Sizes may go up as well as down (as Cloudflare's contain/cover do); the pixel budget bounds them.

Defaults: `fit=cover` (with both w and h the answer is exactly w x h, what a caller asking for
a 400x300 thumbnail expects; `contain` must be asked for), `gravity=center`. `fit` and
`gravity` only matter when both w and h are given; the cache key drops them otherwise.
Gravity takes the nine compass points (`north` keeps the top edge, `southeast` the
bottom-right corner...), `face` and `auto` (assetcdn/edge/transform/gravity.py places the crop).

The decode step shrinks on load straight to the planned size; `resize` below only acts when
a decoder could not (HEIC is decoded whole, a trimmed source is decoded whole), so in the
usual case it does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from assetcdn.edge.transform.frames import first_frame, map_frames
from assetcdn.edge.transform.gravity import attention_offset, compass_offset, face_offset
from assetcdn.edge.transform.options.base import Query, TransformOption, enum_param, int_param
from assetcdn.edge.transform.plan import ResizePlan
from assetcdn.edge.transform.source import check_pixels

if TYPE_CHECKING:
    from assetcdn.edge.transform.context import TransformContext

Fit = Literal["cover", "contain", "fill", "inside", "outside"]
Gravity = Literal["center", "north", "south", "east", "west", "northeast", "northwest", "southeast",
                  "southwest", "face", "auto"]
FITS: tuple[Fit, ...] = ("cover", "contain", "fill", "inside", "outside")
# In the order the API reference documents them.
GRAVITIES: tuple[Gravity, ...] = ("center", "north", "south", "east", "west", "northeast", "northwest",
                                  "southeast", "southwest", "face", "auto")
# Fits that give the same pixels share one cache entry.
_SAME_OUTPUT_FIT = {"inside": "contain"}
MAX_SIDE = 8192


@dataclass(frozen=True, slots=True)
class Geometry:
    width: int | None = None
    height: int | None = None
    fit: Fit = "cover"
    gravity: Gravity = "center"

    @property
    def crops(self) -> bool:
        """Whether a crop happens: cover with both sides given."""
        return self.fit == "cover" and self.width is not None and self.height is not None


def parse(query: Query) -> Geometry:
    return Geometry(width=int_param(query, "w", 1, MAX_SIDE), height=int_param(query, "h", 1, MAX_SIDE),
                    fit=cast(Fit, enum_param(query, "fit", FITS) or "cover"),
                    gravity=cast(Gravity, enum_param(query, "gravity", GRAVITIES) or "center"))


def key(geometry: Geometry, _output_format: str) -> str:
    parts = [f"w{geometry.width}" if geometry.width else "", f"h{geometry.height}" if geometry.height else ""]
    if geometry.width is not None and geometry.height is not None:
        parts.append(_SAME_OUTPUT_FIT.get(geometry.fit, geometry.fit))
        if geometry.crops:
            parts.append(f"g-{geometry.gravity}")
    return "-".join(p for p in parts if p)


def plan_resize(source_width: int, source_height: int, geometry: Geometry) -> ResizePlan | None:
    """The size to resize to and the crop after it; None when neither w nor h is given."""
    w, h = geometry.width, geometry.height
    if w is None and h is None:
        return None
    if w is None or h is None:
        scale = w / source_width if w is not None else (h or 1) / source_height
        return ResizePlan(max(1, round(source_width * scale)), max(1, round(source_height * scale)), None)
    if geometry.fit == "fill":
        return ResizePlan(w, h, None)
    if geometry.fit in ("contain", "inside"):
        scale = min(w / source_width, h / source_height)
        return ResizePlan(min(w, max(1, round(source_width * scale))),
                          min(h, max(1, round(source_height * scale))), None)
    scale = max(w / source_width, h / source_height)
    covering = (max(w, round(source_width * scale)), max(h, round(source_height * scale)))
    return ResizePlan(*covering, None if geometry.fit == "outside" else (w, h))


def check_plan(plan: ResizePlan, pages: int, max_pixels: int) -> None:
    """Hold a plan to the pixel budget (LegacyError 422): the output asked for, and for a crop the covering size it
    is cut from (gravity=face and auto keep that in memory), each refusal naming which it is."""
    if plan.crop_to is None:
        check_pixels("requested output", plan.width, plan.height, pages, max_pixels)
        return
    width, height = plan.crop_to
    check_pixels("requested output", width, height, pages, max_pixels)
    check_pixels(f"size fit=cover scales to before its {width}x{height} crop", plan.width, plan.height, pages,
                 max_pixels)


def resize(ctx: TransformContext) -> None:
    """Bring the decoded image to the planned size if the decoder did not already."""
    image = ctx.require_image()
    if ctx.plan_after_steps:
        # A step before this one changed the size in a way only its pixels told (trim): plan now,
        # and hold the new plan to the same pixel budget the header-based one is held to.
        ctx.plan_after_steps = False
        ctx.plan = plan_resize(image.width, image.get_page_height(), ctx.opts.get(RESIZE))
        if ctx.plan is not None:
            check_plan(ctx.plan, ctx.pages, ctx.max_pixels)
    plan = ctx.plan
    if plan is None or (image.width, image.get_page_height()) == (plan.width, plan.height):
        return
    ctx.image = image.thumbnail_image(plan.width, height=plan.height, size="force")


def gravity(ctx: TransformContext) -> None:
    """Cut the covering image down to exactly w x h (fit=cover only), where the gravity says.

    Animated images are cut per frame at one place, chosen on the first frame, so the
    animation does not jitter.
    """
    plan = ctx.plan
    if plan is None or plan.crop_to is None:
        return
    image = ctx.require_image()
    width, height = plan.crop_to
    frame_height = image.get_page_height()
    if (image.width, frame_height) == (width, height):
        return
    where = ctx.opts.get(RESIZE).gravity
    if where in ("face", "auto"):
        # Analysis reads the pixels, and the crop reads them again: keep the (covering-size)
        # decode in memory rather than decoding a sequential-access source twice.
        image = image.copy_memory()
        ctx.check_deadline("gravity")
        first = first_frame(image)
        offset = face_offset(first, width, height) if where == "face" else None
        ctx.check_deadline("gravity")
        if offset is None:
            offset = attention_offset(first, width, height)
    else:
        offset = compass_offset(where, image.width, frame_height, width, height)
    left, top = offset
    ctx.image = map_frames(image, lambda frame: frame.crop(left, top, width, height),
                           between_frames=lambda: ctx.check_deadline("gravity"))


RESIZE: TransformOption[Geometry] = TransformOption(
    name="resize", params=("w", "h", "fit", "gravity"), default=Geometry(), parse=parse, key=key,
    steps=(("resize", resize), ("gravity", gravity)),
)
