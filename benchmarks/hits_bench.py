"""Cache hits per core, side by side in one run: Varnish, nginx proxy_cache and the edge.

    make bench-hits      (installs varnish, nginx and wrk from Debian when absent, then runs this)
    .venv/bin/python -m benchmarks.hits_bench [--duration 6] [--rounds 3] [--connections 64]

One control plane (``assetcdn up``, one edge with one worker) holds the files, uploaded through the
storage API: 5 KB, 100 KB and 1 MB (held in the edge's memory tier) and 4 MB (larger than the memory
tier's object limit: the edge sends it from its disk cache file with sendfile). Varnish (malloc
storage) and nginx (proxy_cache, one worker) are started as peers of the edge in front of the same
control plane: they fetch ``/api/storage/<path>`` with the access key and cache it for an hour. Each
server is pinned to core 0 with taskset; wrk (``-t2 -c64``) runs pinned to core 1. The edge's figures
count the whole system, every process of ``assetcdn up`` (the supervisor, control, the edge and any image
worker), all pinned to core 0 at normal priority: the process tree is walked again before each run (and
pinned) and at each CPU reading, so a process started late is pinned and counted, and one that ended is
counted through its parent's reaped-children CPU. Its CPU runs from the start of a run until ``SETTLE_S``
after it (control has taken the edge's last analytics flush by then); control's own share is printed per
run, as microseconds of control CPU per hit. Varnish and nginx run on core 0 in their turns with control idle beside them. A bare uvloop + httptools
server (benchmarks/bare_server.py) serves the same files as a fourth "server": the floor of any
Python server here. Before the rounds, the loopback ceiling (``loopback_ceiling``). Every URL is warmed until it is a
hit on every server. Then ``--rounds`` rounds, each running every size on every server in turn
(the order rotates per round), so machine noise hits all three alike; the table shows medians of
the rounds: req/s, MiB/s, p99 latency and the server's CPU (cores used, from /proc), plus the ratio
of the edge's req/s to Varnish's in the same rounds.

Then memory: each server's resident memory (RSS, all its processes) before and after
``--objects`` distinct small files (1 KB) are fetched twice through it, and the difference per
object. Then scaling: the edge with 2 workers on both cores against 1 worker, wrk unpinned (it
shares the cores), at 5 KB.

Loopback only; every load run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from benchmarks.load import LoadResult, run_wrk
from benchmarks.measure import (
    cpu_seconds,
    load_average,
    machine,
    pin,
    process_tree,
    require_tools,
    rss_bytes,
    stop_process,
    tool_path,
    wrk_arguments,
)
from benchmarks.nginx_conf import nginx_conf
from tests.integration.harness import ACCESS, ACCOUNT, KEYS, RunningCdn, free_port_block, start_cdn

KB = 1024
MB = 1024 * KB
SIZES = {"5 KB": 5 * KB, "100 KB": 100 * KB, "1 MB": MB, "4 MB (file)": 4 * MB}
ZONE = "bench"
SERVERS = ("varnish", "nginx", "edge", "bare")
SMALL = 1 * KB
SETTLE_S = 2.0  # past the edge's analytics flush interval (1 s): control has ingested the run's last flush
BATCH = 1000  # files per storage batch upload (this cluster's [control] max_batch_files)
TOOLS = ("wrk", "varnishd", "nginx", "taskset")

VCL = """vcl 4.1;
backend control {{ .host = "127.0.0.1"; .port = "{port}"; }}
sub vcl_recv {{
    if (req.method != "GET" && req.method != "HEAD") {{ return (pass); }}
    set req.http.AccessKey = "{key}";
    set req.url = "/api/storage" + req.url;
    unset req.http.Cookie;
    return (hash);
}}
sub vcl_backend_response {{
    set beresp.ttl = 1h;
    unset beresp.http.Set-Cookie;
}}
sub vcl_deliver {{
    if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
}}
"""


@dataclass
class Server:
    name: str
    base: str
    pids: list[int]
    process: subprocess.Popen[bytes] | None = None
    # When set, ``pids`` is every process under these roots, walked again at each reading: a process
    # started after the first walk (an image worker at the first transform) is counted, and the CPU of
    # one that ends is kept by its parent's reaped-children figures.
    roots: tuple[int, ...] = ()

    def refresh(self) -> list[int]:
        if self.roots:
            self.pids = process_tree(*self.roots)
        return self.pids

    def pin(self, core: str) -> list[int]:
        """Every process of the server onto ``core``, any started under it since the last walk too (``measure.pin``);
        the pids pinned."""
        pinned = pin(self.roots or self.pids, core)
        if self.roots:
            self.pids = pinned
        return pinned

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.refresh(), reaped_children=bool(self.roots))

    def rss_bytes(self) -> int:
        return rss_bytes(self.refresh())


@dataclass
class Sample:
    rps: float
    mib_s: float
    p99_ms: float
    cpu: float
    errors: int

    @property
    def per_core(self) -> float:
        return self.rps / self.cpu if self.cpu > 0 else 0.0


@dataclass
class Results:
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)

    def add(self, server: str, size: str, sample: Sample) -> None:
        self.samples.setdefault((server, size), []).append(sample)

    def median(self, server: str, size: str, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples[(server, size)])


def anchor(name: str, base: str, process: subprocess.Popen[bytes]) -> Server:
    """A server the benchmark started (Varnish, nginx, hitch): counted as ours are, every process under it walked
    again at each reading and pinning (a worker its master starts again included) and the CPU of the children it
    reaped kept."""
    return Server(name, base, process_tree(process.pid), process, roots=(process.pid,))


def start_varnish(workdir: Path, port: int, control_port: int, core: str) -> Server:
    vcl = workdir / "bench.vcl"
    vcl.write_text(VCL.format(port=control_port, key=KEYS["ASSETCDN_ACCESS_KEY"]))
    name = workdir / "varnish"
    varnishd = tool_path("varnishd")
    process = subprocess.Popen(["taskset", "-c", core, varnishd, "-F", "-a", f"127.0.0.1:{port}",
                                "-f", str(vcl), "-s", "malloc,1g", "-n", str(name), "-p", "thread_pools=1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("varnish", f"http://127.0.0.1:{port}", process)


def start_nginx(workdir: Path, port: int, control_port: int, core: str, workers: int = 1) -> Server:
    directory = workdir / f"nginx-{port}"
    directory.mkdir()
    os.chmod(directory, 0o777)
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, control_port, KEYS["ASSETCDN_ACCESS_KEY"], workers=workers))
    nginx = tool_path("nginx")
    process = subprocess.Popen(["taskset", "-c", core, nginx, "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("nginx", f"http://127.0.0.1:{port}", process)


def start_bare(workdir: Path, port: int, bodies: dict[str, bytes], core: str) -> Server:
    """benchmarks/bare_server.py serving the same files: the floor of a Python server (see there)."""
    directory = workdir / "bare"
    for path, body in bodies.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(body)
    process = subprocess.Popen(["taskset", "-c", core, sys.executable, "-m", "benchmarks.bare_server",
                                "--port", str(port), "--dir", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("bare", f"http://127.0.0.1:{port}", process)


def stop(server: Server) -> None:
    if server.process is not None:
        stop_process(server.process)


async def wait_up(url: str) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    return
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not come up") from None
                await asyncio.sleep(0.2)


async def upload(session: aiohttp.ClientSession, cdn: RunningCdn, path: str, data: bytes) -> None:
    async with session.put(f"{cdn.control_url}/api/storage/{path}", data=data, headers=ACCESS) as resp:
        if resp.status != 201:
            raise RuntimeError(f"upload {path}: {resp.status} {await resp.text()}")


async def upload_many(session: aiohttp.ClientSession, cdn: RunningCdn, paths: list[str]) -> None:
    """Small files through the storage batch API, BATCH at a time."""
    for start in range(0, len(paths), BATCH):
        files = [{"path": path, "content": base64.b64encode(os.urandom(SMALL)).decode()}
                 for path in paths[start:start + BATCH]]
        async with session.post(f"{cdn.control_url}/api/storage/batch", json={"files": files},
                                headers=ACCESS) as resp:
            if resp.status not in (200, 201):
                raise RuntimeError(f"batch upload: {resp.status} {await resp.text()}")


async def warm(base: str, paths: list[str], expect: dict[str, bytes] | None = None) -> None:
    """GET each path until it is a hit (X-Cache: HIT); checks bodies when ``expect`` is given."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as session:

        async def one(path: str) -> None:
            for _ in range(20):
                async with session.get(f"{base}/{path}") as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{base}/{path}: {resp.status} {body[:200]!r}")
                    if expect is not None and body != expect[path]:
                        raise RuntimeError(f"{base}/{path}: wrong body")
                    if resp.headers.get("X-Cache", "").startswith("HIT"):
                        return
                await asyncio.sleep(0.05)
            raise RuntimeError(f"{base}/{path} never became a hit")

        for start in range(0, len(paths), 200):
            await asyncio.gather(*(one(p) for p in paths[start:start + 200]))


