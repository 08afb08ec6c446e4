"""A fleet of edges in front of one control plane: control's CPU and its statistics lag.

    make bench-fleet
    .venv/bin/python -m benchmarks.fleet_bench [--edges 10] [--rate 40000] [--duration 20]
    .venv/bin/python -m benchmarks.fleet_bench --v1 --rate 1000      (one item per delivery, as before)

One control process (``python -m assetcdn.control``) pinned to core 0, nothing else of ours on it;
this process (the simulated edges and the statistics reader) pinned to core 1. Each simulated edge
sends control, every ``flush_interval_s`` (the default configuration's, 1 s; the edges' sends spread
over the interval as real edges' timers are), the batch a real edge worker makes for that interval:
its ``DeliveryLog`` (assetcdn/edge/delivery_log.py) was fed ``rate`` deliveries per second of a
generated traffic mix (``Traffic``: a Zipf-popular catalogue over many zones, countries, statuses
with 1% of 404s, cache results), so the rollups and the request-log sample (the default budgets) are
what such an edge ships; each edge has ``TEMPLATES`` such intervals and cycles through them, with
the hour and batch id of the moment. Batches are signed and sent over one keep-alive connection per
edge, as edges do.

Measured over ``--duration`` seconds after a warm-up: control's CPU (utime + stime of all its threads,
from /proc) as a share of one core and per edge hit, and the statistics lag: ten times a second
``GET /api/insights/summary`` is read, and for each batch, the time from its sending until the
total counts it (control answers a batch once it is written, ``analytics.write_interval_s``). A hit waits up to one flush interval at its edge before it is sent, so its lag is that
plus the batch's; the report gives both in flush intervals. ``--v1``: the earlier protocol (one JSON
item per delivery, each a request-log entry), for the before figure: run it at a rate control can
take, it prints control's CPU per hit. ``ASSETCDN_ANALYTICS_*`` variables (the budgets, the write
interval) apply to the simulated edges and to control alike.

Loopback only; bounded; control is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from assetcdn.edge.delivery_log import HOUR_S, DeliveryLog
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from benchmarks.hits_bench import Server
from benchmarks.measure import load_average, machine, percentile, pin, stop_process
from tests.integration.harness import ACCOUNT, KEYS, free_port_block, up_env

TEMPLATES = 4                       # distinct intervals per simulated edge, cycled
BATCH_PATH = PREFIX + "/analytics"
SECRET = KEYS["ASSETCDN_CLUSTER_SECRET"]


@dataclass
class Traffic:
    """The generated mix: ``paths`` files over ``zones`` zones (Zipf popularity, exponent 1), 30
    countries (Zipf), 90% 200, 5% 304, 2% 206, 1% 301 and 1% 404 (over 500 missing paths per zone,
    uniform), 97% HIT, 2% MISS, 1% STALE."""
    zones: int = 20
    paths: int = 2_000

    def __post_init__(self) -> None:
        self.catalogue = [(f"zone{i % self.zones}", f"zone{i % self.zones}/v1/img/{i:05d}.webp", 2_000 + i % 200_000)
                          for i in range(self.paths)]
        self.popularity = [1 / (rank + 1) for rank in range(self.paths)]
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        self.countries = [letters[i % 26] + letters[(i * 7) % 26] for i in range(30)]
        self.country_weights = [1 / (rank + 1) for rank in range(30)]

    def fill(self, log: DeliveryLog, second: float, count: int, chosen: random.Random) -> None:
        """``count`` deliveries spread over the second starting at ``second``."""
        files = chosen.choices(self.catalogue, self.popularity, k=count)
        countries = chosen.choices(self.countries, self.country_weights, k=count)
        for index, ((zone, path, size), country) in enumerate(zip(files, countries, strict=True)):
            roll = chosen.random()
            status, sent = (200, size) if roll < 0.90 else (304, 0) if roll < 0.95 else \
                (206, size // 4) if roll < 0.97 else (301, 0) if roll < 0.98 else (0, 0)
            if status == 0:
                status, path, sent = 404, f"{zone}/v1/missing/{chosen.randrange(500)}.png", 180
            draw = chosen.random()
            cache = "HIT" if draw < 0.97 else "MISS" if draw < 0.99 else "STALE"
            log.delivered(second + index / count, "cdn.example", "GET", path, zone, status, sent, cache, country,
                          f"{int(second)}-{index}", "203.0.113.7", 0.0005)


def templates(traffic: Traffic, edge: int, rate: int, interval_s: float, budgets: dict[str, int]) -> list[dict[str, Any]]:
    """The batches one edge worker makes for ``TEMPLATES`` intervals of its traffic."""
    log = DeliveryLog("cf-ipcountry", node=f"edge-{edge}/0", log_per_s=budgets["log"], errors_per_s=budgets["errors"])
    chosen = random.Random(edge)
    made = []
    start = float(int(time.time()) // HOUR_S * HOUR_S)
    seconds_per_batch = max(1, round(interval_s))
    for index in range(TEMPLATES):
        for second in range(seconds_per_batch):
            traffic.fill(log, start + (index * seconds_per_batch + second), rate, chosen)
        batch = log.take(start + (index + 1) * seconds_per_batch + 0.5)
        assert batch is not None and log.take(start) is None, "one batch per interval at this rate"
        made.append(batch)
    return made


def hits_of(batch: dict[str, Any]) -> int:
    return sum(row[3] for row in batch["zones"])


def v1_items(batch: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """The same deliveries as version 1 items (one per delivery), for the earlier protocol's cost."""
    items = []
    for _, zone, path, status, requests, size in batch["paths"]:
        for _ in range(requests):
            items.append({"timestamp": now, "path": path, "zone": zone, "status": status,
                          "bytes": size // max(requests, 1), "cache": "HIT", "country": "DE", "method": "GET",
                          "requestId": uuid.uuid4().hex, "ip": "203.0.113.7"})
    return items


