"""What one transform may cost: pixels, frames, SVG filter work and time ([transform] settings).

Every bound is checked on header values before any pixel is decoded, except time, which the
pipeline checks between steps and libvips checks while it computes (and the image pool
enforces from outside by killing the worker process).

Time is CPU time of the worker process (every thread, libvips' included), not wall time: the budget
bounds the work one input may cost. On a machine whose cores are busy with other programs a job waits
for a core, and that waiting is not its input's fault: measured in wall time, a quick transform would
become a 503 (remembered for `failure_ttl_s`) whenever a neighbour hogged the cores.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from assetcdn.shared.svg_sanitize import MAX_FILTER_WORK

# Default pixel budget for callers that do not pass one (imgproxy's default is 50 MP as well).
DEFAULT_MAX_PIXELS = 50_000_000


def budget_clock() -> float:
    """Seconds of CPU this process has used: what a transform's deadline is measured on."""
    return time.process_time()


@dataclass(frozen=True, slots=True)
class TransformLimits:
    max_pixels: int = DEFAULT_MAX_PIXELS        # decoded pixels of the source and of the output, all frames
    time_budget_s: float = 10.0
    max_animation_frames: int = 500             # frames an animated output may be made from
    max_animation_pixels: int = 50_000_000      # width x height x frames of an animated source (Cloudflare's bound)
    max_svg_filter_pixels: int = MAX_FILTER_WORK  # rasterised pixels x filter primitives of an SVG

    @classmethod
    def from_settings(cls, transform: Mapping[str, Any]) -> TransformLimits:
        return cls(max_pixels=int(transform["max_source_pixels"]),
                   time_budget_s=float(transform["time_budget_s"]),
                   max_animation_frames=int(transform["max_animation_frames"]),
                   max_animation_pixels=int(transform["max_animation_pixels"]),
                   max_svg_filter_pixels=int(transform["max_svg_filter_pixels"]))
