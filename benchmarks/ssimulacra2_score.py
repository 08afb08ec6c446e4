"""SSIMULACRA2 of numbered picture pairs, run by the `.venv-metrics` interpreter (benchmarks/quality.py).

    python ssimulacra2_score.py DIR COUNT

DIR holds ref-N.png and out-N.png for N in 0 .. COUNT-1 (8-bit sRGB, as displayed); prints the scores
as a JSON list, in order. Uses both cores. Imports nothing of the project: its virtualenv has only
the `ssimulacra2` package and what that needs.
"""

import json
import sys
from concurrent.futures import ProcessPoolExecutor

from ssimulacra2 import compute_ssimulacra2


def _one(pair: tuple[str, str]) -> float:
    return float(compute_ssimulacra2(*pair))


def main() -> None:
    directory, count = sys.argv[1], int(sys.argv[2])
    pairs = [(f"{directory}/ref-{index}.png", f"{directory}/out-{index}.png") for index in range(count)]
    with ProcessPoolExecutor(2) as pool:
        print(json.dumps(list(pool.map(_one, pairs, chunksize=4))))


if __name__ == "__main__":
    main()
