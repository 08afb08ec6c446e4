"""Transform misses per core beside thumbor, in one run: `make bench-transforms`.

    .venv/bin/python -m benchmarks.srcset_bench [--rounds 1] [--new-widths 24] [--latency-requests 72]

thumbor 7.8 (PyPI, installed by this benchmark into its own virtualenv `.venv-thumbor`; PIL engine,
file loader, no storage, no result storage) and `assetcdn up` (control, one edge, its image-pool
workers) run side by side, each server's whole process tree pinned to core 0 with taskset, this
load generator on core 1. Every request is a miss on both sides: each round uploads (and writes,
for thumbor's file loader) the pictures with a new comment in their bytes, so the content, its
SHA-256, every cache key and our decoded-source cache are new, and thumbor has nothing stored.

Workloads (benchmarks/transform_sources.py makes the pictures, the same on every run):
- srcset: 20 pictures (16 JPEG photos of 2000-4000 px, 3 PNG cut-outs with alpha, 1 animated GIF)
  at widths 320, 480, 640, 960, 1280 and 1920 in JPEG, WebP and AVIF: 360 requests per server, in
  one shuffled order, as browsers loading a page of images ask for them.
- every width new: one 2000x1333 JPEG, a new width (300-1999 px) on every request, per format.
Requests alternate between the servers one by one at one request at a time, so the machine's
load hits both alike. The CPU each request cost is read from /proc (user + system time of every
process of the server's tree, before and after); "per core" is requests per CPU-second: what one
fully used core would serve, the figure that stays comparable on a shared machine.

Both servers get the same nominal quality (q) per format. Quality is SSIM (scikit-image, on luma)
of the decoded output against a reference resize of the original to the output's exact size
(lanczos3 in libvips from the full-size decode), both as a colour-managed browser shows them
(benchmarks/quality.py: first frame, sRGB by the embedded profile, alpha over white), computed
once the load is over; the table without it is printed first. With --ssimulacra2, SSIMULACRA2 too.

Then latency: a fresh round of srcset requests at 4 concurrent requests, alternating the two
servers by blocks; p50 and p99. And memory: the image workers' RSS before and after the rounds
(the decoded-source cache is most of the difference) and the cache's configured bound.
Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from assetcdn.shared.config import load_settings
from benchmarks.measure import (
    cpu_seconds,
    load_average,
    percentile,
    pin,
    process_tree,
    pss_bytes,
    rss_bytes,
    stat_fields,
    stop_process,
)
from benchmarks.quality import scores
from benchmarks.transform_sources import SourcePicture, single_photo, srcset_sources
from benchmarks.venvs import ensure_venv
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, free_port_block, start_cdn

SERVER_CORE, LOAD_CORE = "0", "1"
WIDTHS = (320, 480, 640, 960, 1280, 1920)
FORMATS = ("jpeg", "webp", "avif")
# The nominal quality sent to both servers: thumbor's default (80) for JPEG and WebP; for AVIF the
# value AVIF deployments use for the same look (both encoders map it onto AV1's quantiser).
QUALITY = {"jpeg": 80, "webp": 80, "avif": 60}
CONTENT_TYPES = {"jpeg": "image/jpeg", "webp": "image/webp", "avif": "image/avif"}
ZONE = "bench"
THUMBOR_VERSION = "7.8.0"
THUMBOR_VENV = Path(".venv-thumbor")
SERVERS = ("thumbor", "assetcdn")
REQUEST_TIMEOUT_S = 120
THUMBOR_CONF = """
LOADER = 'thumbor.loaders.file_loader'
FILE_LOADER_ROOT_PATH = {root!r}
STORAGE = 'thumbor.storages.no_storage'
RESULT_STORAGE = None
ALLOW_UNSAFE_URL = True
QUALITY = 80
MAX_AGE = 0
"""


# --- processes -----------------------------------------------------------------------------------

@dataclass
class Tree:
    """A server's process tree: what it spends (CPU seconds, counting reaped children) and holds."""

    name: str
    root: int
    pids: list[int] = field(default_factory=list)

    def refresh(self) -> None:
        self.pids = process_tree(self.root)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pids, reaped_children=True)

    def pin(self, core: str) -> None:
        """Every process of the tree onto `core`, checked (``measure.pin``): one forked between a walk and its
        parent's taskset (an image worker launched in the background as the edge starts) would otherwise keep the
        load generator's core and work beside ours for free."""
        self.pids = pin([self.root], core)


