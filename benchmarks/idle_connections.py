"""Memory per idle HTTP/2 connection: N clients open on the edge's https port, doing nothing.

    .venv/bin/python -m benchmarks.idle_connections [--connections 10000] [--hit] [--max-connections 0]

One ``assetcdn up`` (control and one edge with one worker and an https port, ECDSA P-256 certificate of a
test CA made here). This process raises its own file-descriptor limit (RLIMIT_NOFILE) to its hard limit and
reads the edge worker's from /proc; the connections asked for are capped by both (less a margin). Each
connection (tests/edge/tls/idle.py) makes its TLS handshake, exchanges SETTINGS (windows as large as a
browser's) and, with ``--hit SIZE``, GETs a hit of that size once; then all stay open, idle. ``[server] header_timeout_s`` (the idle timeout) is set long
enough that none is closed while they open.

Printed: the worker's resident memory (VmRSS) before, with all N open, and a few seconds after they
closed (the heap trimmed: assetcdn/edge/tls/site.py), and the difference per connection. With
``--max-connections`` the edge's ``tls.h2_max_connections`` is set and the refused connections are counted.
Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from benchmarks.hits_bench import prepare_files
from benchmarks.https_bench import warm
from benchmarks.measure import load_average, machine
from tests.edge.tls.certs import TestCa
from tests.edge.tls.idle import open_idle
from tests.integration.harness import free_port_block, start_cdn

MARGIN = 200  # descriptors kept for everything else (the edge's own files and sockets, this process's)


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def open_files_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise RuntimeError(f"no open-files limit for {pid}")


def raise_own_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def measure(port: int, worker: int, count: int, path: str | None) -> None:
    before = status_kb(worker, "VmRSS")
    started = time.monotonic()
    clients = await open_idle(port, count, path=path)
    opened = time.monotonic() - started
    await asyncio.sleep(1.0)
    held = status_kb(worker, "VmRSS")
    idle = len(clients.writers)
    print(f"# {idle:,} idle connections open ({clients.refused:,} refused) in {opened:.1f} s; "
          f"load average {load_average()}")
    print(f"| worker VmRSS before | with {idle:,} idle | per idle connection | after they closed |")
    clients.close()
    await asyncio.sleep(3.0)  # the heap is trimmed once a second after a burst of closes
    after = status_kb(worker, "VmRSS")
    per = (held - before) * 1024 / idle if idle else 0.0
    print(f"| {before / 1024:,.1f} MiB | {held / 1024:,.1f} MiB | {per / 1024:,.1f} KiB | {after / 1024:,.1f} MiB |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--hit", choices=("5 KB", "100 KB", "1 MB"),
                        help="each connection GETs a hit of this size once before idling")
    parser.add_argument("--max-connections", type=int, default=0, help="the edge's tls.h2_max_connections")
    args = parser.parse_args(argv)
    own = raise_own_limit()
    print(f"# idle_connections: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="idle-connections-") as tmp:
        workdir = Path(tmp)
        cert, key = TestCa().issue("localhost").write(workdir, "localhost")
        port = free_port_block(1)
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512", "ASSETCDN_TLS_HTTPS_PORT": str(port), "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(cert), str(key)]]),
               "ASSETCDN_SERVER_HEADER_TIMEOUT_S": "600", "ASSETCDN_TLS_H2_IDLE_TIMEOUT_S": "600",
               "ASSETCDN_TLS_H2_MAX_CONNECTIONS": str(args.max_connections)}
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        try:
            (worker,) = cdn.pids("--name edge-0")
            edge_limit = open_files_limit(worker)
            count = min(args.connections, own - MARGIN, edge_limit - MARGIN)
            print(f"# open-files limit: this process {own:,}, the edge worker {edge_limit:,}; "
                  f"{count:,} connections of the {args.connections:,} asked")
            path = None
            if args.hit:
                paths, bodies = asyncio.run(prepare_files(cdn, [args.hit]))
                asyncio.run(warm(f"https://localhost:{port}", list(paths.values()), bodies))
                path = "/" + paths[args.hit]
            uvloop.run(measure(port, worker, count, path))
        finally:
            cdn.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
