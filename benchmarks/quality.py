"""Quality of a transform's output against a reference resize of its source, as the transform
benchmarks score it (benchmarks/srcset_bench.py, benchmarks/encode_frontier.py).

Both pictures are compared as a colour-managed browser shows them on a white page: the first frame,
converted to sRGB by its embedded profile when that profile is not sRGB, alpha flattened over white.
The reference is the source resized with lanczos3 from its full-size decode to exactly the output's
size. Two measures:
- SSIM (scikit-image) on luma, in this virtualenv;
- SSIMULACRA2 (the `ssimulacra2` package from PyPI, which this module installs into a virtualenv of
  its own, `.venv-metrics`, the first time it is asked for): a perceptual score over colour and
  several scales, 100 for the same picture and below zero for a very different one, far slower than
  SSIM (about 1.5 s of CPU for a 1920 px pair).
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pyvips

from assetcdn.edge.transform.decode import ICC, profile_description
from benchmarks.venvs import ensure_venv

METRICS_VENV = Path(".venv-metrics")
SSIMULACRA2_VERSION = "0.3.0"
SCORER = Path(__file__).with_name("ssimulacra2_score.py")


def as_displayed(image: pyvips.Image) -> pyvips.Image:
    """The first frame as a colour-managed browser shows it on a white page: 8-bit sRGB. A picture whose
    embedded profile is not sRGB (three of the srcset sources carry Adobe RGB) is converted by it.
    Compared raw, such a picture's numbers are not its colours: an output converted to sRGB (ours)
    scored about 10 levels of red off, and one passing the profile through unconverted (thumbor's)
    scored as exact."""
    page_height = image.get_page_height()
    if page_height < image.height:
        image = image.crop(0, 0, image.width, page_height)
    if image.get_typeof(ICC) and "srgb" not in profile_description(image.get(ICC)).lower().replace(" ", ""):
        image = image.icc_transform("srgb", embedded=True, intent="relative")
    if image.hasalpha():
        image = image.flatten(background=[255] * (image.bands - 1))
    if image.bands < 3:
        image = image.colourspace("srgb")
    return image.cast("uchar")


def reference_pair(original: bytes, output: bytes) -> tuple[pyvips.Image, pyvips.Image]:
    """(reference, output), both as displayed and of the same size."""
    out = as_displayed(pyvips.Image.new_from_buffer(output, ""))
    source = as_displayed(pyvips.Image.new_from_buffer(original, ""))
    reference = source.resize(out.width / source.width, vscale=out.height / source.height, kernel="lanczos3")
    width, height = min(reference.width, out.width), min(reference.height, out.height)
    return reference.crop(0, 0, width, height).cast("uchar"), out.crop(0, 0, width, height)


def luma(image: pyvips.Image) -> np.ndarray:
    """The picture's luma (libvips' "b-w" band), 8 bits, as the SSIM of these benchmarks reads it."""
    grey: np.ndarray = np.asarray(image.colourspace("b-w").extract_band(0).numpy(), dtype=np.uint8)
    return grey


def ssim(reference_luma: np.ndarray, output_luma: np.ndarray) -> float:
    """SSIM (scikit-image, its defaults, range 255) of two lumas, over the size they share: the one SSIM
    every benchmark reports."""
    from skimage.metrics import structural_similarity

    height = min(reference_luma.shape[0], output_luma.shape[0])
    width = min(reference_luma.shape[1], output_luma.shape[1])
    return float(structural_similarity(reference_luma[:height, :width], output_luma[:height, :width], data_range=255))


def _prepare_scorer() -> None:
    pyvips.cache_set_max(0)


def _score(png_dir: str | None, index: int, original: bytes, output: bytes) -> float:
    """SSIM of one pair; with `png_dir`, the pair also written there as ref-N.png / out-N.png (N: `index`)
    for SSIMULACRA2."""
    reference, out = reference_pair(original, output)
    if png_dir is not None:
        reference.pngsave(f"{png_dir}/ref-{index}.png", compression=1)
        out.pngsave(f"{png_dir}/out-{index}.png", compression=1)
    return ssim(luma(reference), luma(out))


def scores(pairs: list[tuple[bytes, bytes]], *, ssimulacra2: bool = False) -> tuple[list[float], list[float] | None]:
    """(SSIM, SSIMULACRA2 or None) of each (original, output) pair, computed on both cores."""
    bin_dir = ensure_venv(METRICS_VENV, "ssimulacra2", SSIMULACRA2_VERSION, "ssimulacra2") if ssimulacra2 else None
    with tempfile.TemporaryDirectory(prefix="quality-") as tmp:
        png_dir = tmp if ssimulacra2 else None
        # Spawned, not forked: a caller that ran libvips already (benchmarks/encode_frontier.py) has its
        # threads, and a forked child can wait forever on a lock one of them held.
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_prepare_scorer) as pool:
            ssims = list(pool.map(partial(_score, png_dir), range(len(pairs)), *zip(*pairs, strict=True),
                                  chunksize=4))
        if bin_dir is None:
            return ssims, None
        done = subprocess.run([str(bin_dir / "python"), str(SCORER), tmp, str(len(pairs))], capture_output=True,
                              check=True)
        perceptual: list[float] = json.loads(done.stdout)
        return ssims, perceptual
