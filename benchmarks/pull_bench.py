"""Pull zones per core, side by side in one run: the edge, Varnish and nginx proxy_cache in front of one origin.

    make bench-pull      (installs varnish, nginx and wrk from Debian when absent, then runs this)
    .venv/bin/python -m benchmarks.pull_bench [--duration 5] [--rounds 3] [--connections 64]

The origin is the user's: one nginx (one worker) serving a 5 KB and a 100 KB file with
``Cache-Control: max-age=3600`` (and its own ETag, Last-Modified and Date), and any name under ``/fill5k/`` or
``/fill100k/`` with the same file. It is pinned to core 1 with wrk, the same origin for every contender.
The contenders, on core 0 in their turns: the edge (``assetcdn up``, one edge with one worker, a pull zone
whose origin is that nginx; its figures count the whole system: the edge and control, pinned together as in
benchmarks/hits_bench.py), Varnish (malloc storage, the origin's own freshness) and nginx ``proxy_cache``
(one worker, keep-alive connections to the origin).

Two workloads, per size:
- hits: one URL, warmed until it is a hit on every contender; on the edge, a few answers are sampled first
  and their ``Age`` checked (present, a whole number, within the time since the file was fetched);
- fills: every request a URL never asked before (a wrk script numbers them per thread, under a prefix of
  its own per run), so every request is a cache miss that the contender fetches from the origin and stores.

``--rounds`` rounds, each running every workload on every contender in turn (the order rotates per
round); the tables show medians: req/s, p99, the contender's CPU (cores, from /proc), req/s per core, and
the ratio of per-core figures to Varnish's (and, for fills, to nginx's) in the same rounds. The machine's
load average is printed with every run: on a shared machine, the same-run ratios are what count.

Loopback only; every load run is bounded; everything started is stopped at the end.
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

from benchmarks.hits_bench import (
    SETTLE_S,
    Server,
    anchor,
    stop,
    wait_up,
    warm,
    whole_system,
)
from benchmarks.load import LoadResult, run_wrk
from benchmarks.measure import (
    create_pull_zone,
    load_average,
    machine,
    require_tools,
    tool_path,
    wrk_arguments,
)
from benchmarks.nginx_conf import instance_conf, nginx_conf
from tests.integration.harness import ACCOUNT, free_port_block, start_cdn

KB = 1024
MB = 1024 * KB
SIZES = {"5 KB": ("5kb.bin", "fill5k", 5 * KB), "100 KB": ("100kb.bin", "fill100k", 100 * KB)}
ZONE = "pull"
CONTENDERS = ("edge", "varnish", "nginx")
WORKLOADS = ("hits", "fills")
MAX_AGE = 3600

# The origin's http block (benchmarks/nginx_conf.py `instance_conf`).
ORIGIN_CONF = """sendfile on;
tcp_nopush on;
default_type application/octet-stream;
server {{
    listen 127.0.0.1:{port};
    root {directory}/files;
    add_header Cache-Control "max-age={max_age}";
    location ^~ /fill5k/ {{ try_files /5kb.bin =404; }}
    location ^~ /fill100k/ {{ try_files /100kb.bin =404; }}
}}
"""

VCL = """vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{port}"; }}
sub vcl_recv {{
    if (req.method != "GET" && req.method != "HEAD") {{ return (pass); }}
    unset req.http.Cookie;
    return (hash);
}}
sub vcl_deliver {{
    if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
}}
"""

# A new URL per request: per wrk thread, "<prefix><thread>-<n>".
FILL_LUA = """
local threads = 0
setup = function(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "{prefix}" .. id .. "-" .. counter)
end
"""


def start_origin(workdir: Path, port: int, core: str) -> tuple[Server, dict[str, bytes]]:
    directory = workdir / "origin"
    (directory / "files").mkdir(parents=True)
    os.chmod(directory, 0o755)
    bodies = {}
    for name, _, size in SIZES.values():
        bodies[name] = os.urandom(size)
        (directory / "files" / name).write_bytes(bodies[name])
        os.chmod(directory / "files" / name, 0o644)
    conf = directory / "nginx.conf"
    conf.write_text(instance_conf(directory, ORIGIN_CONF.format(directory=directory, port=port, max_age=MAX_AGE)))
    nginx = tool_path("nginx")
    process = subprocess.Popen(["taskset", "-c", core, nginx, "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("origin", f"http://127.0.0.1:{port}", process), bodies


def ready_origin(workdir: Path, port: int, core: str) -> tuple[Server, dict[str, bytes]]:
    """`start_origin`, answering and pinned with its workers to `core` (the start under taskset pins the master)."""
    origin, bodies = start_origin(workdir, port, core)
    try:
        asyncio.run(wait_up(origin.base + "/"))
        origin.pin(core)
    except BaseException:
        stop(origin)
        raise
    return origin, bodies


def start_varnish(workdir: Path, port: int, origin_port: int, core: str) -> Server:
    vcl = workdir / "pull.vcl"
    vcl.write_text(VCL.format(port=origin_port))
    varnishd = tool_path("varnishd")
    process = subprocess.Popen(["taskset", "-c", core, varnishd, "-F", "-a", f"127.0.0.1:{port}", "-f", str(vcl),
                                "-s", "malloc,1g", "-n", str(workdir / "varnish"), "-p", "thread_pools=1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("varnish", f"http://127.0.0.1:{port}", process)


def start_proxy_nginx(workdir: Path, port: int, origin_port: int, core: str) -> Server:
    directory = workdir / "nginx"
    directory.mkdir()
    os.chmod(directory, 0o777)
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, origin_port, "", proxy_path="", keepalive=64))
    nginx = tool_path("nginx")
    process = subprocess.Popen(["taskset", "-c", core, nginx, "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("nginx", f"http://127.0.0.1:{port}", process)


async def sampled_ages(url: str, fetched_at: float, count: int = 3) -> list[int]:
    """`Age` of a few hit answers; each must be a whole number within the time since the file was fetched."""
    ages = []
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            async with session.get(url) as resp:
                await resp.read()
                value = resp.headers.get("Age")
                if resp.headers.get("X-Cache") != "HIT" or value is None or not value.isdigit():
                    raise RuntimeError(f"{url}: a hit without a sane Age ({resp.headers.get('X-Cache')}, Age {value})")
                if int(value) > time.time() - fetched_at + 1:
                    raise RuntimeError(f"{url}: Age {value} is more than the time since it was fetched")
                ages.append(int(value))
            await asyncio.sleep(0.6)
    return ages


def run(server: Server, url: str, args: argparse.Namespace, lua: str, settle_s: float) -> tuple[LoadResult, float]:
    before = server.cpu_seconds()
    result = run_wrk(url, args.duration, args.connections, args.threads, prefix=("taskset", "-c", args.load_core),
                     lua=lua)
    time.sleep(settle_s)
    return result, (server.cpu_seconds() - before) / result.duration_s


def table(samples: dict[tuple[str, str, str], list[tuple[float, float, float]]], workload: str,
          contenders: list[str]) -> str:
    def median(name: str, size: str, index: int) -> float:
        return statistics.median(sample[index] for sample in samples[(workload, size, name)])

    def per_core(name: str, size: str) -> float:
        return statistics.median(rps / cpu if cpu > 0 else 0.0 for rps, _, cpu in samples[(workload, size, name)])

    lines = ["| object | server | req/s | p99 ms | server CPU (cores) | req/s per core | per core vs Varnish |"
             + (" per core vs nginx |" if workload == "fills" else ""),
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if workload == "fills" else "")]
    for size in SIZES:
        if (workload, size, "varnish") not in samples:
            continue
        for name in contenders:
            mine = per_core(name, size)
            row = (f"| {size} | {name} | {median(name, size, 0):,.0f} | {median(name, size, 1):.2f} | "
                   f"{median(name, size, 2):.2f} | {mine:,.0f} | {mine / per_core('varnish', size):.2f}x |")
            if workload == "fills":
                row += f" {mine / per_core('nginx', size):.2f}x |"
            lines.append(row)
    return "\n".join(lines)


def measure(args: argparse.Namespace) -> None:
    require_tools(("wrk", "varnishd", "nginx", "taskset"), "bench-pull")
    print(f"# pull_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # varnish and nginx workers run as their own users
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra={
            "ASSETCDN_EDGE_MEMORY_CACHE_MB": "512", "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
        started: list[Server] = []
        try:
            edge, _control = whole_system(cdn)
            edge.pin(args.server_core)
            base = free_port_block(3)
            origin, bodies = start_origin(workdir, base, args.load_core)
            started.append(origin)
            varnish = start_varnish(workdir, base + 1, base, args.server_core)
            nginx = start_proxy_nginx(workdir, base + 2, base, args.server_core)
            started += [varnish, nginx]
            for server in started:
                asyncio.run(wait_up(server.base + "/"))
            origin.pin(args.load_core)
            for reference in (varnish, nginx):
                reference.pin(args.server_core)
            asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, ZONE, origin.base, cdn.data_dir))
            fetched_at = time.time()
            bases = {"edge": f"{edge.base}/{ZONE}", "varnish": varnish.base, "nginx": nginx.base}
            every = {"edge": edge, "varnish": varnish, "nginx": nginx}
            every = {name: every[name] for name in CONTENDERS if name in args.contenders}
            sizes = [size for size in SIZES if size in args.sizes]
            for name in every:
                asyncio.run(warm(bases[name], [SIZES[size][0] for size in sizes],
                                 {SIZES[size][0]: bodies[SIZES[size][0]] for size in sizes}))
            for size in sizes:
                url = f"{bases['edge']}/{SIZES[size][0]}"
                print(f"# edge {size} hit: Age on sampled answers {asyncio.run(sampled_ages(url, fetched_at))} "
                      f"(fetched {time.time() - fetched_at:.1f} s ago)")
            print(f"# warmed; contenders (the edge with control) on core {args.server_core}; the origin and wrk on "
                  f"core {args.load_core}; load average {load_average()}", flush=True)
            samples: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
            order = list(every)
            for round_ in range(args.rounds):
                for workload in args.workloads:
                    for size in sizes:
                        name_, prefix_, _ = SIZES[size]
                        for name in order:
                            if workload == "hits":
                                url, lua = f"{bases[name]}/{name_}", ""
                            else:
                                url = f"{bases[name]}/"
                                path = f"{bases[name].removeprefix(every[name].base)}/{prefix_}/r{round_}-"
                                lua = FILL_LUA.replace("{prefix}", path)
                            every[name].pin(args.server_core)  # a process started since the last walk too
                            result, cores = run(every[name], url, args, lua, SETTLE_S if name == "edge" else 0.0)
                            samples.setdefault((workload, size, name), []).append((result.rps, result.p99_ms, cores))
                            print(f"round {round_ + 1} {workload:>5} {size:>6} {name:>7}: {result.rps:9,.0f} req/s "
                                  f"p99 {result.p99_ms:7.2f} ms cpu {cores:.2f} per core "
                                  f"{result.rps / cores if cores else 0:9,.0f} errors {result.errors} "
                                  f"(load {load_average()})", flush=True)
                order = order[1:] + order[:1]
            print(f"\n# medians of {args.rounds} rounds, wrk -t{args.threads} -c{args.connections} "
                  f"-d{args.duration:g}s; load average after: {load_average()}")
            for workload in args.workloads:
                print(f"\n## {workload}\n")
                print(table(samples, workload, list(every)))
        finally:
            for server in started:
                stop(server)
            cdn.stop()


def main(argv: list[str] | None = None) -> int:
    parser = wrk_arguments(__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of: {', '.join(SIZES)}")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of: hits, fills")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated, of: edge, varnish, nginx (varnish and nginx are always run: the "
                             "references)")
    args = parser.parse_args(argv)
    args.sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.contenders = [name for name in CONTENDERS if name in ("varnish", "nginx") or name in args.contenders]
    if not args.sizes or any(size not in SIZES for size in args.sizes):
        parser.error(f"--sizes: comma-separated, of: {', '.join(SIZES)}")
    if not args.workloads or any(w not in WORKLOADS for w in args.workloads):
        parser.error("--workloads: comma-separated, of: hits, fills")
    if not 0 < args.duration <= 60 or not 0 < args.rounds <= 20:
        parser.error("--duration within (0, 60], --rounds within (0, 20]")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