def run_one(server: Server, url: str, args: argparse.Namespace, prefix: tuple[str, ...],
            settle_s: float = 0.0) -> tuple[LoadResult, float]:
    """One wrk run; the server's CPU from its start until ``settle_s`` after it, per second of the run."""
    before = server.cpu_seconds()
    result = run_wrk(url, args.duration, args.connections, args.threads, prefix=prefix)
    time.sleep(settle_s)
    cores = (server.cpu_seconds() - before) / result.duration_s
    return result, cores


def table(results: Results, sizes: list[str], servers: list[str]) -> str:
    """Medians per server and size. "per core" is req/s divided by the server's CPU use (cores): what
    one fully used core would serve, the figure that stays comparable when the machine is shared."""
    lines = ["| object | server | req/s | MiB/s | p99 ms | server CPU (cores) | req/s per core | "
             "req/s vs Varnish | per core vs Varnish |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        varnish = results.median("varnish", size, "rps")
        varnish_core = results.median("varnish", size, "per_core")
        for name in servers:
            rps = results.median(name, size, "rps")
            per_core = results.median(name, size, "per_core")
            lines.append(f"| {size} | {name} | {rps:,.0f} | {results.median(name, size, 'mib_s'):,.0f} | "
                         f"{results.median(name, size, 'p99_ms'):.2f} | {results.median(name, size, 'cpu'):.2f} | "
                         f"{per_core:,.0f} | {rps / varnish:.2f}x | {per_core / varnish_core:.2f}x |")
    return "\n".join(lines)


async def prepare_files(cdn: RunningCdn, sizes: list[str] | None = None) -> tuple[dict[str, str], dict[str, bytes]]:
    paths: dict[str, str] = {}
    bodies: dict[str, bytes] = {}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            if resp.status != 201:
                raise RuntimeError(f"zone: {resp.status} {await resp.text()}")
        for label, size in SIZES.items():
            if sizes is not None and label not in sizes:
                continue
            path = f"{ZONE}/v1/bench/{label.split(' ')[0]}{label.split(' ')[1].lower()}.bin"
            data = os.urandom(size)
            await upload(session, cdn, path, data)
            paths[label], bodies[path] = path, data
    return paths, bodies


def edge_server(cdn: RunningCdn) -> Server:
    """The edge node's processes (with one worker, the node process is the worker)."""
    return Server("edge", cdn.edge_urls[0], cdn.pids("--name edge-0"))


def whole_system(cdn: RunningCdn) -> tuple[Server, Server]:
    """Everything of ours as one server named "edge" (what a hit costs the system): the `up` supervisor and
    every process under it (control, the edge, image workers, whenever they start); and control alone."""
    control_roots = tuple(cdn.pids("-m assetcdn.control "))
    control = Server("control", cdn.control_url, process_tree(*control_roots), roots=control_roots)
    system = Server("edge", cdn.edge_urls[0], [], roots=(cdn.process.pid,))
    system.refresh()
    return system, control


def loopback_ceiling(workdir: Path, server_core: str, load_core: str, seconds: float = 3.0,
                     connections: int = 8) -> float:
    """MiB/s that ``connections`` TCP connections over loopback carry from ``sendfile(2)`` of a cached
    file (threads pinned to the server's core) to ``recv_into`` a reused buffer (threads on the load
    generator's core): the most any server can send here, with no HTTP and no per-request work."""
    source = workdir / "ceiling.bin"
    source.write_bytes(os.urandom(16 * MB))
    size = source.stat().st_size
    listener = socket.create_server(("127.0.0.1", 0), backlog=connections)
    port = listener.getsockname()[1]
    received = [0] * connections
    deadline = time.monotonic() + 1.0 + seconds  # the first second warms up (not counted)
    counted_from = deadline - seconds

    def receive(index: int) -> None:
        os.sched_setaffinity(0, {int(load_core)})
        buffer = bytearray(MB)
        with socket.create_connection(("127.0.0.1", port)) as client:
            while got := client.recv_into(buffer):
                if time.monotonic() >= counted_from:
                    received[index] += got

    def send(connection: socket.socket) -> None:
        os.sched_setaffinity(0, {int(server_core)})
        with connection, open(source, "rb") as fh:
            while time.monotonic() < deadline:
                offset = 0
                while offset < size:
                    offset += os.sendfile(connection.fileno(), fh.fileno(), offset, size - offset)
            connection.shutdown(socket.SHUT_WR)

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    with listener:
        senders = [threading.Thread(target=send, args=(listener.accept()[0],)) for _ in range(connections)]
    for thread in senders:
        thread.start()
    for thread in senders + threads:
        thread.join(timeout=seconds + 30)
    return sum(received) / seconds / MB


def measure(args: argparse.Namespace) -> None:
    require_tools(TOOLS, "bench-hits")
    print(f"# hits_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    server_core, load_core = args.server_core, args.load_core
    wrk_prefix = ("taskset", "-c", load_core)
    with tempfile.TemporaryDirectory(prefix="hits-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # varnish and nginx workers run as their own users
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512", "ASSETCDN_CONTROL_MAX_BATCH_FILES": str(BATCH)}
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        servers: list[Server] = []
        try:
            control_port = int(cdn.control_url.rsplit(":", 1)[1])
            edge, control = whole_system(cdn)
            edge.pin(server_core)  # the `up` supervisor, control, the edge and its workers
            base = free_port_block(3)
            varnish = start_varnish(workdir, base, control_port, server_core)
            nginx = start_nginx(workdir, base + 1, control_port, server_core)
            paths, bodies = asyncio.run(prepare_files(cdn, args.sizes))
            bare = start_bare(workdir, base + 2, bodies, server_core)
            servers = [varnish, nginx, bare]
            for server in (varnish, nginx, bare):
                asyncio.run(wait_up(server.base + "/"))
                server.pin(server_core)
            every = {name: server for name, server in
                     {"varnish": varnish, "nginx": nginx, "edge": edge, "bare": bare}.items() if name in args.servers}
            for server in every.values():
                asyncio.run(warm(server.base, list(paths.values()), bodies))
            print(f"# warmed; pinned servers to core {server_core} (as \"edge\": every process of `up`, pids "
                  f"{edge.pin(server_core)}), wrk to core {load_core}; load average {load_average()}")
            print(f"# loopback ceiling (8 TCP connections, sendfile -> recv_into, no HTTP): "
                  f"{loopback_ceiling(workdir, server_core, load_core):,.0f} MiB/s", flush=True)
            results = Results()
            order = list(every)
            for round_ in range(args.rounds):
                for label, path in paths.items():
                    for name in order:
                        every[name].pin(server_core)  # a process started since the last walk is pinned too
                        control_before = control.cpu_seconds()
                        result, cores = run_one(every[name], f"{every[name].base}/{path}", args, wrk_prefix,
                                                SETTLE_S if name == "edge" else 0.0)
                        control_us = (control.cpu_seconds() - control_before) / max(result.requests, 1) * 1e6
                        sample = Sample(result.rps, result.bytes_read / result.duration_s / MB, result.p99_ms,
                                        cores, result.errors)
                        results.add(name, label, sample)
                        print(f"round {round_ + 1} {label:>11} {name:>8}: {result.rps:10,.0f} req/s "
                              f"{sample.mib_s:8,.0f} MiB/s p99 {result.p99_ms:7.2f} ms cpu {cores:.2f} "
                              f"errors {result.errors} (control {control_us:.2f} us CPU per hit; "
                              f"load {load_average()})", flush=True)
                order = order[1:] + order[:1]
            print(f"\n# medians of {args.rounds} rounds, wrk -t{args.threads} -c{args.connections} "
                  f"-d{args.duration:g}s; load average after: {load_average()}\n")
            print(table(results, list(paths), list(every)))
            if args.objects:
                servers_alone = {**every, "edge": edge_server(cdn)}  # the edge's memory, without control's
                memory_rows(cdn, {name: servers_alone[name] for name in ("varnish", "nginx", "edge") if name in every},
                            args.objects)
        finally:
            for server in servers:
                stop(server)
            cdn.stop()
        if args.scaling:
            scaling(workdir, args)


def memory_rows(cdn: RunningCdn, every: dict[str, Server], count: int) -> None:
    paths = [f"{ZONE}/v1/small/{i // 1000:03d}/{i:06d}.bin" for i in range(count)]
    began = time.monotonic()
    asyncio.run(_upload_small(cdn, paths))
    print(f"\n# {count:,} files of {SMALL} bytes uploaded in {time.monotonic() - began:.0f} s")
    lines = ["| server | RSS before | RSS with the files cached | per cached object |", "|---|---:|---:|---:|"]
    for name, server in every.items():
        before = server.rss_bytes()
        asyncio.run(warm(server.base, paths))
        after = server.rss_bytes()
        lines.append(f"| {name} | {before / MB:,.0f} MiB | {after / MB:,.0f} MiB | "
                     f"{(after - before) / count:,.0f} bytes |")
    print(f"\n# resident memory, {count:,} small ({SMALL} B) objects cached\n")
    print("\n".join(lines))


async def _upload_small(cdn: RunningCdn, paths: list[str]) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await upload_many(session, cdn, paths)


SCALING_CORES = "0-1"  # `scaling`: both servers' processes, and wrk beside them unpinned


def scaling(workdir: Path, args: argparse.Namespace) -> None:
    """1 and 2 edge workers at 5 KB, wrk unpinned, against nginx with 1 and 2 workers in front of the
    same control plane (the same machine's reference: how far a C server scales here). Besides req/s, the
    servers' CPU (the edge's: every process of `up`, control included, as in the main table) and req/s per
    core: workers scale when the second serves as much per core as the first; on 2 cores shared with wrk,
    req/s cannot reach 2x for any server."""
    rows = []
    for workers in (1, 2):
        (workdir / f"scale-{workers}").mkdir()
        cdn = start_cdn(workdir / f"scale-{workers}", workers=workers)
        nginx: Server | None = None
        try:
            paths, bodies = asyncio.run(prepare_files(cdn, ["5 KB"]))
            path = paths["5 KB"]
            edge, _control = whole_system(cdn)  # what its hits cost: control's ingestion of their records too
            control_port = int(cdn.control_url.rsplit(":", 1)[1])
            nginx = start_nginx(workdir / f"scale-{workers}", free_port_block(1), control_port, SCALING_CORES, workers)
            asyncio.run(wait_up(nginx.base + "/"))
            for server in (edge, nginx):  # the same cores for both (the edge node's processes as `up` started them)
                server.pin(SCALING_CORES)
            for server in (edge, nginx):
                for _ in range(4 * workers):  # every worker holds it (SO_REUSEPORT spreads connections)
                    asyncio.run(warm(server.base, [path], bodies))
            samples: dict[str, list[tuple[LoadResult, float]]] = {"edge": [], "nginx": []}
            for round_ in range(args.rounds):
                for server in (edge, nginx) if round_ % 2 == 0 else (nginx, edge):
                    samples[server.name].append(run_one(server, f"{server.base}/{path}", args, (),
                                                        SETTLE_S if server is edge else 0.0))
            for name, runs in samples.items():
                rps = statistics.median(result.rps for result, _ in runs)
                cores = statistics.median(cpu for _, cpu in runs)
                p99 = statistics.median(result.p99_ms for result, _ in runs)
                rows.append((name, workers, rps, cores, p99))
        finally:
            if nginx is not None:
                stop(nginx)
            cdn.stop()
    print(f"\n# scaling, 5 KB hits, wrk -t{args.threads} -c{args.connections} unpinned (it shares the 2 cores "
          f"with the workers), medians of {args.rounds} rounds; load average {load_average()}\n")
    print("| server | workers | req/s | vs 1 worker | p99 ms | server CPU (cores) | req/s per core | "
          "per core vs 1 worker |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("edge", "nginx"):
        mine = [row for row in rows if row[0] == name]
        one_rps, one_core = mine[0][2], (mine[0][2] / mine[0][3] if mine[0][3] else 0.0)
        for _, workers, rps, cores, p99 in mine:
            per_core = rps / cores if cores else 0.0
            print(f"| {name} | {workers} | {rps:,.0f} | {rps / one_rps:.2f}x | {p99:.2f} | {cores:.2f} | "
                  f"{per_core:,.0f} | {per_core / one_core if one_core else 0:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    parser = wrk_arguments(__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=5_000,
                        help="small objects for the memory rows (0: skip; the issue's figure is 100000)")
    parser.add_argument("--no-scaling", dest="scaling", action="store_false")
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of: {', '.join(SIZES)}")
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help=f"comma-separated, of: {', '.join(SERVERS)} (varnish is always one: the reference)")
    parser.add_argument("--scaling-only", action="store_true", help="only the workers' scaling table")
    args = parser.parse_args(argv)
    args.sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    if not args.sizes or any(size not in SIZES for size in args.sizes):
        parser.error(f"--sizes: comma-separated, of: {', '.join(SIZES)}")
    args.servers = [name for name in SERVERS if name == "varnish" or name in args.servers.split(",")]
    if not 0 < args.duration <= 60 or not 0 < args.rounds <= 20:
        parser.error("--duration within (0, 60], --rounds within (0, 20]")
    if args.scaling_only:
        require_tools(TOOLS, "bench-hits")
        print(f"# hits_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
        with tempfile.TemporaryDirectory(prefix="hits-bench-") as tmp:
            os.chmod(tmp, 0o755)
            scaling(Path(tmp), args)
        return 0
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
