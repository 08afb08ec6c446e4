"""Image analysis: face detection accuracy, smart-crop gravity accuracy, moderation and alt-text latency.

    .venv/bin/python -m benchmarks.vision_bench [--seed 12] [--repeat 3]

Everything is built from photographs scikit-image ships (no download): the astronaut and the
cameraman; 100 real faces and 100 non-faces of its `lfw_subset` (25 px crops, enlarged); 20 photos
without people (coffee, the cat, the rocket, coins, the Hubble field...). Composites paste heads,
faces, non-faces and objects onto plain backgrounds (where a detector that equalises the whole
histogram fails) and onto texture, at random sizes and places, so every picture has a known answer.

1. Face presence, per detector: precision and recall (a face counts as found when a detection's
   centre lies in the pasted face's box) and latency per picture (resize to the detector's size
   included). "today's edge" is the cascade the edge ran before assetcdn/shared/faces.py:
   global histogram equalisation, then OpenCV's frontal-face Haar cascade.
2. Smart crop (assetcdn/control/ai/smart_crop.py, end to end from JPEG bytes): on pictures with a face, how
   often the answer is `face` with the focus on it; on a subject pasted into a known cell of the
   thirds grid, how often the compass gravity names that cell (overall and per confidence).
3. Moderation (NudeNet, 320n.onnx on onnxruntime, one thread): model load, inference on the
   analysis copy, and the whole analysis from JPEG bytes. Alt text (local engine with Tesseract).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
import pyvips
import skimage.data

from assetcdn.control.ai.alt_text import describe
from assetcdn.control.ai.image_input import load_for_analysis
from assetcdn.control.ai.moderation import NudityDetector, moderate_locally
from assetcdn.control.ai.ocr import OCR_SIZE, read_text, tesseract
from assetcdn.control.ai.smart_crop import compass, smart_crop
from assetcdn.shared.faces import DETECT_SIZE, DETECTOR, detect_faces_haar, detect_faces_rgb
from assetcdn.shared.manifest import make_entry
from benchmarks.measure import percentile

NO_FACE_PHOTOS = ("coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "coins", "horse",
                  "clock", "brick", "grass", "gravel", "moon", "page", "text", "logo", "colorwheel", "retina",
                  "cell", "microaneurysms", "shepp_logan_phantom")
Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class Sample:
    name: str
    pixels: np.ndarray       # RGB uint8
    face: Box | None         # None: no face; else the face (or head) box


def rgb(image: np.ndarray) -> np.ndarray:
    if image.dtype != np.uint8:
        image = (np.clip(image, 0, 1) * 255).astype(np.uint8)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3])


class Composer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.textures = [rgb(skimage.data.brick()), rgb(skimage.data.grass()), rgb(skimage.data.gravel())]

    def canvas(self, plain: bool) -> np.ndarray:
        width, height = self.rng.choice([(960, 640), (640, 960), (800, 800), (1600, 1067)])
        if plain:
            level = self.rng.choice([255, 240, 200, 128, 30, 0])
            tint = np.array([self.rng.randint(-20, 20) for _ in range(3)])
            return np.clip(np.full((height, width, 3), level, np.int16) + tint, 0, 255).astype(np.uint8)
        return cv2.resize(self.rng.choice(self.textures), (width, height), interpolation=cv2.INTER_LINEAR)

    def paste(self, canvas: np.ndarray, patch: np.ndarray, cell: tuple[int, int] | None = None) -> tuple[np.ndarray, Box]:
        height, width = canvas.shape[:2]
        ph, pw = patch.shape[:2]
        if cell is None:
            x, y = self.rng.randint(0, width - pw), self.rng.randint(0, height - ph)
        else:  # centred in the cell, jittered by up to a tenth of the picture
            cx = (cell[0] + 0.5) * width / 3 + self.rng.uniform(-0.1, 0.1) * width
            cy = (cell[1] + 0.5) * height / 3 + self.rng.uniform(-0.1, 0.1) * height
            x = int(min(max(cx - pw / 2, 0), width - pw))
            y = int(min(max(cy - ph / 2, 0), height - ph))
        out = canvas.copy()
        out[y:y + ph, x:x + pw] = patch
        return out, (x, y, pw, ph)

    def scaled(self, patch: np.ndarray, long_side: int) -> np.ndarray:
        factor = long_side / max(patch.shape[:2])
        method = cv2.INTER_AREA if factor < 1 else cv2.INTER_CUBIC
        return cv2.resize(patch, None, fx=factor, fy=factor, interpolation=method)


def face_set(seed: int) -> list[Sample]:
    """The labelled face-presence set: about half with one face."""
    compose = Composer(seed)
    astronaut, camera = rgb(skimage.data.astronaut()), rgb(skimage.data.camera())
    samples = [Sample("astronaut", astronaut, (178, 63, 94, 116)), Sample("camera", camera, (195, 113, 60, 80))]
    samples += [Sample(name, rgb(getattr(skimage.data, name)()), None) for name in NO_FACE_PHOTOS]
    samples.append(Sample("motorcycle", rgb(skimage.data.stereo_motorcycle()[0]), None))
    heads = [astronaut[30:210, 150:300], camera[90:215, 180:270]]
    lfw = [rgb(x) for x in skimage.data.lfw_subset()]
    faces, non_faces = lfw[:100], lfw[100:]
    for i in range(32):
        canvas = compose.canvas(plain=i % 4 != 0)
        head = compose.scaled(heads[i % 2], int(min(canvas.shape[:2]) * compose.rng.uniform(0.12, 0.45)))
        pixels, box = compose.paste(canvas, head)
        samples.append(Sample(f"head-{i}", pixels, box))
    for i in range(32):
        canvas = compose.canvas(plain=i % 3 != 0)
        face = compose.scaled(faces[compose.rng.randrange(100)], int(min(canvas.shape[:2]) * compose.rng.uniform(0.12, 0.3)))
        pixels, box = compose.paste(canvas, face)
        samples.append(Sample(f"lfw-face-{i}", pixels, box))
    for i in range(32):
        canvas = compose.canvas(plain=i % 3 != 0)
        patch = compose.scaled(non_faces[compose.rng.randrange(100)], int(min(canvas.shape[:2]) * compose.rng.uniform(0.12, 0.3)))
        samples.append(Sample(f"lfw-nonface-{i}", compose.paste(canvas, patch)[0], None))
    objects = [rgb(skimage.data.chelsea())[20:250, 60:290], rgb(skimage.data.coffee())[30:380, 150:480]]
    for i in range(8):
        canvas = compose.canvas(plain=True)
        patch = compose.scaled(objects[i % 2], int(min(canvas.shape[:2]) * compose.rng.uniform(0.2, 0.5)))
        samples.append(Sample(f"object-{i}", compose.paste(canvas, patch)[0], None))
    return samples


def subject_set(seed: int) -> list[tuple[Sample, str]]:
    """Subjects (cat, cup, rocket, a person's torso seen from behind the face) in a known cell."""
    compose = Composer(seed + 1)
    subjects = [rgb(skimage.data.chelsea())[20:250, 60:290], rgb(skimage.data.coffee())[30:380, 150:480],
                rgb(skimage.data.rocket())[:, 200:450], rgb(skimage.data.horse())]
    found = []
    for i in range(72):
        canvas = compose.canvas(plain=i % 2 == 0)
        patch = compose.scaled(subjects[i % 4], int(max(canvas.shape[:2]) * compose.rng.uniform(0.15, 0.3)))
        cell = (compose.rng.randrange(3), compose.rng.randrange(3))
        pixels, (x, y, w, h) = compose.paste(canvas, patch, cell)
        height, width = pixels.shape[:2]
        found.append((Sample(f"subject-{i}", pixels, None), compass((x + w / 2) / width, (y + h / 2) / height)))
    return found


def shrink(pixels: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    factor = min(1.0, size / max(pixels.shape[:2]))
    if factor == 1.0:
        return pixels, 1.0
    return cv2.resize(pixels, None, fx=factor, fy=factor, interpolation=cv2.INTER_AREA), factor


def todays_edge(pixels: np.ndarray) -> list[Box]:
    """The edge's face detection before assetcdn/shared/faces.py: equalizeHist, then the default frontal-face cascade at 640 px."""
    small, factor = shrink(pixels, 640)
    grey = cv2.equalizeHist(cv2.cvtColor(small, cv2.COLOR_RGB2GRAY))
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    min_side = max(20, int(min(grey.shape[:2]) * 0.08))
    found = cascade.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=5, minSize=(min_side, min_side))
    return [(int(x / factor), int(y / factor), int(w / factor), int(h / factor)) for x, y, w, h in found]


def shared_detector(detect: Callable[[np.ndarray], list]) -> Callable[[np.ndarray], list[Box]]:  # type: ignore[type-arg]
    def run(pixels: np.ndarray) -> list[Box]:
        small, factor = shrink(pixels, DETECT_SIZE)
        return [(int(f.x / factor), int(f.y / factor), int(f.width / factor), int(f.height / factor))
                for f in detect(small)]
    return run


def centre_in(box: Box, area: Box) -> bool:
    x, y, w, h = box
    ax, ay, aw, ah = area
    return ax <= x + w / 2 <= ax + aw and ay <= y + h / 2 <= ay + ah


def bench_faces(samples: list[Sample], repeat: int) -> None:
    detectors = {"today's edge: equalizeHist + Haar (640 px)": todays_edge,
                 f"assetcdn/shared/faces.py fallback: CLAHE + Haar ({DETECT_SIZE} px)": shared_detector(detect_faces_haar),
                 f"assetcdn/shared/faces.py: {DETECTOR} ({DETECT_SIZE} px)": shared_detector(detect_faces_rgb)}
    positives = sum(s.face is not None for s in samples)
    print(f"\n### Face presence: {len(samples)} pictures, {positives} with a face\n")
    print("| detector | precision | recall | false faces | missed | ms p50 | ms p95 |")
    print("|---|---|---|---|---|---|---|")
    for name, detect in detectors.items():
        tp = fp = fn = 0
        times: list[float] = []
        for sample in samples:
            for _ in range(repeat):
                start = time.perf_counter()
                boxes = detect(sample.pixels)
                times.append((time.perf_counter() - start) * 1000)
            if sample.face is None:
                fp += bool(boxes)
            elif any(centre_in(b, sample.face) for b in boxes):
                tp += 1
            else:
                fn += 1
        precision = tp / max(tp + fp, 1)
        print(f"| {name} | {precision:.3f} | {tp / positives:.3f} | {fp} | {fn} | "
              f"{percentile(times, 0.5):.1f} | {percentile(times, 0.95):.1f} |")


def jpeg(pixels: np.ndarray) -> bytes:
    return pyvips.Image.new_from_array(pixels).jpegsave_buffer(Q=90)


def analyse(data: bytes):  # type: ignore[no-untyped-def]
    return load_for_analysis(data, max_pixels=50_000_000, size=DETECT_SIZE)


def bench_smart_crop(samples: list[Sample], subjects: list[tuple[Sample, str]]) -> None:
    with_face = [s for s in samples if s.face is not None]
    right = 0
    times: list[float] = []
    for sample in with_face:
        data = jpeg(sample.pixels)
        start = time.perf_counter()
        found = smart_crop(analyse(data))
        times.append((time.perf_counter() - start) * 1000)
        right += found.gravity == "face" and centre_in((found.focus[0], found.focus[1], 0, 0), sample.face or (0, 0, 0, 0))
    print("\n### Smart crop\n")
    print("| set | pictures | right | accuracy | ms p50 (JPEG in) | ms p95 |")
    print("|---|---|---|---|---|---|")
    print(f"| a face: `face`, focus on it | {len(with_face)} | {right} | {right / len(with_face):.3f} | "
          f"{percentile(times, 0.5):.1f} | {percentile(times, 0.95):.1f} |")
    by_confidence: dict[str, list[bool]] = {}
    times = []
    for sample, expected in subjects:
        data = jpeg(sample.pixels)
        start = time.perf_counter()
        found = smart_crop(analyse(data))
        times.append((time.perf_counter() - start) * 1000)
        by_confidence.setdefault(found.confidence, []).append(found.gravity == expected)
    hits = [h for v in by_confidence.values() for h in v]
    print(f"| a subject in a known cell: its compass gravity | {len(hits)} | {sum(hits)} | "
          f"{sum(hits) / len(hits):.3f} | {percentile(times, 0.5):.1f} | {percentile(times, 0.95):.1f} |")
    for confidence in ("high", "medium", "low"):
        found_hits = by_confidence.get(confidence, [])
        if found_hits:
            print(f"| ... answered with confidence `{confidence}` | {len(found_hits)} | {sum(found_hits)} | "
                  f"{sum(found_hits) / len(found_hits):.3f} | | |")


def bench_moderation(samples: list[Sample], repeat: int) -> None:
    start = time.perf_counter()
    detector = NudityDetector()
    detector.detect(np.zeros((64, 64, 3), np.uint8))
    load_ms = (time.perf_counter() - start) * 1000
    pictures = [s for s in samples if s.name in ("astronaut", "camera", "coffee", "chelsea", "rocket")
                or s.name.startswith("head-")][:20]
    infer: list[float] = []
    whole: list[float] = []
    for sample in pictures:
        data = jpeg(sample.pixels)
        source = analyse(data)
        pixels = source.pixels
        for _ in range(repeat):
            t0 = time.perf_counter()
            detector.detect(pixels)
            infer.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            moderate_locally(detector, analyse(data).pixels)
            whole.append((time.perf_counter() - t0) * 1000)
    print("\n### Moderation (NudeNet 320n, onnxruntime, 1 thread)\n")
    print("| step | ms p50 | ms p95 |")
    print("|---|---|---|")
    print(f"| model load + first inference (once per process) | {load_ms:.0f} | |")
    print(f"| inference on the {DETECT_SIZE} px analysis copy | {percentile(infer, 0.5):.1f} | "
          f"{percentile(infer, 0.95):.1f} |")
    print(f"| whole analysis from JPEG bytes (decode, copy, inference, verdict) | {percentile(whole, 0.5):.1f} | "
          f"{percentile(whole, 0.95):.1f} |")


def bench_alt_text(samples: list[Sample]) -> None:
    pictures = [s for s in samples if s.name in ("astronaut", "camera", "coffee", "chelsea", "rocket", "page", "text")]
    times: list[float] = []
    for sample in pictures:
        data = jpeg(sample.pixels)
        entry = make_entry(f"demo/v1/banners/{sample.name}.jpg", len(data), "", "", "")
        start = time.perf_counter()
        source = analyse(data)
        faces = detect_faces_rgb(source.pixels)
        ocr = read_text(source.render(OCR_SIZE), 5.0)
        found = describe(source, entry, faces, ocr)
        times.append((time.perf_counter() - start) * 1000)
        print(f"- `{sample.name}.jpg`: {found.alt}")
    engine = f"Tesseract {tesseract()[1]}" if tesseract() else "no Tesseract"  # type: ignore[index]
    print(f"\nAlt text, local engine ({engine}): p50 {percentile(times, 0.5):.0f} ms, "
          f"max {max(times):.0f} ms over {len(times)} pictures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per picture")
    args = parser.parse_args()
    samples = face_set(args.seed)
    bench_faces(samples, args.repeat)
    bench_smart_crop(samples, subject_set(args.seed))
    bench_moderation(samples, args.repeat)
    bench_alt_text(samples)


if __name__ == "__main__":
    main()
