"""Moderation: nudity from NudeNet's detector (its ONNX model ships inside the `nudenet` wheel and
runs on onnxruntime); violence, drugs, hate symbols and gore have no packaged model that works
offline, so they are reported as not evaluated (null) unless a configured vision endpoint scores them.

The verdict comes from what was evaluated: `unsafe` when a score reaches UNSAFE_AT, `borderline`
from BORDERLINE_AT, else `safe`. Exposed intimate body parts count fully towards nudity; covered
ones and exposed chests, bellies (swimwear, underwear) count SUGGESTIVE_WEIGHT of their score, so on
their own they reach `borderline` at most.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime

CATEGORIES = ("nudity", "violence", "drugs", "hateSymbols", "gore")
READABLE = {"nudity": "nudity", "violence": "violence", "drugs": "drugs", "hateSymbols": "hate symbols",
            "gore": "gore"}
UNSAFE_AT = 0.5
BORDERLINE_AT = 0.25
SUGGESTIVE_WEIGHT = 0.45
MIN_DETECTION = 0.2          # NudeNet's own detection threshold
INPUT_SIZE = 320             # the packaged model's resolution (320n.onnx)

# NudeNet's class order (its output rows 4..21).
LABELS = (
    "FEMALE_GENITALIA_COVERED", "FACE_FEMALE", "BUTTOCKS_EXPOSED", "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED", "MALE_BREAST_EXPOSED", "ANUS_EXPOSED", "FEET_EXPOSED", "BELLY_COVERED",
    "FEET_COVERED", "ARMPITS_COVERED", "ARMPITS_EXPOSED", "FACE_MALE", "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED", "ANUS_COVERED", "FEMALE_BREAST_COVERED", "BUTTOCKS_COVERED",
)
EXPOSED = frozenset({"BUTTOCKS_EXPOSED", "FEMALE_BREAST_EXPOSED", "FEMALE_GENITALIA_EXPOSED",
                     "MALE_GENITALIA_EXPOSED", "ANUS_EXPOSED"})
SUGGESTIVE = frozenset({"FEMALE_GENITALIA_COVERED", "FEMALE_BREAST_COVERED", "BUTTOCKS_COVERED",
                        "ANUS_COVERED", "MALE_BREAST_EXPOSED", "BELLY_EXPOSED"})


def _model_path() -> Path:
    spec = importlib.util.find_spec("nudenet")  # located, not imported: only its model file is used
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The nudenet package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "320n.onnx"


MODEL = f"nudenet-{importlib.metadata.version('nudenet')}/320n"


@dataclass(frozen=True)
class Detection:
    label: str
    score: float
    box: tuple[int, int, int, int]


class NudityDetector:
    """The NudeNet ONNX session, loaded on first use (about 12 MB). The model never changes, so one
    instance serves the whole process (`shared()`)."""

    _shared: NudityDetector | None = None

    def __init__(self) -> None:
        self._session: onnxruntime.InferenceSession | None = None
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> NudityDetector:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def _loaded(self) -> onnxruntime.InferenceSession:
        with self._lock:
            if self._session is None:
                # Imported here: control starts (and most analyses run) without onnxruntime's load cost.
                import onnxruntime  # noqa: PLC0415

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = 1   # the analysis pool's threads are the parallelism
                options.inter_op_num_threads = 1
                self._session = onnxruntime.InferenceSession(str(_model_path()), sess_options=options,
                                                             providers=["CPUExecutionProvider"])
            return self._session

    def detect(self, pixels: np.ndarray) -> list[Detection]:
        """NudeNet's detections in an RGB uint8 array, in its pixel coordinates."""
        import cv2  # noqa: PLC0415 (with the model: most of control never needs OpenCV)
        import numpy as np  # noqa: PLC0415 (control starts without numpy: its vision endpoint needs CATEGORIES)

        session = self._loaded()
        height, width = pixels.shape[:2]
        side = max(height, width)
        square = np.zeros((side, side, 3), np.uint8)
        square[:height, :width] = pixels[..., ::-1]  # NudeNet's own pipeline feeds the model BGR
        blob = cv2.resize(square, (INPUT_SIZE, INPUT_SIZE), interpolation=cv2.INTER_LINEAR)
        blob = np.ascontiguousarray(blob.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)
        output = session.run(None, {session.get_inputs()[0].name: blob})[0]
        rows = np.squeeze(output, 0).T                       # (anchors, 4 + classes)
        scores = rows[:, 4:].max(axis=1)
        keep = scores >= MIN_DETECTION
        rows, scores = rows[keep], scores[keep]
        if not len(rows):
            return []
        factor = side / INPUT_SIZE
        boxes = [[float((cx - w / 2) * factor), float((cy - h / 2) * factor), float(w * factor), float(h * factor)]
                 for cx, cy, w, h in rows[:, :4]]
        classes = rows[:, 4:].argmax(axis=1)
        chosen = cv2.dnn.NMSBoxes(boxes, scores.tolist(), 0.25, 0.45)
        found = []
        for i in np.array(chosen).reshape(-1):
            x, y, w, h = boxes[i]
            found.append(Detection(LABELS[int(classes[i])], float(scores[i]),
                                   (max(int(x), 0), max(int(y), 0), int(w), int(h))))
        return sorted(found, key=lambda d: d.score, reverse=True)


