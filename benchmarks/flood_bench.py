"""What a stranger's floods cost the others: gzip bombs forwarded by the edge, and long search queries.

    .venv/bin/python -m benchmarks.flood_bench [--bombs 8] [--rounds 3] [--searches 20]

One `assetcdn up` (control plus one edge with one worker) on loopback, unpinned (the whole tree and
this client share the machine's cores: record `uptime` beside the numbers).

- Gzip flood: `--bombs` concurrent senders of POST /api/chat bodies, each gzip of 256 MB of zeros
  (~250 KB on the wire), each sending `--rounds` bombs and going on for at least `--seconds` (at
  most one bomb per `--interval` seconds each), while one client asks the edge for a cached 5 KB
  file in a loop.
  Reported: the hit latency (median, p99, max) before and during the flood, and the largest number
  of bytes the edge's processes held in temporary files (sampled from /proc/<pid>/fd every 20 ms).
- Search: `--searches` concurrent GET /api/search with an 8 KB query of 1,000 distinct words, then
  with the longest query accepted (24 words, 200 characters), through the edge; reported: the
  statuses, the wall time until the last answer, and how long a short query asked meanwhile took.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks.measure import load_average, percentile
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

ZONE = "flood"
HIT_PATH = f"/{ZONE}/v1/files/hit.txt"


def temp_bytes(pids: list[int], tmp_prefix: str) -> int:
    """Bytes in the temporary files (unlinked or not) the processes hold open under `tmp_prefix`."""
    total = 0
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
                if target.startswith(tmp_prefix):
                    total += os.stat(fd).st_size
            except OSError:
                continue
    return total


async def hit_latencies(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> list[float]:
    times = []
    while not stop.is_set():
        start = time.perf_counter()
        async with session.get(url) as resp:
            await resp.read()
            assert resp.status == 200, resp.status
        times.append(time.perf_counter() - start)
        await asyncio.sleep(0.005)
    return times


def summary(times: list[float]) -> str:
    p99 = percentile(times, 0.99)
    return (f"n={len(times)} median {statistics.median(times) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
            f"max {max(times) * 1000:.1f} ms")


async def gzip_flood(cdn: RunningCdn, bombs: int, rounds: int, seconds: float, interval: float,
                     tmp_prefix: str) -> None:
    edge = cdn.edge_urls[0]
    bomb = gzip.compress(b"\0" * (256 * 1024 * 1024), compresslevel=9)
    print(f"bomb: {len(bomb):,} bytes on the wire, 256 MB decoded")
    pids = cdn.pids("--name edge")
    async with aiohttp.ClientSession() as session:
        stop = asyncio.Event()
        quiet = asyncio.create_task(hit_latencies(session, edge + HIT_PATH, stop))
        await asyncio.sleep(2)
        stop.set()
        print("hits, quiet:      ", summary(await quiet))

        peak = 0
        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, temp_bytes(pids, tmp_prefix))
                await asyncio.sleep(0.02)

        async def one_bomb() -> int:
            async with aiohttp.ClientSession() as own, own.post(
                    edge + "/api/chat", data=bomb,
                    headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}) as resp:
                await resp.read()
                return resp.status

        statuses: list[int] = []

        async def bomber(until: float) -> None:
            sent = 0
            while sent < rounds or time.perf_counter() < until:
                began = time.perf_counter()
                statuses.append(await one_bomb())
                sent += 1
                await asyncio.sleep(max(interval - (time.perf_counter() - began), 0))

        sampler = asyncio.create_task(sample())
        stop = asyncio.Event()
        busy = asyncio.create_task(hit_latencies(session, edge + HIT_PATH, stop))
        start = time.perf_counter()
        await asyncio.gather(*(bomber(start + seconds) for _ in range(bombs)))
        flood_s = time.perf_counter() - start
        stop.set()
        print("hits, under flood:", summary(await busy))
        sampling = False
        await sampler
        print(f"flood: {bombs} senders, {len(statuses)} bombs in {flood_s:.2f} s, statuses {sorted(set(statuses))}, "
              f"edge temp files peak {peak / 1e6:.1f} MB")


async def search_flood(cdn: RunningCdn, searches: int) -> None:
    edge = cdn.edge_urls[0]
    words = [f"w{i:04d}x" for i in range(1000)]
    long_query = " ".join(words)[:8192]
    async with aiohttp.ClientSession() as session:

        async def one(query: str) -> tuple[int, float]:
            start = time.perf_counter()
            # a distinct X-Forwarded-For per search is ignored (no trusted proxy): one client; limit 100/min
            async with session.get(edge + "/api/search", params={"q": query}) as resp:
                await resp.read()
                return resp.status, time.perf_counter() - start

        await one("warm up the model")
        # The longest query the route accepts (24 words, 200 characters), and an 8 KB one of 1,000 words.
        longest_accepted = " ".join(f"w{i:03d}qx" for i in range(24))[:194]  # the last word is replaced
        for name, query in (("8 KB, 1,000 words", long_query), ("24 words, 200 chars", longest_accepted)):
            start = time.perf_counter()
            floods = [asyncio.create_task(one(f"{query.rsplit(' ', 1)[0]} {i:04d}")) for i in range(searches)]
            await asyncio.sleep(0.2)
            short_status, short_s = await one("blue logo")
            results = await asyncio.gather(*floods)
            wall = time.perf_counter() - start
            statuses = {status: sum(1 for s, _ in results if s == status) for status, _ in results}
            slowest = max(seconds for _, seconds in results)
            print(f"search: {searches} queries of {name}, statuses {statuses}, last answered after {wall:.2f} s "
                  f"(slowest {slowest:.2f} s); a short query meanwhile: {short_status} in {short_s * 1000:.0f} ms")


async def prepare(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(cdn.control_url + "/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        async with session.put(cdn.control_url + f"/api/storage{HIT_PATH}", data=os.urandom(5000),
                               headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
        for _ in range(50):
            async with session.get(cdn.edge_urls[0] + HIT_PATH) as resp:
                await resp.read()
                if resp.status == 200 and resp.headers.get("X-Cache") == "HIT":
                    return
            await asyncio.sleep(0.2)
    raise AssertionError("the file never became a hit")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bombs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="bombs each sender sends at least")
    parser.add_argument("--seconds", type=float, default=6.0, help="senders go on sending for at least this long")
    parser.add_argument("--interval", type=float, default=0.0, help="each sender sends at most one bomb this often")
    parser.add_argument("--searches", type=int, default=20)
    args = parser.parse_args()
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="flood-bench-") as tmp:
        spool = Path(tmp) / "spool"
        spool.mkdir()
        # The edge's temporary files go here, so they can be told from anyone else's.
        cdn = start_cdn(Path(tmp), env_extra={"TMPDIR": str(spool), "ASSETCDN_SEARCH_RATE_LIMIT_PER_MINUTE": "0",
                                              "ASSETCDN_AI_CHAT_RATE_LIMIT_PER_MINUTE": "0"})
        try:
            asyncio.run(prepare(cdn))
            asyncio.run(gzip_flood(cdn, args.bombs, args.rounds, args.seconds, args.interval, str(spool)))
            asyncio.run(search_flood(cdn, args.searches))
        finally:
            cdn.stop()
    print(f"load average after: {load_average()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
