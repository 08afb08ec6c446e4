"""Dominant colours of an image, in the plain names a sentence can use ("red", "dark blue" is not one)."""

from __future__ import annotations

import numpy as np

SAMPLE_SIDE = 64
MIN_SHARE = 0.15           # a colour covering less of the picture is not "dominant"
# Hue (degrees) upper bounds of the saturated colour names.
HUES = ((15, "red"), (40, "orange"), (65, "yellow"), (165, "green"), (195, "teal"), (255, "blue"),
        (290, "purple"), (345, "pink"), (360, "red"))


def _names(hsv: np.ndarray) -> np.ndarray:
    """One colour name per pixel of an OpenCV HSV array (H 0-179, S and V 0-255)."""
    hue = hsv[..., 0].astype(np.float32) * 2
    sat = hsv[..., 1].astype(np.float32) / 255
    val = hsv[..., 2].astype(np.float32) / 255
    names = np.full(hue.shape, "grey", dtype=object)
    for upper, name in reversed(HUES):
        names[hue < upper] = name
    warm = (hue < 65) | (hue >= 345)
    names[warm & (val < 0.6) & (sat > 0.3)] = "brown"
    names[warm & (sat >= 0.12) & (sat < 0.35) & (val > 0.75)] = "beige"
    names[sat < 0.12] = "grey"
    names[(sat < 0.12) & (val > 0.85)] = "white"
    names[val < 0.18] = "black"
    return names


def dominant_colours(pixels: np.ndarray, limit: int = 2) -> list[str]:
    """Up to `limit` colour names, most common first, each covering at least MIN_SHARE of the image."""
    import cv2  # noqa: PLC0415 (here, not at import: control starts without OpenCV)

    if pixels.size == 0:
        return []
    small = cv2.resize(pixels, (SAMPLE_SIDE, SAMPLE_SIDE), interpolation=cv2.INTER_AREA)
    names = _names(cv2.cvtColor(small, cv2.COLOR_RGB2HSV)).ravel()
    found, counts = np.unique(names, return_counts=True)
    order = np.argsort(-counts)
    total = names.size
    return [str(found[i]) for i in order[:limit] if counts[i] / total >= MIN_SHARE]


def colour_count(pixels: np.ndarray) -> int:
    """Distinct colours at 5 bits per channel on a small copy: photographs have hundreds, graphics few."""
    import cv2  # noqa: PLC0415 (as in dominant_colours)

    small = cv2.resize(pixels, (SAMPLE_SIDE, SAMPLE_SIDE), interpolation=cv2.INTER_AREA) >> 3
    packed = (small[..., 0].astype(np.int32) << 10) | (small[..., 1].astype(np.int32) << 5) | small[..., 2]
    return int(np.unique(packed).size)
