"""The memory tier's cost of a 100 KB put that evicts small memory-only entries (a one-worker edge's victims).

    .venv/bin/python -m benchmarks.evict_micro [--rounds 5]

The tier (64 MB, victims kept) is filled with 5 KB pull-zone-like entries (a path tag, nine header fields), then
300 entries of 100 KB are put, each evicting about seventeen of the small ones to the victims; the victims are
settled as the disk writer would every 200 (not timed apart: the figure is the event loop's share of what
`make bench-pull`'s 100 KB fills pay after a 5 KB round). Prints microseconds per 100 KB put, the least and the
median of the rounds. One process, no I/O.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

from assetcdn.edge.cache.entry import MemoryOnly
from assetcdn.edge.cache.memory import MemoryTier

HEADERS = (("content-type", "application/octet-stream"), ("etag", '"6581e0a5-1400"'),
           ("last-modified", "Sat, 05 Dec 2026 10:00:00 GMT"), ("cache-control", "max-age=3600"),
           ("date", "Sat, 05 Dec 2026 22:00:00 GMT"), ("accept-ranges", "bytes"), (":status", "200"),
           (":req", "1764972000.1234"), (":resp", "1764972000.1235"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    tier = MemoryTier(64 << 20, 1 << 20)
    tier.keeps_victims = True
    small, large = os.urandom(5 * 1024), os.urandom(100 * 1024)
    made = 0

    def entry(body: bytes) -> MemoryOnly:
        nonlocal made
        made += 1
        return MemoryOnly(f"pull:{hashlib.sha256(str(made).encode()).hexdigest()[:40]}", "application/octet-stream",
                          '"6581e0a5-1400"', (f"fill/fill5k/r1/{made}",), len(body), time.time(), body=body,
                          headers=HEADERS)

    per_put = []
    for _ in range(max(1, args.rounds)):
        for obj in [entry(small) for _ in range(12_000)]:
            tier.put(obj)
        tier.settle(tier.victims(), stored=True)
        puts = [entry(large) for _ in range(300)]
        started = time.perf_counter()
        for obj in puts:
            tier.put(obj)
            if tier.victim_count > 200:
                tier.settle(tier.victims(), stored=True)
        per_put.append((time.perf_counter() - started) / len(puts) * 1e6)
    print(f"100 KB put evicting 5 KB entries: {min(per_put):.1f} us least, {statistics.median(per_put):.1f} median "
          f"of {len(per_put)} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