class Fleet:
    def __init__(self, control_url: str, edges: list[list[dict[str, Any]]], interval_s: float, v1_rate: int) -> None:
        self.control_url = control_url
        self.edges = edges
        self.interval_s = interval_s
        self.v1_rate = v1_rate
        self.sent: list[tuple[float, int]] = []   # (time a batch was sent, cumulative hits with it)
        self.sent_hits = 0
        self.errors: dict[str, int] = {}
        self.readings: list[tuple[float, int]] = []

    async def edge(self, index: int, batches: list[dict[str, Any]], until: float) -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            # Edges start at different moments of the interval, as independent processes do.
            await asyncio.sleep(self.interval_s * index / len(self.edges))
            turn = 0
            next_at = time.monotonic()
            while time.monotonic() < until:
                template = batches[turn % len(batches)]
                turn += 1
                now = time.time()
                if self.v1_rate:
                    items = v1_items(template, now)[: int(self.v1_rate * self.interval_s) // len(self.edges)]
                    body_dict: dict[str, Any] = {"v": 1, "node": template["node"], "hits": items}
                    hits = len(items)
                else:
                    hour = int(now) // HOUR_S * HOUR_S
                    if hour != template["zones"][0][0]:  # the rows of this hour (once an hour per template)
                        for name in ("zones", "paths", "countries"):
                            template[name] = [[hour, *row[1:]] for row in template[name]]
                    body_dict = {**template, "log": [[now - 0.5, *row[1:]] for row in template["log"]]}
                    hits = hits_of(template)
                body = orjson.dumps({**body_dict, "batch": uuid.uuid4().hex})
                sent_at = time.monotonic()
                for attempt in range(100):  # as an edge does: the same batch again, until control takes it
                    if await self.send(session, body, 0.2 if attempt else 0.0):
                        break
                self.sent_hits += hits
                self.sent.append((sent_at, self.sent_hits))
                next_at += self.interval_s
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def send(self, session: aiohttp.ClientSession, body: bytes, after_s: float) -> bool:
        await asyncio.sleep(after_s)
        headers = {**sign_request(SECRET, "POST", BATCH_PATH, body), "Content-Type": "application/json"}
        async with session.post(self.control_url + BATCH_PATH, data=body, headers=headers) as resp:
            reply = await resp.read()
            if resp.status == 200:
                return True
            problem = f"{resp.status} {reply[:200].decode(errors='replace')}"
            self.errors[problem] = self.errors.get(problem, 0) + 1
            return False

    async def read_statistics(self, until: float) -> None:
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < until:
                async with session.get(f"{self.control_url}/api/insights/summary?days=1", headers=ACCOUNT) as resp:
                    total = (await resp.json())["TotalRequests"]
                self.readings.append((time.monotonic(), total))
                await asyncio.sleep(0.1)

    async def run(self, warmup_s: float, duration_s: float, control: Server) -> tuple[float, float, float]:
        until = time.monotonic() + warmup_s + duration_s
        tasks = [asyncio.create_task(self.edge(i, batches, until)) for i, batches in enumerate(self.edges)]
        reader = asyncio.create_task(self.read_statistics(until + 3 * self.interval_s))
        await asyncio.sleep(warmup_s)
        cpu_before, hits_before, began = control.cpu_seconds(), self.sent_hits, time.monotonic()
        await asyncio.gather(*tasks)
        cpu, elapsed = control.cpu_seconds() - cpu_before, time.monotonic() - began
        hits = self.sent_hits - hits_before
        await reader
        return cpu / elapsed, cpu / hits * 1e6 if hits else 0.0, hits / elapsed

    def lags(self) -> list[float]:
        """Per batch: seconds from its sending until statistics count it (the reply comes once it is
        written, so this includes control's wait for the group write)."""
        found = []
        for sent_at, cumulative in self.sent:
            seen = next((at for at, total in self.readings if at >= sent_at and total >= cumulative), None)
            if seen is not None:
                found.append(seen - sent_at)
        return found


def start_control(workdir: Path, core: str, source: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port_block(1)
    env = up_env() if source is None else up_env({"PYTHONPATH": str(source)})
    with open(workdir / "control.log", "wb") as log:
        process = subprocess.Popen(["taskset", "-c", core, sys.executable, "-m", "assetcdn.control", "--data-dir",
                                    str(workdir / "data"), "--host", "127.0.0.1", "--port", str(port)],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    async def wait() -> None:
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(url + "/api/health") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("control did not start")
                await asyncio.sleep(0.2)

    asyncio.run(wait())
    return process, url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=10)
    parser.add_argument("--rate", type=int, default=40_000, help="deliveries per second per edge")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--v1", action="store_true", help="the earlier protocol: one item per delivery")
    parser.add_argument("--source", type=Path, help="run control from this checkout (a before figure)")
    parser.add_argument("--control-core", default="0")
    parser.add_argument("--load-core", default="1")
    args = parser.parse_args(argv)
    if not 0 < args.edges <= 100 or not 0 < args.rate <= 1_000_000 or not 0 < args.duration <= 120:
        parser.error("--edges within (0, 100], --rate within (0, 1e6], --duration within (0, 120]")
    os.sched_setaffinity(0, {int(args.load_core)})
    settings = load_settings()  # ASSETCDN_ANALYTICS_* apply to the simulated edges and to control
    analytics = settings.section("analytics")
    interval_s = float(analytics["flush_interval_s"])
    budgets = {"log": int(analytics["log_deliveries_per_s"]), "errors": int(analytics["log_errors_per_s"])}
    print(f"# fleet_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    traffic = Traffic()
    template_rate = args.rate if not args.v1 else max(args.rate, 2_000)
    began = time.monotonic()
    edges = [templates(traffic, i, template_rate, interval_s, budgets) for i in range(args.edges)]
    rows = statistics.mean(len(b["zones"]) + len(b["paths"]) + len(b["countries"]) for e in edges for b in e)
    logged = statistics.mean(len(b["log"]) for e in edges for b in e)
    print(f"# {args.edges} edges x {args.rate:,} hits/s{' (version 1 items)' if args.v1 else ''}, flush every "
          f"{interval_s:g} s: {rows:,.0f} rollup rows and {logged:,.0f} request-log entries per batch "
          f"(generated in {time.monotonic() - began:.0f} s)", flush=True)
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        process, url = start_control(Path(tmp), args.control_core, args.source)
        try:
            control = Server("control", url, [process.pid])
            pin([process.pid], args.control_core)
            fleet = Fleet(url, edges, interval_s, args.rate * args.edges if args.v1 else 0)
            cores, us_per_hit, hits_per_s = asyncio.run(fleet.run(args.warmup, args.duration, control))
        finally:
            stop_process(process)
            control_log = (Path(tmp) / "control.log").read_text(errors="replace")
    lags = fleet.lags()
    print(f"# load average after: {load_average()}\n")
    print("| edges | hits/s sent (fleet) | control CPU (share of one core) | control CPU per hit | "
          "statistics lag after a flush, median / p95 / max | from the hit, p95 / max (flush intervals) | sends retried |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    if lags:
        median, worst = statistics.median(lags), max(lags)
        p95 = percentile(lags, 0.95)
        print(f"| {args.edges} | {hits_per_s:,.0f} | {100 * cores:.1f}% | {us_per_hit:.3f} us | "
              f"{median:.2f} s / {p95:.2f} s / {worst:.2f} s | {(p95 + interval_s) / interval_s:.2f} / "
              f"{(worst + interval_s) / interval_s:.2f} | {sum(fleet.errors.values())} |")
    else:
        print(f"| {args.edges} | {hits_per_s:,.0f} | {100 * cores:.1f}% | {us_per_hit:.3f} us | "
              f"never caught up | - | {sum(fleet.errors.values())} |")
    for problem, count in fleet.errors.items():
        print(f"# failed send ({count}x): {problem}")
    if fleet.errors:
        first = control_log.find("Traceback")
        print("# control's log, from its first error:\n" + control_log[max(first, 0):][:3000])
    target = args.edges * args.rate
    print(f"# at the target {target:,} hits/s, control's CPU per hit makes {us_per_hit * target / 1e4:.1f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
