"""MiniLM cosine -> the 0-1 score whose 0.5 means what the original service's 0.5 meant.

The original service kept vector matches scoring above 0.5 with bge-base-en-v1.5, whose cosines
sit high: unrelated short English texts commonly score 0.3-0.5 there, so 0.5 is the edge of the
unrelated band ("more alike than unrelated text"), not "half similar". all-MiniLM-L6-v2 spreads
lower. On the benchmark catalog (benchmarks/search_bench.py: 336 assets, 62 tuning queries),
query-asset pairs that are not matches have a median cosine of 0.10 and a 95th percentile of
0.29, while true matches have a median of 0.43 and a 10th percentile of 0.28. So MiniLM's 0.30
plays bge's 0.5: it maps to 0.5, and the two sides are stretched linearly (0 -> 0, 1 -> 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

EDGE_OF_UNRELATED = 0.30   # MiniLM cosine that maps to 0.5


def calibrate(cosine: np.ndarray, edge: float = EDGE_OF_UNRELATED) -> np.ndarray:
    import numpy as np  # noqa: PLC0415 (numpy loads at the first search, not at every control start)

    cosine = np.clip(cosine, 0.0, 1.0)
    below = 0.5 * cosine / edge
    above = 0.5 + 0.5 * (cosine - edge) / (1.0 - edge)
    return np.where(cosine >= edge, above, below)
