"""How long a second viewer of a large new URL waits: the time to its first byte, and to its last, while the first
viewer's fill is still reading the body from a slow origin.

    .venv/bin/python -m benchmarks.waiter_bench [--tree PATH] [--mb 32] [--rate-mb 4] [--after 1.0] [--rounds 3]
        [--workers N] [--contenders edge,varnish,nginx]

An nginx origin sends one file of ``--mb`` MB under any name below ``/video/`` at ``--rate-mb`` MB/s per connection
(nginx's ``limit_rate``: a long video from an origin far away), kept for an hour, and logs each request. In front
of it, each contender: the edge (``assetcdn up`` importing from ``--tree``, one edge with ``--workers`` workers, a
pull zone), Varnish (as benchmarks/pull_bench.py runs it: its default streaming to the requests waiting for a
fetch) and nginx's ``proxy_cache`` (as benchmarks/pull_bench.py runs it: no ``proxy_cache_lock``, so a second
request for a URL being fetched is fetched again). Each round asks a new URL: the first viewer reads it whole;
``--after`` seconds later the second viewer asks for it. Printed per contender: the second viewer's time to its
first body byte and to its last (medians over the rounds), and how many requests the origin got per URL.

Not a CPU benchmark: nothing is pinned apart from what the servers' own starts pin (each server on core 0, the
origin on core 1). Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks.hits_bench import Server, anchor, stop, wait_up
from benchmarks.measure import create_pull_zone, load_average, machine, require_tools, tool_path
from benchmarks.nginx_conf import instance_conf
from benchmarks.pull_bench import start_proxy_nginx, start_varnish
from tests.integration.harness import ACCOUNT, free_port_block, start_cdn

ZONE = "videos"
CONTENDERS = ("edge", "varnish", "nginx")
ORIGIN_CONF = """default_type application/octet-stream;
log_format names "$request_uri";
server {{
    listen 127.0.0.1:{port};
    root {directory}/files;
    access_log {directory}/asked.log names;
    add_header Cache-Control "max-age=3600";
    location ^~ /video/ {{ limit_rate {rate}; try_files /video.bin =404; }}
}}
"""


def start_origin(workdir: Path, port: int, size: int, rate: int) -> tuple[Server, Path, bytes]:
    directory = workdir / "origin"
    (directory / "files").mkdir(parents=True)
    os.chmod(directory, 0o755)
    body = os.urandom(size)
    (directory / "files" / "video.bin").write_bytes(body)
    os.chmod(directory / "files" / "video.bin", 0o644)
    conf = directory / "nginx.conf"
    conf.write_text(instance_conf(directory, ORIGIN_CONF.format(port=port, directory=directory, rate=rate)))
    process = subprocess.Popen(["taskset", "-c", "1", tool_path("nginx"), "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    origin = anchor("origin", f"http://127.0.0.1:{port}", process)
    asyncio.run(wait_up(origin.base + "/"))
    return origin, directory / "asked.log", body


async def viewers(url: str, after_s: float, body: bytes) -> tuple[float, float]:
    """The first viewer reads `url` whole; `after_s` later a second one asks for it: its seconds to its first body
    byte and to its last (both bodies checked)."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as first_session, \
            aiohttp.ClientSession(timeout=timeout) as second_session:
        async def whole(session: aiohttp.ClientSession) -> bytes:
            async with session.get(url) as resp:
                return await resp.read()

        first = asyncio.create_task(whole(first_session))
        await asyncio.sleep(after_s)
        started = time.perf_counter()
        async with second_session.get(url) as resp:
            piece = await resp.content.readany()
            first_byte = time.perf_counter() - started
            rest = await resp.read()
        last_byte = time.perf_counter() - started
        if piece + rest != body or await first != body:
            raise RuntimeError(f"{url}: a viewer got another body")
    return first_byte, last_byte


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=os.getcwd(), help="the source tree the edge imports from")
    parser.add_argument("--mb", type=int, default=32)
    parser.add_argument("--rate-mb", type=int, default=4)
    parser.add_argument("--after", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    args = parser.parse_args(argv)
    contenders = [name for name in args.contenders.split(",") if name]
    if not set(contenders) <= set(CONTENDERS) or not 1 <= args.mb <= 512 or not 1 <= args.rounds <= 20:
        parser.error(f"--contenders among {','.join(CONTENDERS)}, --mb within [1, 512], --rounds within [1, 20]")
    require_tools(("nginx", "taskset", *(("varnishd",) if "varnish" in contenders else ())), "waiter_bench")
    print(f"# waiter_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}; "
          f"{args.mb} MB at {args.rate_mb} MB/s, the second viewer {args.after:g} s after the first; "
          f"edge from {args.tree}, {args.workers} worker(s)")
    with tempfile.TemporaryDirectory(prefix="waiter-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        ports = free_port_block(3)
        origin, asked, body = start_origin(workdir, ports, args.mb << 20, args.rate_mb << 20)
        try:
            for name in contenders:
                started: Server | None = None
                cdn = None
                if name == "edge":
                    (workdir / "cdn").mkdir()
                    cdn = start_cdn(workdir / "cdn", workers=args.workers, env_extra={
                        "PYTHONPATH": str(Path(args.tree).resolve()), "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
                        "ASSETCDN_ORIGIN_MAX_OBJECT_MB": str(args.mb * 2)})
                    asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, ZONE, origin.base, cdn.data_dir,
                                                 workers=args.workers))
                    base = f"{cdn.edge_urls[0]}/{ZONE}"
                elif name == "varnish":
                    started = start_varnish(workdir, ports + 1, ports, "0")
                    base = started.base
                else:
                    started = start_proxy_nginx(workdir, ports + 2, ports, "0")
                    base = started.base
                try:
                    if started is not None:
                        asyncio.run(wait_up(base + "/"))
                    firsts, lasts = [], []
                    for round_ in range(args.rounds):
                        path = f"/video/{name}-{round_}-{time.time_ns()}"
                        first_byte, last_byte = asyncio.run(viewers(base + path, args.after, body))
                        firsts.append(first_byte)
                        lasts.append(last_byte)
                    origin_asks = sum(1 for line in asked.read_text().splitlines() if f"/video/{name}-" in line)
                    print(f"{name:8s} second viewer: first byte {statistics.median(firsts):7.3f} s "
                          f"(rounds {' / '.join(f'{value:.3f}' for value in firsts)}), last byte "
                          f"{statistics.median(lasts):6.2f} s; origin requests per URL "
                          f"{origin_asks / args.rounds:.2f}", flush=True)
                finally:
                    if cdn is not None:
                        cdn.stop()
                    if started is not None:
                        stop(started)
        finally:
            stop(origin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
