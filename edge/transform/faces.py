"""Face detection for gravity=face: OpenCV's frontal-face Haar cascade.

opencv-python-headless < 5 ships the cascade files (5.x dropped them). Detection runs on a
copy at most DETECT_SIZE pixels on its long side: faces large enough to matter for a crop
are still found, and the cost stays near constant whatever the image size.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pyvips

DETECT_SIZE = 640
CASCADE_FILE = "haarcascade_frontalface_default.xml"

# A CascadeClassifier must not be used by two threads at once: one per worker thread,
# loaded on first use (about 1 MB of XML, parsed once per thread).
_per_thread = threading.local()


def _classifier() -> cv2.CascadeClassifier:
    classifier = getattr(_per_thread, "classifier", None)
    if classifier is None:
        classifier = cv2.CascadeClassifier(cv2.data.haarcascades + CASCADE_FILE)
        if classifier.empty():
            raise RuntimeError(f"OpenCV cascade {CASCADE_FILE} could not be loaded")
        _per_thread.classifier = classifier
    return classifier


def detect_faces(frame: pyvips.Image) -> list[tuple[int, int, int, int]]:
    """Face boxes (x, y, w, h) in the frame's own coordinates; empty when none is found."""
    scale = min(1.0, DETECT_SIZE / max(frame.width, frame.height))
    small = frame.resize(scale) if scale < 1.0 else frame
    if small.hasalpha():
        small = small.flatten(background=255)
    grey = small.colourspace("b-w")[0] if small.bands > 1 or small.interpretation != "b-w" else small
    pixels = np.ascontiguousarray(grey.numpy())
    pixels = cv2.equalizeHist(pixels)
    min_side = max(20, int(min(pixels.shape[:2]) * 0.08))
    found = _classifier().detectMultiScale(pixels, scaleFactor=1.1, minNeighbors=5,
                                           minSize=(min_side, min_side))
    return [(int(x / scale), int(y / scale), int(w / scale), int(h / scale)) for x, y, w, h in found]
