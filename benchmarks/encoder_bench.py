"""Encoder settings per size class beside thumbor's (Pillow) encoders, on the same pixels.

    .venv/bin/python -m benchmarks.encoder_bench [--photos 4] [--formats jpeg,webp,avif] [--repeat 1]

Each picture of the srcset workload (benchmarks/transform_sources.py: the first N photos and one
cut-out flattened over white) is resized once per width (320 ... 1920) with libvips' lanczos3, and
those same pixels are encoded by each candidate setting: libvips' savers as the edge calls them
(assetcdn/edge/transform/encode.py, and its own `encode_image`) and Pillow with thumbor 7.8's options (JPEG optimize +
progressive, WebP and AVIF at Pillow's defaults: method 4, speed 6). So the figures compare the
encoders alone, not the resizes. Per size class (small: <= 640 px wide, large: wider) and setting:
encode CPU ms (process time, one libvips thread), total bytes and mean SSIM (luma, scikit-image)
against the reference resize, each relative to thumbor's encoder. The srcset benchmark
(benchmarks/srcset_bench.py) is what says whether a setting wins end to end.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyvips
from PIL import Image

from assetcdn.edge.transform.encode import encode_image
from benchmarks.quality import luma, ssim
from benchmarks.transform_sources import srcset_sources

WIDTHS = (320, 480, 640, 960, 1280, 1920)
SMALL_MAX = 640
QUALITY = {"jpeg": 80, "webp": 80, "avif": 60}
Encoder = Callable[[pyvips.Image, np.ndarray, int], bytes]


def _pillow(fmt: str, **options: object) -> Encoder:
    def encode(_image: pyvips.Image, pixels: np.ndarray, quality: int) -> bytes:
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format=fmt, quality=quality, **options)
        return out.getvalue()
    return encode


def _ours(fmt: str) -> Encoder:
    def encode(image: pyvips.Image, _pixels: np.ndarray, quality: int) -> bytes:
        return encode_image(image, fmt, quality)
    return encode


def _vips(saver: str, **options: object) -> Encoder:
    def encode(image: pyvips.Image, _pixels: np.ndarray, quality: int) -> bytes:
        encoded: bytes = getattr(image, saver)(Q=quality, keep="none", **options)
        return encoded
    return encode


CANDIDATES: dict[str, dict[str, Encoder]] = {
    "jpeg": {
        "thumbor (Pillow optimize progressive)": _pillow("JPEG", optimize=True, progressive=True),
        "assetcdn now (encode.py)": _ours("jpeg"),
        "vips progressive table 3 (until 2026-11-26)": _vips("jpegsave_buffer", optimize_coding=True, interlace=True,
                                                    quant_table=3),
        "vips baseline table 3": _vips("jpegsave_buffer", optimize_coding=True, quant_table=3),
        "vips baseline table 3, standard Huffman tables": _vips("jpegsave_buffer", quant_table=3),
        "vips baseline table 0": _vips("jpegsave_buffer", optimize_coding=True),
        "vips progressive table 0": _vips("jpegsave_buffer", optimize_coding=True, interlace=True),
        "vips progressive table 3 trellis": _vips("jpegsave_buffer", optimize_coding=True, interlace=True,
                                                  quant_table=3, trellis_quant=True),
        "vips baseline table 3 trellis": _vips("jpegsave_buffer", optimize_coding=True, quant_table=3,
                                               trellis_quant=True),
    },
    "webp": {
        "thumbor (Pillow method 4)": _pillow("WEBP"),
        "assetcdn now (encode.py)": _ours("webp"),
        "vips effort 4 (until 2026-11-26)": _vips("webpsave_buffer", effort=4),
        "vips effort 3": _vips("webpsave_buffer", effort=3),
        "vips effort 2": _vips("webpsave_buffer", effort=2),
        "vips effort 4 smart_subsample": _vips("webpsave_buffer", effort=4, smart_subsample=True),
        "vips effort 6": _vips("webpsave_buffer", effort=6),
    },
    "avif": {
        "thumbor (Pillow speed 6)": _pillow("AVIF"),
        "Pillow speed 8": _pillow("AVIF", speed=8),
        "Pillow speed 7": _pillow("AVIF", speed=7),
        "assetcdn now (encode.py)": _ours("avif"),
        "vips effort 2": _vips("heifsave_buffer", compression="av1", effort=2),
        "vips effort 3": _vips("heifsave_buffer", compression="av1", effort=3),
        "vips effort 1 tune=ssim": _vips("heifsave_buffer", compression="av1", effort=1, tune="ssim"),
        "vips effort 1 tune=psnr": _vips("heifsave_buffer", compression="av1", effort=1, tune="psnr"),
        "vips effort 1 tune=iq": _vips("heifsave_buffer", compression="av1", effort=1, tune="iq"),
        "vips effort 2 tune=ssim": _vips("heifsave_buffer", compression="av1", effort=2, tune="ssim"),
    },
}


@dataclass
class Tally:
    cpu_s: float = 0.0
    size: int = 0
    ssims: list[float] | None = None

    def add(self, cpu_s: float, size: int, score: float) -> None:
        self.cpu_s += cpu_s
        self.size += size
        if self.ssims is None:
            self.ssims = []
        self.ssims.append(score)


def score(reference_luma: np.ndarray, encoded: bytes) -> float:
    out = pyvips.Image.new_from_buffer(encoded, "")
    if out.hasalpha():
        out = out.flatten(background=[255, 255, 255])
    return ssim(reference_luma, luma(out.cast("uchar")))


def measure(formats: list[str], photos: int, repeat: int, only: str | None) -> None:
    pyvips.cache_set_max(0)
    pyvips.concurrency_set(1)
    every = srcset_sources()
    pictures = [p for p in every if p.kind == "photo"][:photos] + [p for p in every if p.kind == "alpha"][:1]
    tallies: dict[tuple[str, str, str], Tally] = {}
    for picture in pictures:
        full = pyvips.Image.new_from_buffer(picture.data, "")
        if full.hasalpha():
            full = full.flatten(background=[255, 255, 255])
        full = full.copy_memory()
        for width in WIDTHS:
            resized = full.resize(width / full.width, kernel="lanczos3").cast("uchar").copy_memory()
            pixels = resized.numpy()
            reference = luma(resized)
            size_class = "small" if width <= SMALL_MAX else "large"
            for fmt in formats:
                for name, encoder in CANDIDATES[fmt].items():
                    if only and only not in name and "thumbor" not in name:
                        continue
                    times = []
                    for _ in range(repeat):
                        began = time.process_time()
                        encoded = encoder(resized, pixels, QUALITY[fmt])
                        times.append(time.process_time() - began)
                    tallies.setdefault((fmt, size_class, name), Tally()).add(
                        statistics.median(times), len(encoded), score(reference, encoded))
    print("| format | sizes | setting | encode CPU ms / image | bytes | SSIM | CPU vs thumbor | bytes vs thumbor | "
          "SSIM vs thumbor |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for fmt in formats:
        for size_class in ("small", "large"):
            rows = [(name, t) for (f, c, name), t in tallies.items() if f == fmt and c == size_class]
            anchor = next(t for name, t in rows if "thumbor" in name)
            for name, tally in rows:
                count = len(tally.ssims or [])
                mean = statistics.fmean(tally.ssims or [0.0])
                base = statistics.fmean(anchor.ssims or [0.0])
                print(f"| {fmt} | {size_class} | {name} | {tally.cpu_s / count * 1000:.1f} | {tally.size:,} | {mean:.4f} | "
                      f"{tally.cpu_s / anchor.cpu_s:.2f} | {tally.size / anchor.size:.3f} | {mean - base:+.4f} |",
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--formats", default="jpeg,webp,avif")
    parser.add_argument("--repeat", type=int, default=1, help="encodes per setting and image (median CPU)")
    parser.add_argument("--only", default=None, help="only settings whose name contains this (and thumbor's)")
    args = parser.parse_args(argv)
    measure(args.formats.split(","), args.photos, args.repeat, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
