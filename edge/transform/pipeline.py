"""run_transform: read the source header, check budgets, then run the steps in order.

Like imgproxy's processing pipeline: a list of small steps sharing one context, the time
budget checked between steps. Adding an operation is one file and one line in STEPS.
libvips is lazy, so most pixel work happens inside `encode`; a libvips 'eval' callback
checks the deadline there too and kills the computation when it is passed. A libvips error
once the deadline has passed is always the budget's 503, whatever libvips reports.
The edge runs this in a worker process of the image pool, which kills the process when
work it cannot interrupt (librsvg drawing an SVG) overruns the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pyvips

from edge.transform.blur import blur
from edge.transform.context import TransformContext, over_budget
from edge.transform.decode import decode
from edge.transform.encode import ANIMATED_OUTPUTS, CONTENT_TYPES, ENCODERS, encode_image
from edge.transform.gravity import gravity
from edge.transform.limits import TransformLimits
from edge.transform.options import TransformOptions
from edge.transform.resize import plan_resize, resize
from edge.transform.sharpen import sharpen
from edge.transform.source import check_animation, check_pixels, check_svg_filters, read_source
from shared.errors import LegacyError


@dataclass(frozen=True, slots=True)
class TransformResult:
    body: bytes
    content_type: str
    width: int
    height: int          # of one frame
    format: str
    pages: int


def _watch_deadline(ctx: TransformContext, image: pyvips.Image) -> None:
    """Kill libvips' evaluation of `image` once the deadline passes (checked per chunk of tiles)."""
    def on_eval(evaluated: pyvips.Image, _progress: object) -> None:
        if time.monotonic() > ctx.deadline:
            ctx.killed = True
            evaluated.set_kill(True)

    image.set_progress(True)
    image.signal_connect("eval", on_eval)


def encode(ctx: TransformContext) -> None:
    image = ctx.require_image()
    _watch_deadline(ctx, image)
    ctx.body = encode_image(image, ctx.output_format, ctx.opts.quality)


Step = Callable[[TransformContext], None]
STEPS: tuple[tuple[str, Step], ...] = (
    ("decode", decode),
    ("resize", resize),
    ("gravity", gravity),
    ("blur", blur),
    ("sharpen", sharpen),
    ("encode", encode),
)


def run_transform(source: bytes, source_format: str, opts: TransformOptions, output_format: str,
                  limits: TransformLimits) -> TransformResult:
    """Transform `source` per `opts` into `output_format`; LegacyError (4xx, or 503 over time) on failure."""
    deadline = time.monotonic() + limits.time_budget_s
    if output_format not in ENCODERS:
        raise LegacyError(400, f"Output format '{output_format}' is not available on this edge. "
                          f"Available: {', '.join(sorted(ENCODERS))}.")
    image_source = read_source(source, source_format)
    keep_animation = image_source.animated and output_format in ANIMATED_OUTPUTS
    pages = image_source.pages if keep_animation else 1
    plan = plan_resize(image_source.width, image_source.height, opts)
    # Every check runs on header values only: nothing has been decoded yet. An SVG with a
    # target size is rendered straight at that size, so only the output counts for it.
    if keep_animation:
        check_animation(image_source, limits.max_animation_frames, limits.max_animation_pixels)
    if image_source.format != "svg" or plan is None:
        check_pixels("source image", image_source.width, image_source.height, pages, limits.max_pixels)
    if plan is not None:
        check_pixels("requested output", plan.width, plan.height, pages, limits.max_pixels)
    if image_source.filter_primitives:
        rendered = (plan.width, plan.height) if plan is not None else (image_source.width, image_source.height)
        check_svg_filters(image_source, *rendered, limits.max_svg_filter_pixels)
    ctx = TransformContext(source=image_source, opts=opts, output_format=output_format,
                           keep_animation=keep_animation, plan=plan, max_pixels=limits.max_pixels,
                           deadline=deadline, time_budget_s=limits.time_budget_s)
    for name, step in STEPS:
        ctx.check_deadline(name)
        try:
            step(ctx)
        except pyvips.Error as exc:
            if ctx.killed or time.monotonic() > ctx.deadline:
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
