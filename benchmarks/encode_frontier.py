"""Other encoder settings against thumbor's output, end to end, on the srcset pictures.

    .venv/bin/python -m benchmarks.encode_frontier [--format webp] [--settings 4:80,2:80,2:78.5] [--ssimulacra2]

The question it answers: can a cheaper setting, at a quality that brings the bytes back to
thumbor's, keep the quality of thumbor's output? Or: where does a setting land against thumbor at
equal bytes? Each setting is EFFORT:QUALITY: for WebP libwebp's method (0-6) and its quality (a
float, as libwebp takes it); for AVIF libvips' effort (aom cpu-used 9 - effort) and Q (an integer).
thumbor and we use the same libwebp, and at the same settings (method 4) our encode of a picture is
byte for byte thumbor's, so that encode is a fixed cost unless a setting changes.

Our pipeline runs in this process as an image worker runs it (the pool's job function, kept decodes,
the srcset's 114 still-picture requests of the format, 19 pictures x 6 widths in a shuffled order) up
to the encoder, and the pixels it hands the encoder are kept. Each setting then encodes those same
pixels through the product's encoder (assetcdn/edge/transform/encode.py, its effort swapped), one
libvips thread, CPU per image. thumbor 7.8 (srcset_bench's `.venv-thumbor`) answers the same
requests at the srcset benchmark's nominal quality. Bytes against thumbor's, SSIM and optionally
SSIMULACRA2 against the reference resize, as displayed (benchmarks/quality.py), and how many of the
114 outputs score below thumbor's on SSIM. Loopback only; thumbor is stopped at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import random
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyvips

from assetcdn.shared.config import load_settings
from assetcdn.shared.manifest import format_of
from benchmarks.measure import stop_process
from benchmarks.quality import scores
from benchmarks.srcset_bench import (
    QUALITY,
    THUMBOR_CONF,
    WIDTHS,
    ensure_thumbor,
    start_thumbor,
    thumbor_path,
)
from benchmarks.transform_sources import srcset_sources

Key = tuple[str, int]   # picture name, width


EFFORT_SETTINGS = {"webp": "WEBP_EFFORT", "avif": "AVIF_EFFORT"}


def our_pixels(pictures: dict[str, bytes], fmt: str, seed: int) -> tuple[dict[Key, pyvips.Image], dict[Key, bytes]]:
    """What our pipeline hands the format's encoder for each request, and what it answers now."""
    from assetcdn.edge import image_worker  # noqa: PLC0415 (set up as a worker before the jobs load)

    image_worker.configure_libvips()
    for module in image_worker.PRELOAD:
        importlib.import_module(module)
    from assetcdn.edge.transform import encode, jobs  # noqa: PLC0415
    from assetcdn.edge.transform.budgets import TransformLimits  # noqa: PLC0415
    from assetcdn.edge.transform.options import parse_transform_options  # noqa: PLC0415

    jobs.keep_decoded_sources(int(load_settings(environ={}).get("transform", "decoded_cache_mb")) * 2**20)
    work = [(name, width) for name in pictures for width in WIDTHS]
    random.Random(seed).shuffle(work)
    kept: dict[Key, pyvips.Image] = {}
    answers: dict[Key, bytes] = {}
    real = encode.ENCODERS[fmt]
    key: Key = work[0]

    def keep(image: pyvips.Image, quality: int) -> bytes:
        kept[key] = image.copy_memory()
        return real(kept[key], quality)

    encode.ENCODERS[fmt] = keep
    try:
        for key in work:  # `keep` files the pixels under the request being run
            name, width = key
            opts = parse_transform_options({"url": f"/z/v1/p/{name}", "w": str(width), "format": fmt,
                                            "q": str(QUALITY[fmt])})
            variant = jobs.transform_variant(format_of(name), opts, fmt, TransformLimits(time_budget_s=300),
                                             pictures[name], source_sha256=hashlib.sha256(pictures[name]).hexdigest())
            answers[key] = variant.body
    finally:
        encode.ENCODERS[fmt] = real
    return kept, answers


