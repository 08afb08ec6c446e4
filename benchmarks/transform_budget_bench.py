"""Hostile transforms against a real `assetcdn up`: time to the answer and the edge's memory.

    .venv/bin/python -m benchmarks.transform_budget_bench [--env KEY=VALUE ...] [--misses 40]

Builds, with pyvips, a 9,000-frame 100x100 GIF (about 2.8 MB) and a 4000x4000 SVG whose one
rectangle has a large feGaussianBlur, starts `python -m assetcdn.cli up` (one edge, one worker)
from the current directory on free loopback ports, uploads both, and asks /api/transform for
each REQUEST twice (the second answer shows the negative cache). It prints the status and
seconds of each answer and the RSS of the edge process (and of its image workers, when it has
any) before, after, and 3 s after. Then `--misses` distinct 400 px WebP transforms of a
2000x1333 JPEG, two at a time, give the transform throughput through HTTP. Works against
any version of the edge: it only talks HTTP and reads /proc. `--env` passes settings to
`up` (e.g. ASSETCDN_TRANSFORM_MAX_ANIMATION_FRAMES=10000 to reach the time budget).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import pyvips

from benchmarks.measure import process_tree, rss_bytes, stop_process

KEYS = {
    "ASSETCDN_ACCESS_KEY": "bench-access", "ASSETCDN_ACCOUNT_KEY": "bench-account",
    "ASSETCDN_PURGE_KEY": "bench-purge", "ASSETCDN_ANALYTICS_KEY": "bench-analytics",
    "ASSETCDN_SIGNED_URL_SECRET": "bench-signed", "ASSETCDN_CLUSTER_SECRET": "bench-cluster",
    "ASSETCDN_SESSION_SECRET": "bench-session",
}
ZONE = "bench"
REQUESTS = [("anim.gif", "w=50"), ("anim.gif", "w=80&h=50"), ("blur.svg", "format=png"), ("blur.svg", "w=4000")]


def animated_gif(width: int = 100, height: int = 100, frames: int = 9000) -> bytes:
    xyz = pyvips.Image.xyz(width, height * frames)
    page = (xyz[1] / height).cast("int")
    image = ((page * 37) % 256).cast("uchar").bandjoin([((page * 11) % 256).cast("uchar"),
                                                         ((xyz[0] > width // 2) * 255).cast("uchar")])
    image = image.copy(interpretation="srgb")
    image.set_type(pyvips.GValue.gint_type, "page-height", height)
    image.set_type(pyvips.GValue.array_int_type, "delay", [40] * frames)
    return image.gifsave_buffer(effort=1)


def blur_svg(size: int = 4000, deviation: int = 500) -> bytes:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}"><filter id="f" x="-50%" '
            f'y="-50%" width="200%" height="200%"><feGaussianBlur stdDeviation="{deviation}"/></filter>'
            f'<rect width="{size}" height="{size}" fill="red" filter="url(#f)"/></svg>').encode()


def photo_jpeg(width: int = 2000, height: int = 1333) -> bytes:
    xyz = pyvips.Image.xyz(width, height)
    noise = pyvips.Image.gaussnoise(width, height, sigma=12, mean=0)
    image = (xyz[0] * (255 / width)).bandjoin([xyz[1] * (255 / height), (xyz[0] + xyz[1]) * 0.05]) + noise
    return image.cast("uchar").copy(interpretation="srgb").jpegsave_buffer(Q=90)


def free_ports(count: int) -> int:
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = sock.getsockname()[1]
        ok = True
        for port in range(base, base + count):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
        if ok and base + count < 65000:
            return base
    raise RuntimeError("no free ports")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def processes(data_dir: Path) -> tuple[int, list[int]]:
    """(pid of the edge process, pids of the processes under it other than multiprocessing's tracker)."""
    edge = next((int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
                 and "-m assetcdn.edge" in (line := cmdline(int(entry.name))) and str(data_dir) in line), 0)
    if not edge:
        return 0, []
    return edge, [pid for pid in process_tree(edge)[1:] if "resource_tracker" not in cmdline(pid)]


def rss_mb(pid: int) -> float:
    return rss_bytes([pid]) / 2**20


def memory(data_dir: Path) -> str:
    edge, workers = processes(data_dir)
    text = f"edge {rss_mb(edge):.0f} MB"
    if workers:
        text += f", image workers {' + '.join(f'{rss_mb(pid):.0f}' for pid in workers)} MB"
    return text


async def run(args: argparse.Namespace, data_dir: Path, edge_url: str, control_url: str) -> None:
    account, access = {"AccountKey": KEYS["ASSETCDN_ACCOUNT_KEY"]}, {"AccessKey": KEYS["ASSETCDN_ACCESS_KEY"]}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(f"{control_url}/api/core/zones", json={"Name": ZONE}, headers=account) as resp:
            assert resp.status == 201, await resp.text()
        files = {"anim.gif": animated_gif(), "blur.svg": blur_svg(), "photo.jpg": photo_jpeg()}
        for name, data in files.items():
            async with session.put(f"{control_url}/api/storage/{ZONE}/v1/banners/{name}", data=data,
                                   headers=access) as resp:
                assert resp.status == 201, await resp.text()
        await asyncio.sleep(2)   # the edge receives the manifest

        async def get(query: str) -> tuple[int, float, str]:
            start = time.perf_counter()
            async with session.get(f"{edge_url}/api/transform?{query}") as resp:
                body = await resp.read()
                took = time.perf_counter() - start
                detail = "" if resp.status == 200 else body.decode(errors="replace")[:120]
                return resp.status, took, detail

        status, _, detail = await get(f"url=/{ZONE}/v1/banners/photo.jpg&w=64")   # warm the pool
        assert status == 200, detail
        print(f"baseline after one small transform: {memory(data_dir)}")
        for name, query in REQUESTS:
            url = f"url=/{ZONE}/v1/banners/{name}&{query}"
            before = memory(data_dir)
            status, took, detail = await get(url)
            after = memory(data_dir)
            status2, took2, _ = await get(url)
            await asyncio.sleep(3)
            print(f"\n{name} {query}: {status} in {took:.2f} s ({detail})\n  again: {status2} in {took2:.3f} s"
                  f"\n  memory before: {before}\n  right after:   {after}\n  3 s later:     {memory(data_dir)}")

        widths = iter(range(400, 400 + args.misses))
        start = time.perf_counter()

        async def client() -> None:
            for width in widths:
                status, _, detail = await get(f"url=/{ZONE}/v1/banners/photo.jpg&w={width}&format=webp")
                assert status == 200, detail

        await asyncio.gather(client(), client())
        took = time.perf_counter() - start
        print(f"\n{args.misses} distinct 2000x1333 JPEG -> {400}+ px WebP misses, 2 at a time: "
              f"{took:.2f} s, {args.misses / took:.1f} transforms/s; {memory(data_dir)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE passed to `up`")
    parser.add_argument("--misses", type=int, default=40)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="budget-bench-"))
    data_dir = tmp / "data"
    base = free_ports(2)
    env = {**os.environ, **KEYS, **dict(item.split("=", 1) for item in args.env)}
    env.pop("ASSETCDN_CONFIG", None)
    log_path = tmp / "up.log"
    command = [sys.executable, "-m", "assetcdn.cli", "up", "--data-dir", str(data_dir), "--host", "127.0.0.1",
               "--edge-port", str(base), "--control-port", str(base + 1), "--edges", "1", "--workers", "1",
               "--no-demo"]
    with open(log_path, "wb") as log:
        up = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while b"assetcdn is up" not in log_path.read_bytes():
            if up.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"assetcdn up did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        print(f"code: {Path.cwd()}; settings: {args.env or 'defaults'}")
        asyncio.run(run(args, data_dir, f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"))
    finally:
        stop_process(up, 30)


if __name__ == "__main__":
    main()
