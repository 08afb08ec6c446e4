"""Smart crop: where an image's subject is, as a gravity the transform accepts.

1. Faces (assetcdn/shared/faces.py): any face gives `face`, with the box around all of them; confidence
   `high` when the detector is sure (score >= HIGH_FACE_SCORE) and the faces are not specks.
2. Otherwise saliency, from two libvips strategies on the analysis copy: `attention` (edges, skin
   tones, saturation: the point smartcrop centres on) and `entropy` (the busiest half-size window).
   The focus is the midpoint of the attention point and the entropy window's centre (on the placed-
   subject set of benchmarks/vision_bench.py this picks the right cell more often than either alone);
   its cell of the thirds grid is the compass gravity (the middle cell is `center`). Confidence is
   `medium` when both strategies point into the same cell, `low` when they disagree.
3. A flat image (almost no detail) is `center`, `low`.
The box is in the original's pixels: the faces' union, or the half-size window centred on the focus
(what a crop to half of each side would keep).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from assetcdn.control.ai.image_input import AnalysisImage
from assetcdn.shared.faces import DETECTOR, Face, detect_faces_rgb

HIGH_FACE_SCORE = 0.85
MIN_FACE_AREA = 0.002      # faces smaller than this share of the picture are a weak subject
FLAT_STDDEV = 4.0          # grey levels: below this the picture has no subject to find
SALIENCY_SIZE = 320        # long side of the copy saliency reads: as accurate as 640 on the benchmark, 1/4 the pixels
# Rows, then columns: the compass names of the thirds grid, as the transform's gravity spells them.
COMPASS = (("northwest", "north", "northeast"),
           ("west", "center", "east"),
           ("southwest", "south", "southeast"))
MODEL = f"{DETECTOR}+libvips-attention/entropy"


@dataclass(frozen=True)
class SmartCrop:
    gravity: str
    confidence: str
    box: tuple[int, int, int, int]     # x, y, width, height in the original's pixels
    faces: int
    focus: tuple[int, int]             # the point the gravity was chosen from (original's pixels)

    def fields(self) -> dict[str, Any]:
        x, y, w, h = self.box
        return {"gravity": self.gravity, "confidence": self.confidence,
                "box": {"x": x, "y": y, "width": w, "height": h},
                "focus": {"x": self.focus[0], "y": self.focus[1]}, "faces": self.faces}


def compass(x: float, y: float) -> str:
    """The compass cell of a point given as fractions (0-1) of the width and height."""
    def third(v: float) -> int:
        return 0 if v < 1 / 3 else 2 if v > 2 / 3 else 1
    return COMPASS[third(y)][third(x)]


def _union(faces: list[Face]) -> tuple[int, int, int, int]:
    left = min(f.x for f in faces)
    top = min(f.y for f in faces)
    right = max(f.x + f.width for f in faces)
    bottom = max(f.y + f.height for f in faces)
    return left, top, right - left, bottom - top


def _scaled(box: tuple[float, float, float, float], scale: float, width: int, height: int) -> tuple[int, int, int, int]:
    x, y, w, h = (round(v * scale) for v in box)
    x, y = min(max(x, 0), width - 1), min(max(y, 0), height - 1)
    return x, y, max(min(w, width - x), 1), max(min(h, height - y), 1)


def _from_faces(source: AnalysisImage, faces: list[Face]) -> SmartCrop:
    small_w, small_h = source.image.width, source.image.height
    x, y, w, h = _union(faces)
    largest = max(f.width * f.height for f in faces) / (small_w * small_h)
    sure = faces[0].score >= HIGH_FACE_SCORE and largest >= MIN_FACE_AREA
    box = _scaled((x, y, w, h), source.scale, source.width, source.height)
    focus = (box[0] + box[2] // 2, box[1] + box[3] // 2)
    return SmartCrop("face", "high" if sure else "medium", box, len(faces), focus)


def _from_saliency(source: AnalysisImage, pixels: np.ndarray) -> SmartCrop:
    whole = (0, 0, source.width, source.height)
    centre = (source.width // 2, source.height // 2)
    image = source.image
    factor = min(1.0, SALIENCY_SIZE / max(image.width, image.height))
    image = image.resize(factor) if factor < 1.0 else image
    width, height = image.width, image.height
    if width < 4 or height < 4 or float(pixels.std()) < FLAT_STDDEV:
        return SmartCrop("center", "low", whole, 0, centre)
    scale = source.width / width
    crop_w, crop_h = max(width // 2, 1), max(height // 2, 1)
    _, found = image.smartcrop(crop_w, crop_h, interesting="attention", attention_x=True, attention_y=True)
    ax, ay = float(found["attention_x"]), float(found["attention_y"])
    window = image.smartcrop(crop_w, crop_h, interesting="entropy")
    ex, ey = -window.xoffset + crop_w / 2, -window.yoffset + crop_h / 2
    fx, fy = (ax + ex) / 2, (ay + ey) / 2
    gravity = compass(fx / width, fy / height)
    agree = compass(ax / width, ay / height) == compass(ex / width, ey / height)
    left = min(max(fx - crop_w / 2, 0), width - crop_w)
    top = min(max(fy - crop_h / 2, 0), height - crop_h)
    box = _scaled((left, top, crop_w, crop_h), scale, source.width, source.height)
    focus = (round(fx * scale), round(fy * scale))
    return SmartCrop(gravity, "medium" if agree else "low", box, 0, focus)


def smart_crop(source: AnalysisImage) -> SmartCrop:
    pixels = source.pixels
    faces = detect_faces_rgb(pixels)
    if faces:
        return _from_faces(source, faces)
    return _from_saliency(source, pixels)