def nudity_score(detections: list[Detection]) -> tuple[float, Detection | None]:
    """The nudity score (0-1) and the detection it comes from."""
    best, source = 0.0, None
    for d in detections:
        weight = 1.0 if d.label in EXPOSED else SUGGESTIVE_WEIGHT if d.label in SUGGESTIVE else 0.0
        if d.score * weight > best:
            best, source = d.score * weight, d
    return round(best, 3), source


def verdict_of(scores: dict[str, float | None]) -> str:
    evaluated = [s for s in scores.values() if s is not None]
    worst = max(evaluated, default=0.0)
    return "unsafe" if worst >= UNSAFE_AT else "borderline" if worst >= BORDERLINE_AT else "safe"


@dataclass
class Moderation:
    categories: dict[str, float | None]
    reasoning: str
    model: str
    engine: str = "local"
    unparseable: bool = False           # the endpoint answered something that was not a verdict
    endpoint_failed: bool = False       # the configured endpoint did not answer at all
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        found = verdict_of(self.categories)
        if self.unparseable and found == "safe":
            return "borderline"         # an automated gate still has to decide
        return found

    @property
    def evaluated(self) -> list[str]:
        return [c for c in CATEGORIES if self.categories.get(c) is not None]

    def fields(self) -> dict[str, Any]:
        verdict = self.verdict
        missing = [READABLE[c] for c in CATEGORIES if self.categories.get(c) is None]
        reasoning = self.reasoning
        if missing:
            reasoning += f" Not evaluated (no offline model): {', '.join(missing)}."
        return {"safe": verdict == "safe", "verdict": verdict, "categories": dict(self.categories),
                "reasoning": reasoning[:240], "model": self.model, "engine": self.engine,
                "evaluated": self.evaluated,
                "degraded": bool(missing) or self.unparseable or self.endpoint_failed}


def _readable(label: str) -> str:
    return label.lower().replace("_", " ")


def moderate_locally(detector: NudityDetector, pixels: np.ndarray) -> Moderation:
    detections = detector.detect(pixels)
    score, source = nudity_score(detections)
    if source is None:
        reasoning = "NudeNet found no exposed or covered intimate body parts."
    else:
        reasoning = f"NudeNet found {_readable(source.label)} (detector score {source.score:.2f})."
    categories: dict[str, float | None] = {c: None for c in CATEGORIES}
    categories["nudity"] = score
    return Moderation(categories, reasoning, MODEL)
