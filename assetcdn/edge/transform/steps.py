"""run_transform: read the source header, check budgets, then run the steps in order.

Like imgproxy's processing pipeline: a list of small steps sharing one context, the time
budget checked between steps: decode, then each option's steps in the order of OPTIONS
(assetcdn/edge/transform/options/__init__.py), then encode. Adding an operation is adding an option.
libvips is lazy, so most pixel work happens inside `encode`; a libvips 'eval' callback
checks the deadline there too and kills the computation when it is passed. A libvips error
once the deadline has passed is always the budget's 503, whatever libvips reports.
The edge runs this in a worker process of the image pool, which kills the process when
work it cannot interrupt (librsvg drawing an SVG) overruns the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyvips

from assetcdn.edge.transform.budgets import TransformLimits, budget_clock
from assetcdn.edge.transform.context import TransformContext, over_budget
from assetcdn.edge.transform.decode import decode
from assetcdn.edge.transform.decoded import DecodedSources
from assetcdn.edge.transform.encode import ANIMATED_OUTPUTS, CONTENT_TYPES, ENCODERS, encode_image
from assetcdn.edge.transform.options import OPTIONS, TransformOptions
from assetcdn.edge.transform.options.base import Size, Step
from assetcdn.edge.transform.options.quality import QUALITY
from assetcdn.edge.transform.options.resize import RESIZE, check_plan, plan_resize
from assetcdn.edge.transform.plan import ResizePlan
from assetcdn.edge.transform.source import (
    SourceImage,
    check_animation,
    check_pixels,
    check_svg_filters,
    read_source,
)
from assetcdn.shared.errors import LegacyError


@dataclass(frozen=True, slots=True)
class TransformResult:
    body: bytes
    content_type: str
    width: int
    height: int          # of one frame
    format: str
    pages: int


def encode(ctx: TransformContext) -> None:
    image = ctx.require_image()
    ctx.watch_deadline(image)
    ctx.body = encode_image(image, ctx.output_format, ctx.opts.get(QUALITY))


STEPS: tuple[tuple[str, Step], ...] = (
    ("decode", decode),
    *(step for option in OPTIONS for step in option.steps),
    ("encode", encode),
)


def check_source(image_source: SourceImage, output_format: str, limits: TransformLimits, *,
                 rendered_at_size: bool = False) -> bool:
    """A source's own bounds for an output in `output_format`, on header values only: its animation's when the
    output keeps it, and its pixels (every frame kept), unless it is an SVG rendered straight at a target size
    (`rendered_at_size`), for which only the output counts. LegacyError 422 past one; whether the output keeps
    the animation. Also what /api/auto checks of a pull zone's image it sends as it is (jobs.py `checked_as_is`)."""
    keep_animation = image_source.animated and output_format in ANIMATED_OUTPUTS
    if keep_animation:
        check_animation(image_source, limits.max_animation_frames, limits.max_animation_pixels)
    if image_source.format != "svg" or not rendered_at_size:
        pages = image_source.pages if keep_animation else 1
        check_pixels("source image", image_source.width, image_source.height, pages, limits.max_pixels)
    return keep_animation


def size_before_resize(source: SourceImage, opts: TransformOptions) -> Size | None:
    """The image's size when it reaches the resize, from header values; None when only pixels tell."""
    size: Size | None = (source.width, source.height)
    for option in OPTIONS:
        if option is RESIZE or size is None:
            break
        size = option.reshape(opts.get(option), source, size)
    return size


def decode_size_for(plan: ResizePlan, source: SourceImage, opts: TransformOptions) -> Size | None:
    """The size to decode at so that the steps before the resize leave the planned size."""
    size: Size | None = (plan.width, plan.height)
    before = OPTIONS[:OPTIONS.index(RESIZE)]
    for option in reversed(before):
        if size is None:
            break
        size = option.unshape(opts.get(option), source, size)
    return size


def run_transform(source: bytes, source_format: str, opts: TransformOptions, output_format: str,
                  limits: TransformLimits, decoded: DecodedSources | None = None,
                  source_digest: bytes | None = None) -> TransformResult:
    """Transform `source` per `opts` into `output_format`; LegacyError (4xx, or 503 over time) on failure.

    `decoded`: the worker's kept decodes, so the source's other variants need not decode it again.
    `source_digest`: the SHA-256 of `source` as the caller verified it (None: hashed here when needed)."""
    deadline = budget_clock() + limits.time_budget_s
    if output_format not in ENCODERS:
        raise LegacyError(400, f"Output format '{output_format}' is not available on this edge. "
                          f"Available: {', '.join(sorted(ENCODERS))}.")
    image_source = read_source(source, source_format)
    shaped = size_before_resize(image_source, opts)
    plan = plan_resize(*shaped, opts.get(RESIZE)) if shaped is not None else None
    decode_size = decode_size_for(plan, image_source, opts) if plan is not None else None
    # Every check runs on header values only: nothing has been decoded yet.
    keep_animation = check_source(image_source, output_format, limits, rendered_at_size=decode_size is not None)
    pages = image_source.pages if keep_animation else 1
    if plan is not None:
        check_plan(plan, pages, limits.max_pixels)
    if image_source.filter_primitives:
        rendered = decode_size if decode_size is not None else (image_source.width, image_source.height)
        check_svg_filters(image_source, *rendered, limits.max_svg_filter_pixels)
    ctx = TransformContext(source=image_source, opts=opts, output_format=output_format,
                           keep_animation=keep_animation, plan=plan, decode_size=decode_size,
                           max_pixels=limits.max_pixels, deadline=deadline, time_budget_s=limits.time_budget_s,
                           plan_after_steps=shaped is None, decoded=decoded, source_digest=source_digest)
    for name, step in STEPS:
        ctx.check_deadline(name)
        try:
            step(ctx)
        except pyvips.Error as exc:
            if ctx.killed or budget_clock() > ctx.deadline:
                raise over_budget(limits.time_budget_s, name) from exc
            raise LegacyError(422, f"The source image ({image_source.format}) could not be "
                              f"processed at step '{name}': {str(exc).splitlines()[0]}") from exc
    image = ctx.require_image()
    # The deadline's signal handler holds ctx, and ctx the image: drop the image so its pixels go
    # when this returns, not when the garbage collector next finds the cycle.
    ctx.image = None
    return TransformResult(body=ctx.body, content_type=CONTENT_TYPES[output_format], width=image.width,
                           height=image.get_page_height(), format=output_format,
                           pages=ctx.pages if output_format in ANIMATED_OUTPUTS else 1)