def image_workers(tree: Tree) -> list[int]:
    """The image pool's processes: its fork server, the workers forked from it (which carry the fork
    server's command line) and multiprocessing's resource tracker."""
    tree.refresh()
    found = []
    for pid in tree.pids:
        try:
            if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def check_worker_count(pool: list[int], env: dict[str, str]) -> None:
    """Refuse to measure an image pool of another size than the one asked for (the configured
    [transform] concurrency unless --env sets it): its kept decodes, and so ours, depend on it."""
    expected = int(env.get("ASSETCDN_TRANSFORM_CONCURRENCY",
                           load_settings(environ={}).get("transform", "concurrency")))
    parents = {pid: fields[1] for pid in pool if (fields := stat_fields(pid)) is not None}
    workers = [pid for pid, parent in parents.items() if int(parent) in parents]  # forked by the fork server
    if len(workers) != expected:
        raise RuntimeError(f"the image pool runs {len(workers)} workers, not {expected}")
    print(f"# image workers: {len(workers)}", flush=True)


def ensure_thumbor() -> Path:
    """thumbor in `.venv-thumbor` (benchmarks/venvs.py)."""
    return ensure_venv(THUMBOR_VENV, "thumbor", THUMBOR_VERSION, "thumbor") / "thumbor"


def start_thumbor(thumbor_bin: Path, conf: Path) -> tuple[subprocess.Popen[bytes], int]:
    """thumbor on a free loopback port, pinned to the server core, once it answers its health check."""
    port = free_port_block(1)
    process = subprocess.Popen(["taskset", "-c", SERVER_CORE, str(thumbor_bin), "--ip", "127.0.0.1", "--port", str(port),
                                "--conf", str(conf), "-l", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=2).read()
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process, 10)
                raise RuntimeError(f"thumbor did not start on port {port}") from None
            time.sleep(0.2)


def thumbor_path(name: str, width: int, fmt: str) -> str:
    """thumbor's URL path for `name` at `width` in `fmt` at the benchmark's nominal quality."""
    return f"/unsafe/{width}x0/filters:format({fmt}):quality({QUALITY[fmt]})/{name}"


# --- pictures with a round's comment in their bytes ---------------------------------------------

def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def marked(data: bytes, note: str) -> bytes:
    """The same picture with `note` in a comment: new bytes (a new SHA-256), the same pixels."""
    text = note.encode()
    if data[:2] == b"\xff\xd8":   # JPEG: a COM segment after SOI
        return data[:2] + b"\xff\xfe" + struct.pack(">H", len(text) + 2) + text + data[2:]
    if data[:8] == b"\x89PNG\r\n\x1a\n":   # PNG: a tEXt chunk after IHDR (8 + 25 bytes)
        return data[:33] + _png_chunk(b"tEXt", b"Comment\x00" + text) + data[33:]
    if data[:3] == b"GIF":   # GIF: a comment extension after the global colour table
        flags = data[10]
        end = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
        return data[:end] + b"\x21\xfe" + bytes([len(text)]) + text + b"\x00" + data[end:]
    raise ValueError("unknown picture format")


# --- requests --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Job:
    source: str        # picture name in the round's files
    width: int
    fmt: str


@dataclass
class Answer:
    server: str
    job: Job
    body: bytes
    latency_s: float
    cpu_s: float


