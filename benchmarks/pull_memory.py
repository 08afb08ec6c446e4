"""Edge memory per cached object of a pull zone, beside Varnish and nginx in front of the same origin.

    .venv/bin/python -m benchmarks.pull_memory [--objects 100000] [--concurrency 32] [--memory-mb 128] [--edge-only]
        [--hit-passes 1]

An origin on 127.0.0.1 (nginx when installed, ``sh benchmarks/setup_debian.sh hits``; else a small Python
origin in this file) answers every ``/small/NNN/NNNNNN.bin`` with the same 1 KB body, an ETag, a
Last-Modified and ``Cache-Control: max-age=3600``. One control plane and one edge with one worker
(``assetcdn up``) hold a pull zone pointed at it; Varnish (malloc storage) and nginx (``proxy_cache``)
are started as peers in front of the same origin when installed. Each server is filled with ``--objects``
distinct URLs (a GET each: a miss, stored), then each URL is asked for once more (a hit; ``--hit-passes``
times, in the same order: with 2, the edge's hit path answers the objects in memory from prepared heads); its resident
memory (VmRSS of all its processes, read from /proc) before the fill and after the hits gives the bytes
per cached object. For ``assetcdn up``, two rows, both read in the same run: "edge RSS", the edge's
processes (its worker and anything under it: the figure of the goal, 100,000 cached 1 KB objects in at
most 200 MB of edge RSS), and "whole system", every process of ``up`` (the supervisor, control, the edge),
what the user's machine holds; control's own share is printed apart. The edge's worker's Pss and where
its entries ended up (the memory tier's count and bytes, from ``/api/health``) are printed too.

Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from benchmarks.hits_bench import wait_up
from benchmarks.measure import (
    create_pull_zone,
    load_average,
    process_tree,
    pss_bytes,
    rss_bytes,
    stop_process,
    tool_path,
)
from benchmarks.nginx_conf import instance_conf
from tests.integration.harness import ACCOUNT, RunningCdn, free_port_block, start_cdn

KB = 1024
MB = 1024 * KB
BODY = bytes(range(256)) * 4      # 1 KB, the same for every URL (no server here shares equal bodies)
ZONE = "pullmem"
WAIT_S = 60.0
LAST_MODIFIED = "Thu, 03 Dec 2026 00:00:00 GMT"

# The http blocks of its nginx instances (benchmarks/nginx_conf.py `instance_conf`): the origin, the peer.
ORIGIN_NGINX = """server {{
    listen 127.0.0.1:{port};
    root {directory}/site;
    default_type application/octet-stream;
    location / {{ try_files /object.bin =404; expires 1h; }}
}}
"""

PEER_NGINX = """proxy_cache_path {directory}/cache levels=1:2 keys_zone=pull:64m max_size=4g inactive=2h use_temp_path=off;
server {{
    listen 127.0.0.1:{port};
    location / {{
        proxy_pass http://127.0.0.1:{origin_port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache pull;
        add_header X-Cache $upstream_cache_status;
    }}
}}
"""

VCL = """vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{port}"; }}
sub vcl_deliver {{
    if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
}}
"""


@dataclass
class Server:
    name: str
    base: str           # what a path is appended to
    pids: Callable[[], list[int]]
    process: subprocess.Popen[bytes] | None = None


def tool(name: str) -> str | None:
    """The installed program `name`, or None (the benchmark then leaves its row out)."""
    found = tool_path(name)
    return found if Path(found).exists() else None


def tree(process: subprocess.Popen[bytes]) -> Callable[[], list[int]]:
    """The process and its children (nginx's workers, Varnish's cache process), looked up when asked."""
    return lambda: process_tree(process.pid)


def rss_parts(pids: list[int]) -> str:
    """VmRSS split into anonymous memory (the heap) and mapped files (SQLite's memory map, libraries)."""
    parts = {"RssAnon:": 0, "RssFile:": 0, "RssShmem:": 0}
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                name, _, value = line.partition("\t")
                if name in parts:
                    parts[name] += int(value.split()[0]) * KB
        except OSError:
            continue
    return ", ".join(f"{name[3:-1].lower()} {value / MB:,.1f} MiB" for name, value in parts.items())


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None:
        stop_process(process)


# The Python origin, used when nginx is not installed: one asyncio protocol, a precomputed answer.

def python_origin_answer() -> bytes:
    return (b"HTTP/1.1 200 OK\r\nServer: origin\r\nContent-Type: application/octet-stream\r\n"
            b"Last-Modified: " + LAST_MODIFIED.encode() + b"\r\nETag: \"6930c6e0-400\"\r\n"
            b"Cache-Control: max-age=3600\r\nAccept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY


class OriginProtocol(asyncio.Protocol):
    ANSWER = python_origin_answer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:  # GETs without bodies only
            self.buffer = self.buffer[end + 4:]
            self.transport.write(self.ANSWER)


def serve_python_origin(port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(OriginProtocol, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_origin(workdir: Path, port: int) -> tuple[str, subprocess.Popen[bytes]]:
    nginx = tool("nginx")
    if nginx is None:
        process = subprocess.Popen([sys.executable, "-m", "benchmarks.pull_memory", "--serve-origin", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return "python", process
    directory = workdir / "origin"
    (directory / "site").mkdir(parents=True)
    (directory / "site" / "object.bin").write_bytes(BODY)
    os.chmod(directory, 0o777)
    conf = directory / "nginx.conf"
    conf.write_text(instance_conf(directory, ORIGIN_NGINX.format(directory=directory, port=port)))
    return "nginx", subprocess.Popen([nginx, "-c", str(conf), "-p", str(directory)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_peer_nginx(workdir: Path, port: int, origin_port: int) -> Server | None:
    nginx = tool("nginx")
    if nginx is None:
        return None
    directory = workdir / "nginx"
    directory.mkdir()
    os.chmod(directory, 0o777)
    conf = directory / "nginx.conf"
    conf.write_text(instance_conf(directory, PEER_NGINX.format(directory=directory, port=port,
                                                               origin_port=origin_port)))
    process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Server("nginx proxy_cache", f"http://127.0.0.1:{port}", tree(process), process)


def start_varnish(workdir: Path, port: int, origin_port: int) -> Server | None:
    varnishd = tool("varnishd")
    if varnishd is None:
        return None
    vcl = workdir / "pull.vcl"
    vcl.write_text(VCL.format(port=origin_port))
    process = subprocess.Popen([varnishd, "-F", "-a", f"127.0.0.1:{port}", "-f", str(vcl), "-s", "malloc,1g",
                                "-n", str(workdir / "varnish"), "-p", "thread_pools=1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Server("varnish (malloc)", f"http://127.0.0.1:{port}", tree(process), process)


async def get_each(base: str, paths: list[str], concurrency: int, expect_hit: bool) -> int:
    """GET every path once, ``concurrency`` at a time; returns how many answers were hits."""
    hits = 0
    queue = iter(paths)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            nonlocal hits
            for path in queue:
                async with session.get(base + path) as resp:
                    body = await resp.read()
                    if resp.status != 200 or body != BODY:
                        raise RuntimeError(f"{base}{path}: {resp.status} {body[:200]!r}")
                    hits += resp.headers.get("X-Cache", "").startswith("HIT")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    if expect_hit and hits < len(paths):
        print(f"  note: {len(paths) - hits:,} of {len(paths):,} second requests were not hits", flush=True)
    return hits


async def memory_tier(edge_url: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as session, session.get(f"{edge_url}/api/health") as resp:
        cache: dict[str, int] = (await resp.json())["cache"]
        return cache


def measure(server: Server, paths: list[str], concurrency: int,
            also: dict[str, Callable[[], list[int]]] | None = None, hit_passes: int = 1) -> list[tuple[str, int, int]]:
    """(name, RSS before, RSS after) of ``server`` and of each of the other process sets in ``also``, all
    read at the same moments around the one fill."""
    accounts = {server.name: server.pids, **(also or {})}
    before = {name: rss_bytes(pids()) for name, pids in accounts.items()}
    began = time.monotonic()
    asyncio.run(get_each(server.base, paths, concurrency, expect_hit=False))
    filled = time.monotonic() - began
    for _ in range(hit_passes):
        asyncio.run(get_each(server.base, paths, concurrency, expect_hit=True))
    after = {name: rss_bytes(pids()) for name, pids in accounts.items()}
    print(f"{server.name}: filled in {filled:.0f} s (load {load_average()})", flush=True)
    for name in accounts:
        print(f"  {name}: RSS {before[name] / MB:,.1f} -> {after[name] / MB:,.1f} MiB, "
              f"{(after[name] - before[name]) / len(paths):,.0f} bytes per object "
              f"(pids {accounts[name]()})", flush=True)
    return [(name, before[name], after[name]) for name in accounts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=100_000, help="distinct 1 KB objects per server")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight while filling")
    parser.add_argument("--memory-mb", type=int, default=None,
                        help="the edge's memory tier budget (edge.memory_cache_mb; default: the configured one)")
    parser.add_argument("--edge-only", action="store_true", help="measure the edge alone (no Varnish, no nginx)")
    parser.add_argument("--hit-passes", type=int, default=1,
                        help="times every URL is asked for again after the fill (2: a second hit, which the edge's "
                             "hit path answers from a prepared head when the object is in memory)")
    parser.add_argument("--serve-origin", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_origin is not None:
        serve_python_origin(args.serve_origin)
        return
    paths = [f"/small/{i // 1000:03d}/{i:06d}.bin" for i in range(args.objects)]
    rows: list[tuple[str, int, int]] = []
    with tempfile.TemporaryDirectory(prefix="pull-memory-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # nginx's and Varnish's workers may run as another user
        base = free_port_block(3)
        origin_port, varnish_port, nginx_port = base, base + 1, base + 2
        kind, origin = start_origin(workdir, origin_port)
        cdn: RunningCdn | None = None
        peers: list[Server] = []
        try:
            asyncio.run(wait_up(f"http://127.0.0.1:{origin_port}/small/000/000000.bin"))
            print(f"origin: {kind} on 127.0.0.1:{origin_port}; {args.objects:,} objects of {len(BODY)} bytes; "
                  f"{os.cpu_count()} vCPU; load {load_average()}", flush=True)
            (workdir / "cdn").mkdir()
            env = {"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"}
            if args.memory_mb is not None:
                env["ASSETCDN_EDGE_MEMORY_CACHE_MB"] = str(args.memory_mb)
            cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
            asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, ZONE, f"http://127.0.0.1:{origin_port}",
                                         cdn.data_dir))
            running = cdn
            edge = Server("edge (1 worker): edge RSS, the goal's figure", f"{cdn.edge_urls[0]}/{ZONE}",
                          lambda: process_tree(*running.pids("--name edge-0")))
            rows += measure(edge, paths, args.concurrency, hit_passes=args.hit_passes, also={
                "control (with the `up` supervisor)": lambda: process_tree(*running.pids("-m assetcdn.control "))
                + [running.process.pid],
                "whole system (every process of `up`: edge + control + supervisor)":
                    lambda: process_tree(running.process.pid)})
            stats = asyncio.run(memory_tier(cdn.edge_urls[0]))
            print(f"  edge memory tier: {stats['memory_entries']:,} entries, {stats['memory_bytes'] / MB:,.1f} MiB "
                  f"of {stats['memory_limit_bytes'] / MB:,.0f} MiB; disk tier {stats['disk_entries']:,} entries; "
                  f"worker Pss {pss_bytes(edge.pids()) / MB:,.1f} MiB ({rss_parts(edge.pids())})", flush=True)
            cdn.stop()
            cdn = None
            for start in () if args.edge_only else (start_varnish, start_peer_nginx):
                peer = start(workdir, varnish_port if start is start_varnish else nginx_port, origin_port)
                if peer is None:
                    continue
                peers.append(peer)
                asyncio.run(wait_up(peer.base + "/"))
                rows += measure(peer, paths, args.concurrency, hit_passes=args.hit_passes)
                stop(peer.process)
        finally:
            for peer in peers:
                stop(peer.process)
            if cdn is not None:
                cdn.stop()
            stop(origin)
    print(f"\n# resident memory, {args.objects:,} objects of {len(BODY)} bytes cached from a {kind} origin "
          f"(load average after: {load_average()}); VmRSS summed over the processes of each row\n")
    hits = "a hit each" if args.hit_passes == 1 else f"{args.hit_passes} hits each"
    print(f"| server | RSS before | RSS after the fill and {hits} | per cached object |")
    print("|---|---:|---:|---:|")
    for name, before, after in rows:
        print(f"| {name} | {before / MB:,.0f} MiB | {after / MB:,.0f} MiB | {(after - before) / args.objects:,.0f} bytes |")


if __name__ == "__main__":
    main()
