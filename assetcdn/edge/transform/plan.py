"""The size the resize step brings the image to, decided before any pixel is decoded."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResizePlan:
    width: int                        # size after the resize, per frame
    height: int
    crop_to: tuple[int, int] | None   # cover: the final w x h the gravity step cuts out
