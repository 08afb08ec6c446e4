"""The state one transform carries from step to step (imgproxy's processing context).

One context per call: it is never shared between threads, so steps may mutate it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyvips

from assetcdn.edge.transform.budgets import budget_clock
from assetcdn.edge.transform.decoded import DecodedSources
from assetcdn.edge.transform.plan import ResizePlan
from assetcdn.edge.transform.source import SourceImage
from assetcdn.shared.errors import LegacyError

if TYPE_CHECKING:
    from assetcdn.edge.transform.options import TransformOptions


@dataclass
class TransformContext:
    source: SourceImage
    opts: TransformOptions
    output_format: str
    keep_animation: bool
    plan: ResizePlan | None           # None: keep the size the steps before the resize leave
    decode_size: tuple[int, int] | None   # shrink-on-load target; None: decode the whole source
    max_pixels: int
    deadline: float                   # a budget_clock() value (CPU seconds of this process)
    time_budget_s: float
    image: pyvips.Image | None = None
    body: bytes = b""
    killed: bool = False              # the deadline watch stopped libvips
    plan_after_steps: bool = False    # the size before the resize is known only from pixels (trim)
    decoded: DecodedSources | None = None   # the worker's kept decodes (None: decode per variant)
    source_digest: bytes | None = None      # SHA-256 of the source's bytes, when the caller knows it

    @property
    def pages(self) -> int:
        return self.source.pages if self.keep_animation else 1

    def require_image(self) -> pyvips.Image:
        if self.image is None:
            raise RuntimeError("a transform step ran before the source was decoded")
        return self.image

    def watch_deadline(self, image: pyvips.Image) -> None:
        """Kill libvips' evaluation of `image` once the deadline passes (checked per chunk of tiles)."""
        def on_eval(evaluated: pyvips.Image, _progress: object) -> None:
            if budget_clock() > self.deadline:
                self.killed = True
                evaluated.set_kill(True)

        image.set_progress(True)
        image.signal_connect("eval", on_eval)

    def check_deadline(self, step: str) -> None:
        if budget_clock() > self.deadline:
            raise over_budget(self.time_budget_s, step)


def over_budget(time_budget_s: float, step: str) -> LegacyError:
    return LegacyError(503, f"The transform exceeded its time budget of {time_budget_s:g} s "
                       f"(during '{step}'). Ask for a smaller size or a faster format, or retry later.",
                       headers={"Retry-After": "1"})