def thumbor_answers(pictures: dict[str, bytes], fmt: str, workdir: Path) -> dict[Key, bytes]:
    root = workdir / "files"
    root.mkdir()
    for name, data in pictures.items():
        (root / name).write_bytes(data)
    (workdir / "thumbor.conf").write_text(THUMBOR_CONF.format(root=str(root)))
    thumbor, port = start_thumbor(ensure_thumbor(), workdir / "thumbor.conf")
    try:
        return {(name, width): urllib.request.urlopen(f"http://127.0.0.1:{port}{thumbor_path(name, width, fmt)}",
                                                      timeout=120).read()
                for name in pictures for width in WIDTHS}
    finally:
        stop_process(thumbor, 10)


@contextmanager
def effort(fmt: str, value: int) -> Iterator[None]:
    from assetcdn.edge.transform import encode  # noqa: PLC0415

    name = EFFORT_SETTINGS[fmt]
    before = getattr(encode, name)
    setattr(encode, name, value)
    try:
        yield
    finally:
        setattr(encode, name, before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="webp", choices=sorted(EFFORT_SETTINGS))
    parser.add_argument("--settings", default="4:80,2:80,2:79,2:78.5,2:78",
                        help="EFFORT:QUALITY,... (WebP: libwebp method, quality; AVIF: libvips effort, Q)")
    parser.add_argument("--ssimulacra2", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    from assetcdn.edge.transform import encode  # noqa: PLC0415

    pictures = {p.name: p.data for p in srcset_sources() if p.kind != "animated"}
    kept, ours_now = our_pixels(pictures, args.format, args.seed)
    with tempfile.TemporaryDirectory(prefix="webp-frontier-") as tmp:
        theirs = thumbor_answers(pictures, args.format, Path(tmp))
    keys = sorted(kept)
    their_bytes = sum(len(theirs[k]) for k in keys)
    their_ssim, their_perceptual = scores([(pictures[k[0]], theirs[k]) for k in keys], ssimulacra2=args.ssimulacra2)
    print(f"thumbor: {len(keys)} outputs, {their_bytes:,} bytes, SSIM {statistics.fmean(their_ssim):.4f}"
          + (f", SSIMULACRA2 {statistics.fmean(their_perceptual):.2f}" if their_perceptual else ""), flush=True)
    print("| setting | encode CPU ms / image | bytes vs thumbor | SSIM vs thumbor | outputs below thumbor's SSIM |"
          " SSIMULACRA2 vs thumbor |")
    print("|---|---:|---:|---:|---:|---:|")
    rows: list[tuple[str, dict[Key, bytes], float | None]] = [("assetcdn as it runs (served)", ours_now, None)]
    for setting in args.settings.split(","):
        level, quality = setting.split(":")
        # libwebp takes a float quality (Pillow passes it on); libvips' AVIF saver an integer
        value = float(quality) if args.format == "webp" else int(quality)
        bodies, cpu = {}, 0.0
        with effort(args.format, int(level)):
            for key in keys:
                began = time.process_time()
                bodies[key] = encode.ENCODERS[args.format](kept[key], value)  # type: ignore[arg-type]
                cpu += time.process_time() - began
        rows.append((f"effort {level}, quality {quality}", bodies, cpu / len(keys)))
    for label, bodies, cpu_s in rows:
        ssims, perceptual = scores([(pictures[k[0]], bodies[k]) for k in keys], ssimulacra2=args.ssimulacra2)
        below = sum(ours < theirs_ for ours, theirs_ in zip(ssims, their_ssim, strict=True))
        print(f"| {label} | {'' if cpu_s is None else f'{cpu_s * 1000:.1f}'} | "
              f"{sum(len(bodies[k]) for k in keys) / their_bytes:.3f} | "
              f"{statistics.fmean(ssims) - statistics.fmean(their_ssim):+.4f} | {below} / {len(keys)} | "
              + (f"{statistics.fmean(perceptual) - statistics.fmean(their_perceptual):+.2f} |"
                 if perceptual and their_perceptual else " |"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
