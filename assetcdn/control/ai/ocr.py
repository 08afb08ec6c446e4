"""Text in an image, from Debian's Tesseract (`tesseract-ocr`, installed by `make setup`) when it is on
PATH; without it alt text is built from the other signals and says so.

Tesseract runs as a subprocess with a time limit and one thread (OMP_THREAD_LIMIT=1), on a greyscale
PNG at most OCR_SIZE pixels on its long side. Page segmentation mode 3 (automatic) keeps photographs
quiet where mode 11 (sparse text) reads texture as letters; words below MIN_WORD_CONFIDENCE, or
without two letters or digits, are dropped.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

import pyvips

OCR_SIZE = 1600
MIN_WORD_CONFIDENCE = 75.0
MAX_WORDS = 12
_WORD = re.compile(r"[A-Za-z0-9]")
_VERSION = re.compile(r"tesseract\s+v?([0-9][0-9.]*)", re.IGNORECASE)


@dataclass(frozen=True)
class OcrResult:
    words: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


@cache
def tesseract() -> tuple[str, str] | None:
    """(path, version) of the tesseract binary, or None when it is not installed."""
    path = shutil.which("tesseract")
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.search((done.stdout + done.stderr).decode("utf-8", "replace"))
    return path, found.group(1) if found else "unknown"


def read_text(image: pyvips.Image, timeout_s: float) -> OcrResult | None:
    """The words Tesseract reads in `image`; None when Tesseract is not installed or failed."""
    found = tesseract()
    if found is None:
        return None
    scale = min(1.0, OCR_SIZE / max(image.width, image.height))
    grey = (image.resize(scale) if scale < 1.0 else image).colourspace("b-w").cast("uchar")
    png = grey.write_to_buffer(".png")
    env = {"PATH": os.environ.get("PATH", ""), "OMP_THREAD_LIMIT": "1", "LC_ALL": "C"}
    try:
        done = subprocess.run([found[0], "stdin", "stdout", "--psm", "3", "-l", "eng", "tsv"], input=png,
                              capture_output=True, timeout=max(timeout_s, 0.1), env=env, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    rows = csv.DictReader(io.StringIO(done.stdout.decode("utf-8", "replace")), delimiter="\t",
                          quoting=csv.QUOTE_NONE)
    words = []
    for row in rows:
        word = (row.get("text") or "").strip()
        try:
            confidence = float(row.get("conf") or -1)
        except ValueError:
            continue
        if confidence >= MIN_WORD_CONFIDENCE and len(_WORD.findall(word)) >= 2:
            words.append(word)
        if len(words) >= MAX_WORDS:
            break
    return OcrResult(tuple(words))