class Servers:
    def __init__(self, thumbor_url: str, cdn_url: str, trees: dict[str, Tree]) -> None:
        self.urls = {"thumbor": thumbor_url, "assetcdn": cdn_url}
        self.trees = trees

    def url(self, server: str, round_name: str, job: Job) -> str:
        name = f"{round_name}-{job.source}"
        if server == "thumbor":
            return self.urls["thumbor"] + thumbor_path(name, job.width, job.fmt)
        return (f"{self.urls['assetcdn']}/api/transform?url=/{ZONE}/v1/pictures/{name}&w={job.width}"
                f"&format={job.fmt}&q={QUALITY[job.fmt]}")

    async def fetch(self, session: aiohttp.ClientSession, server: str, round_name: str, job: Job) -> tuple[bytes, float]:
        began = time.perf_counter()
        async with session.get(self.url(server, round_name, job)) as resp:
            body = await resp.read()
            took = time.perf_counter() - began
            # thumbor answers an animated GIF as a GIF whatever format it is asked for
            allowed = ("image/gif",) if server == "thumbor" and job.source.endswith(".gif") else ()
            if resp.status != 200 or not resp.headers.get("Content-Type", "").startswith(
                    (CONTENT_TYPES[job.fmt], *allowed)):
                raise RuntimeError(f"{server} {job}: {resp.status} {resp.headers.get('Content-Type')} {body[:200]!r}")
            if server == "assetcdn" and resp.headers.get("X-Cache") != "MISS":
                raise RuntimeError(f"assetcdn {job}: expected a miss, got X-Cache {resp.headers.get('X-Cache')}")
        return body, took

    async def one_by_one(self, session: aiohttp.ClientSession, round_name: str, jobs: list[Job]) -> list[Answer]:
        """Each job on each server, alternating (the first server alternates too), one at a time."""
        answers = []
        for index, job in enumerate(jobs):
            order = SERVERS if index % 2 == 0 else SERVERS[::-1]
            for server in order:
                # The tree is listed again before and after each request: a worker started while it ran
                # (an image worker replaced after an overrun or recycled) is charged from its first tick.
                # Listed every 20 requests, such a worker's CPU until the next listing was charged to no one.
                tree = self.trees[server]
                tree.refresh()
                before = tree.cpu_seconds()
                body, took = await self.fetch(session, server, round_name, job)
                tree.refresh()
                answers.append(Answer(server, job, body, took, tree.cpu_seconds() - before))
        return answers

    async def concurrently(self, session: aiohttp.ClientSession, round_name: str, jobs: list[Job],
                           concurrency: int, block: int) -> dict[str, list[float]]:
        """Latencies at `concurrency` requests in flight, the servers taking turns by blocks of jobs."""
        latencies: dict[str, list[float]] = {server: [] for server in SERVERS}
        for start in range(0, len(jobs), block):
            chunk = jobs[start:start + block]
            for server in (SERVERS if (start // block) % 2 == 0 else SERVERS[::-1]):
                queue = list(chunk)

                async def worker(server: str = server, queue: list[Job] = queue) -> None:
                    while queue:
                        _, took = await self.fetch(session, server, round_name, queue.pop())
                        latencies[server].append(took)

                await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies


# --- the run ------------------------------------------------------------------------------------

async def put_round(session: aiohttp.ClientSession, cdn: RunningCdn, root: Path, round_name: str,
                    pictures: list[SourcePicture]) -> dict[str, bytes]:
    """The round's pictures, uploaded to the CDN and written for thumbor; the bytes by picture name."""
    originals = {}
    for picture in pictures:
        data = marked(picture.data, f"bench round {round_name}")
        name = f"{round_name}-{picture.name}"
        (root / name).write_bytes(data)
        async with session.put(f"{cdn.control_url}/api/storage/{ZONE}/v1/pictures/{name}", data=data,
                               headers=ACCESS) as resp:
            if resp.status != 201:
                raise RuntimeError(f"upload {name}: {resp.status} {await resp.text()}")
        originals[picture.name] = data
    # The edge learns of new files by a push from control: wait until it serves the last one.
    last = f"{cdn.edge_urls[0]}/{ZONE}/v1/pictures/{round_name}-{pictures[-1].name}"
    deadline = time.monotonic() + 60
    while True:
        async with session.head(last) as resp:
            if resp.status == 200:
                return originals
        if time.monotonic() > deadline:
            raise RuntimeError(f"the edge never served {last}")
        await asyncio.sleep(0.2)


@dataclass
class Row:
    workload: str
    fmt: str
    server: str
    requests: int
    cpu_s: float
    wall_s: float
    bytes: int
    ssim: float
    ssimulacra2: float | None = None

    @property
    def per_core(self) -> float:
        return self.requests / self.cpu_s if self.cpu_s else 0.0


def rows_of(workload: str, answers: list[Answer], quality: list[float],
            perceptual: list[float] | None = None) -> list[Row]:
    """One row per output format and server; the animated GIF's answers on rows of their own (thumbor
    keeps it a GIF, we make an animated WebP or the first frame)."""
    rows = []
    for animated in (False, True):
        for fmt in FORMATS:
            label = f"{fmt} from the animated GIF" if animated else fmt
            for server in SERVERS:
                picked = [(a, q, p) for a, q, p in zip(answers, quality, perceptual or [0.0] * len(answers), strict=True)
                          if a.server == server and a.job.fmt == fmt and a.job.source.endswith(".gif") == animated]
                if picked:
                    rows.append(Row(workload, label, server, len(picked), sum(a.cpu_s for a, _, _ in picked),
                                    sum(a.latency_s for a, _, _ in picked), sum(len(a.body) for a, _, _ in picked),
                                    statistics.fmean(q for _, q, _ in picked),
                                    statistics.fmean(p for _, _, p in picked) if perceptual is not None else None))
    return rows


def table(rows: list[Row]) -> str:
    perceptual = any(row.ssimulacra2 is not None for row in rows)
    extra = " SSIMULACRA2 | SSIMULACRA2 vs thumbor |" if perceptual else ""
    lines = ["| workload | format | server | requests | req/s per core | CPU ms / request | wall ms / request | "
             "bytes | SSIM | per core vs thumbor | bytes vs thumbor | SSIM vs thumbor |" + extra,
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if perceptual else "")]
    anchors = {(r.workload, r.fmt): r for r in rows if r.server == "thumbor"}
    for row in rows:
        anchor = anchors[(row.workload, row.fmt)]
        line = (f"| {row.workload} | {row.fmt} | {row.server} | {row.requests} | {row.per_core:.1f} | "
                f"{row.cpu_s / row.requests * 1000:.1f} | {row.wall_s / row.requests * 1000:.1f} | "
                f"{row.bytes:,} | {row.ssim:.4f} | {row.per_core / anchor.per_core:.2f}x | "
                f"{row.bytes / anchor.bytes:.3f} | {row.ssim - anchor.ssim:+.4f} |")
        if row.ssimulacra2 is not None and anchor.ssimulacra2 is not None:
            line += f" {row.ssimulacra2:.2f} | {row.ssimulacra2 - anchor.ssimulacra2:+.2f} |"
        lines.append(line)
    return "\n".join(lines)


async def run(args: argparse.Namespace, workdir: Path) -> None:
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    thumbor_bin = ensure_thumbor()
    every = srcset_sources()
    if args.pictures >= len(every):
        pictures = every
    else:   # a shorter run keeps the mix: photos, one cut-out, the animated GIF
        photos, cutouts = [p for p in every if p.kind == "photo"], [p for p in every if p.kind == "alpha"]
        pictures = photos[:max(args.pictures - 2, 1)] + cutouts[:1] + [p for p in every if p.kind == "animated"]
    single = single_photo()
    root = workdir / "thumbor-files"
    root.mkdir()
    (workdir / "thumbor.conf").write_text(THUMBOR_CONF.format(root=str(root)))
    thumbor, port = start_thumbor(thumbor_bin, workdir / "thumbor.conf")
    # The machine is shared: a 1920 px AVIF of a cut-out can take more than the default 10 s budget of
    # CPU-starved wall time, and thumbor has no budget at all.
    # The image pool as `assetcdn up` runs it by default ([transform] concurrency workers, started with the
    # edge), not the test harness's economy of one worker started at the first job: with one worker, half
    # the kept decodes and twice the decodes (JPEG 1.2x thumbor instead of 1.8x on 2026-11-27).
    cdn = start_cdn(workdir, image_workers_at_start=True,
                    env_extra={"ASSETCDN_TRANSFORM_TIME_BUDGET_S": "300", **dict(args.env)})
    try:
        trees = {"thumbor": Tree("thumbor", thumbor.pid), "assetcdn": Tree("assetcdn", cdn.process.pid)}
        for tree in trees.values():
            tree.pin(SERVER_CORE)
        servers = Servers(f"http://127.0.0.1:{port}", cdn.edge_urls[0], trees)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=16)) as session:
            async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
                if resp.status != 201:
                    raise RuntimeError(f"zone: {resp.status} {await resp.text()}")
            # Warm-up: both servers load their code and codecs on a picture outside the measured set.
            warm = await put_round(session, cdn, root, "warm", [single])
            await servers.one_by_one(session, "warm", [Job(single.name, 500 + i, fmt)
                                                       for i, fmt in enumerate(FORMATS * 2)])
            del warm
            for tree in trees.values():   # every process of both trees exists by now: all on the server core
                tree.pin(SERVER_CORE)
            pool = image_workers(trees["assetcdn"])
            check_worker_count(pool, dict(args.env))
            workers_before = (rss_bytes(pool), pss_bytes(pool))
            print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {os.cpu_count()} cores, load average before: "
                  f"{load_average()}", flush=True)
            rng = random.Random(args.seed)
            srcset_answers: list[Answer] = []
            originals: dict[str, bytes] = {}
            for round_index in range(args.rounds):
                round_name = f"r{round_index}"
                originals = await put_round(session, cdn, root, round_name, pictures)
                jobs = [Job(p.name, width, fmt) for p in pictures for width in WIDTHS for fmt in FORMATS]
                rng.shuffle(jobs)
                began = time.monotonic()
                srcset_answers += await servers.one_by_one(session, round_name, jobs)
                print(f"# srcset round {round_index + 1}: {len(jobs)} requests per server in "
                      f"{time.monotonic() - began:.0f} s, load average {load_average()}", flush=True)
            pool = image_workers(trees["assetcdn"])
            workers_after = (rss_bytes(pool), pss_bytes(pool))
            single_bytes = await put_round(session, cdn, root, "single", [single])
            new_jobs = [Job(single.name, 300 + (index * 1699 // max(args.new_widths - 1, 1)), fmt)
                        for fmt in FORMATS for index in range(args.new_widths)]
            rng.shuffle(new_jobs)
            new_answers = await servers.one_by_one(session, "single", new_jobs)
            print(f"# every width new: {len(new_jobs)} requests per server, load average {load_average()}", flush=True)
            latency_round = await put_round(session, cdn, root, "latency", pictures)
            del latency_round
            latency_jobs = [Job(p.name, width, fmt) for p in pictures for width in WIDTHS for fmt in FORMATS]
            rng.shuffle(latency_jobs)
            latencies = await servers.concurrently(session, "latency", latency_jobs[:args.latency_requests], 4, 24)
            print(f"# latency at 4 concurrent: {args.latency_requests} requests per server, "
                  f"load average after: {load_average()}", flush=True)
        unmeasured = rows_of("srcset", srcset_answers, [0.0] * len(srcset_answers))
        unmeasured += rows_of("every width new", new_answers, [0.0] * len(new_answers))
        print()
        print(table(unmeasured))
        print()
        print("| miss latency, 4 concurrent (srcset mix) | p50 ms | p99 ms | requests |")
        print("|---|---:|---:|---:|")
        for server in SERVERS:
            values = latencies[server]
            print(f"| {server} | {percentile(values, 0.5) * 1000:.0f} | {percentile(values, 0.99) * 1000:.0f} | "
                  f"{len(values)} |")
        print()
        print(f"assetcdn image pool (fork server and workers), RSS / PSS: {workers_before[0] / 2**20:.0f} / "
              f"{workers_before[1] / 2**20:.0f} MB after warm-up, {workers_after[0] / 2**20:.0f} / "
              f"{workers_after[1] / 2**20:.0f} MB after the srcset rounds (RSS counts pages the workers share "
              "with the fork server in each; decoded-source cache bound per worker: transform.decoded_cache_mb)",
              flush=True)
        print(f"\n# measuring quality (SSIM{', SSIMULACRA2' if args.ssimulacra2 else ''})...", flush=True)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))   # the load is over: score on both cores
        rows = rows_of("srcset", srcset_answers,
                       *scores([(originals[a.job.source], a.body) for a in srcset_answers], ssimulacra2=args.ssimulacra2))
        rows += rows_of("every width new", new_answers,
                        *scores([(single_bytes[single.name], a.body) for a in new_answers], ssimulacra2=args.ssimulacra2))
        print()
        print(table(rows))
    finally:
        cdn.stop()
        stop_process(thumbor, 10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="srcset rounds (each with new bytes)")
    parser.add_argument("--new-widths", type=int, default=24, help="every-width-new requests per format")
    parser.add_argument("--latency-requests", type=int, default=72)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--pictures", type=int, default=20,
                        help="fewer pictures for a shorter run (N-2 photos, one cut-out, the GIF)")
    parser.add_argument("--ssimulacra2", action="store_true",
                        help="also score SSIMULACRA2 (installs it into .venv-metrics; about 10 more minutes)")
    parser.add_argument("--env", action="append", default=[], type=lambda text: tuple(text.split("=", 1)),
                        help="NAME=VALUE for assetcdn up (e.g. ASSETCDN_TRANSFORM_CONCURRENCY=1)")
    args = parser.parse_args(argv)
    # A timeout's SIGTERM unwinds like Ctrl-C, so both servers are stopped and the files removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="srcset-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
