"""q: the encoder's quality, 1-100 (None: the encoder's default for the output format).

Only lossy encoders take it; for png and gif it cannot change the bytes, so the cache key
drops it there. The encode step at the end of the pipeline reads it.
"""

from __future__ import annotations

from assetcdn.edge.transform.options.base import Query, TransformOption, int_param

# Formats whose encoder takes a quality; for the others q does not change the bytes.
LOSSY_OUTPUTS = frozenset({"jpeg", "webp", "avif", "heic", "jxl"})


def parse(query: Query) -> int | None:
    return int_param(query, "q", 1, 100)


def key(quality: int | None, output_format: str) -> str:
    return f"q{quality}" if quality is not None and output_format in LOSSY_OUTPUTS else ""


QUALITY: TransformOption[int | None] = TransformOption(name="quality", params=("q",), default=None, parse=parse, key=key)
