"""Cache hits over TLS per core: the edge's https port beside hitch + Varnish and nginx with TLS.

    make bench-https     (installs hitch, Varnish, nginx, wrk, h2load and openssl from Debian when absent, then runs this)
    .venv/bin/python -m benchmarks.https_bench [--duration 4] [--rounds 1]

One control plane (``assetcdn up``, one edge with one worker and an https port) holds 5 KB and 100 KB
files (benchmarks/hits_bench.py's, in the edge's memory tier). One ECDSA P-256 certificate for
``localhost`` (a test CA made here) is served by all three: the edge (``[tls] certificates``), hitch
(TLS, one worker, PROXY v2 with ALPN to Varnish) in front of Varnish (malloc storage, HTTP/2 on,
the VCL of hits_bench fetching from control), and nginx (``ssl http2``, proxy_cache, one worker). Each
server's whole process tree is pinned to core 0, hitch and Varnish together, so "server CPU" counts
both, and every process of ``assetcdn up`` (supervisor, control, the edge, any image worker) together at
normal priority (the whole system a hit costs; the tree is walked again before each run and at each CPU
reading, as in benchmarks/hits_bench.py); the load generator runs on core 1. The edge's CPU is read until
``SETTLE_S`` after each run, when control has taken the run's last analytics flush. Per server and size:

- ``tls h1``: wrk over https with keep-alive (``-t2 -c64``): TLS records, no handshakes after the first;
- ``h2``: h2load (``-c8 -m16``: 8 connections, 16 streams each) over https with ALPN h2;
- ``h2 m100``: the same with 100 streams per connection (``-c8 -m100``), every stream a server allows at once;
- ``new conn``: ``openssl s_time -new`` (``S_TIME_CLIENTS`` at once): every request a new TCP connection
  and a full TLS handshake (TLS 1.3, X25519, ECDSA signature, no session offered) plus one 5 KB hit with
  ``Connection: close``; a connection that resumed a session counts as an error. (wrk cannot be used
  here: it offers each thread's last session when it reconnects, so its new connections are resumptions.)
- ``resumed``: ``openssl s_time -reuse`` (``S_TIME_CLIENTS`` at once): every request a new TCP
  connection resuming the session of the client's first (TLS 1.3: a ticket, with an ECDHE key
  exchange, no certificate and no signature) plus one 5 KB hit with ``Connection: close``; a
  connection that did not resume counts as an error.

Printed: req/s, the server's CPU (cores, from /proc) and req/s per core, and the ratios to hitch +
Varnish. Loopback only; every run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from benchmarks import measure
from benchmarks.hits_bench import (
    SETTLE_S,
    VCL,
    Server,
    anchor,
    prepare_files,
    stop,
    whole_system,
)
from benchmarks.load import run_wrk
from benchmarks.measure import load_average, machine, tool_path
from benchmarks.nginx_conf import TlsFiles, nginx_conf
from tests.edge.tls.certs import TestCa
from tests.integration.harness import KEYS, free_port_block, start_cdn

SIZES = ["5 KB", "100 KB"]
MODES = ("tls h1", "h2", "h2 m100", "new conn", "resumed")
H2LOAD_STREAMS = {"h2": 16, "h2 m100": 100}  # streams per connection (h2load -m)
HANDSHAKE_MODES = ("new conn", "resumed")  # measured with the 5 KB file only
S_TIME_CLIENTS = 4
SERVERS = ("hitch+varnish", "nginx", "edge")

HITCH = """frontend = "[127.0.0.1]:{port}"
backend = "[127.0.0.1]:{backend}"
pem-file = "{pem}"
workers = 1
daemon = off
user = "nobody"
tls-protos = TLSv1.2 TLSv1.3
ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20"
alpn-protos = "h2, http/1.1"
write-proxy-v2 = on
"""


@dataclass
class Sample:
    rps: float
    cpu: float
    errors: int
    part_cpu: float = 0.0  # `measure_one`'s `part`: cores over the run alone

    @property
    def per_core(self) -> float:
        return self.rps / self.cpu if self.cpu > 0 else 0.0


def require_tools() -> None:
    measure.require_tools(("wrk", "h2load", "hitch", "varnishd", "nginx", "taskset", "openssl"), "bench-https")


def start_hitch_varnish(workdir: Path, port: int, varnish_port: int, control_port: int, pem: Path,
                        core: str) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    vcl = workdir / "bench.vcl"
    vcl.write_text(VCL.format(port=control_port, key=KEYS["ASSETCDN_ACCESS_KEY"]))
    varnish = subprocess.Popen(["taskset", "-c", core, tool_path("varnishd"), "-F", "-a", f"127.0.0.1:{varnish_port},PROXY",
                                "-f", str(vcl), "-s", "malloc,1g", "-n", str(workdir / "varnish"),
                                "-p", "thread_pools=1", "-p", "feature=+http2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conf = workdir / "hitch.conf"
    conf.write_text(HITCH.format(port=port, backend=varnish_port, pem=pem))
    hitch = subprocess.Popen(["taskset", "-c", core, tool_path("hitch"), f"--config={conf}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return hitch, varnish


def start_nginx_tls(workdir: Path, port: int, control_port: int, cert: Path, key: Path, core: str) -> subprocess.Popen[bytes]:
    directory = workdir / "nginx"
    directory.mkdir()
    os.chmod(directory, 0o777)
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, control_port, KEYS["ASSETCDN_ACCESS_KEY"], tls=TlsFiles(cert, key)))
    return subprocess.Popen(["taskset", "-c", core, tool_path("nginx"), "-c", str(conf), "-p", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def warm(base: str, paths: list[str], bodies: dict[str, bytes]) -> None:
    """GET each path over https until it is a hit (the certificate is checked by the load runs' peers,
    not here)."""
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as session:
        for path in paths:
            while True:
                try:
                    async with session.get(f"{base}/{path}") as resp:
                        body = await resp.read()
                        if resp.status == 200 and body == bodies[path] and \
                                resp.headers.get("X-Cache", "").startswith("HIT"):
                            break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{base}/{path} never became a hit")
                await asyncio.sleep(0.1)


def run_h2load(url: str, duration: float, prefix: tuple[str, ...], streams: int = 16) -> tuple[float, int]:
    completed = subprocess.run([*prefix, "h2load", "-c8", f"-m{streams}", "-t1", f"-D{max(1, round(duration))}", url],
                               capture_output=True, text=True, timeout=duration + 60, check=False)
    finished = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", completed.stdout)
    counts = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored",
                       completed.stdout)
    if completed.returncode != 0 or finished is None or counts is None:
        raise RuntimeError(f"h2load failed ({completed.returncode}): {completed.stdout[-500:]} {completed.stderr[-500:]}")
    return float(finished.group(1)), int(counts.group(2)) + int(counts.group(3))


def run_s_time(url: str, duration: float, prefix: tuple[str, ...], *, resume: bool) -> tuple[float, int]:
    """(connections per second, connections of the wrong kind) of S_TIME_CLIENTS ``openssl s_time`` at
    once, ``-reuse`` (each connection after a client's first resumes its session) or ``-new`` (every
    connection a full handshake). s_time sends ``GET <www> HTTP/1.0``: the path it is given ends in the rest of an HTTP/1.1 head,
    so each server answers ``GET <path> HTTP/1.1`` with ``Connection: close`` (its HTTP/1.0 tail becomes
    a header's value). Each prints a line of one character per connection (``r``: resumed, ``*``: a
    full handshake), then an empty line and ``N connections in ...``."""
    parts = urlsplit(url)
    request = f"{parts.path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Bench-Client:"
    command = [*prefix, "openssl", "s_time", "-connect", f"127.0.0.1:{parts.port}", "-reuse" if resume else "-new",
               "-time", str(max(1, round(duration))), "-www", request]
    began = time.monotonic()
    clients = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(S_TIME_CLIENTS)]
    connections = wrong = 0
    for client in clients:
        out, err = client.communicate(timeout=duration + 60)
        found = re.search(r"^([*rt3]*)\n\n(\d+) connections in", out, re.M)
        if client.returncode != 0 or found is None:
            raise RuntimeError(f"s_time failed ({client.returncode}): {out[-500:]} {err[-500:]}")
        progress, counted = found.groups()
        connections += int(counted)
        resumed = progress.count("r")
        wrong += len(progress.strip()) - resumed if resume else resumed
    return connections / (time.monotonic() - began), wrong


def measure_one(server: Server, mode: str, url: str, args: argparse.Namespace, prefix: tuple[str, ...],
                settle_s: float = 0.0, part: Server | None = None) -> Sample:
    """One load run; the server's CPU from its start until ``settle_s`` after it, per second of the run, and
    that of `part` (one of its processes: the edge worker) from its start to its end."""
    before = server.cpu_seconds()
    part_before = 0.0 if part is None else part.cpu_seconds()
    began = time.monotonic()
    if mode in H2LOAD_STREAMS:
        rps, errors = run_h2load(url, args.duration, prefix, H2LOAD_STREAMS[mode])
    elif mode in HANDSHAKE_MODES:
        rps, errors = run_s_time(url, args.duration, prefix, resume=mode == "resumed")
    else:
        result = run_wrk(url, args.duration, args.connections, 2, prefix=prefix)
        rps, errors = result.rps, result.errors
    elapsed = time.monotonic() - began
    part_cores = 0.0 if part is None else (part.cpu_seconds() - part_before) / elapsed
    time.sleep(settle_s)
    cores = (server.cpu_seconds() - before) / elapsed
    return Sample(rps, cores, errors, part_cores)


def table(samples: dict[tuple[str, str, str], list[Sample]], modes: list[str]) -> str:
    lines = ["| mode | object | server | req/s | server CPU (cores) | req/s per core | per core vs hitch+Varnish | "
             "errors |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for mode in [mode for mode in MODES if any(key[1] == mode for key in samples)]:
        for size in (SIZES[:1] if mode in HANDSHAKE_MODES else SIZES):
            anchor = statistics.median(s.per_core for s in samples[("hitch+varnish", mode, size)])
            for name in SERVERS:
                runs = samples[(name, mode, size)]
                rps = statistics.median(s.rps for s in runs)
                cpu = statistics.median(s.cpu for s in runs)
                per_core = statistics.median(s.per_core for s in runs)
                lines.append(f"| {mode} | {size} | {name} | {rps:,.0f} | {cpu:.2f} | {per_core:,.0f} | "
                             f"{per_core / anchor:.2f}x | {sum(s.errors for s in runs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    parser.add_argument("--modes", default=",".join(MODES), help=f"a comma-separated choice of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    modes = [mode.strip() for mode in args.modes.split(",")]
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: choose among {', '.join(MODES)}")
    require_tools()
    core, load_core = args.server_core, args.load_core
    prefix = ("taskset", "-c", load_core)
    print(f"# https_bench: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="https-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # hitch, Varnish and nginx workers run as their own users
        issued = TestCa().issue("localhost")
        cert, key = issued.write(workdir, "localhost")
        pem = workdir / "hitch.pem"
        pem.write_bytes(issued.chain_pem + issued.key_pem)
        for path in (cert, key, pem):
            path.chmod(0o644)  # read by hitch's and nginx's unprivileged workers (a throwaway test key)
        base = free_port_block(4)
        edge_https = base
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512", "ASSETCDN_TLS_HTTPS_PORT": str(edge_https),
               "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(cert), str(key)]])}
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        processes: list[subprocess.Popen[bytes]] = []
        try:
            control_port = int(cdn.control_url.rsplit(":", 1)[1])
            # What a hit costs the whole system: control (analytics, request log) is pinned with the edge
            # and counted in its per-core figure, at normal priority.
            edge, _control = whole_system(cdn)
            edge.base = f"https://localhost:{edge_https}"
            edge.pin(core)
            hitch, varnish = start_hitch_varnish(workdir, base + 1, base + 2, control_port, pem, core)
            nginx = start_nginx_tls(workdir, base + 3, control_port, cert, key, core)
            processes = [hitch, varnish, nginx]
            paths, bodies = asyncio.run(prepare_files(cdn, SIZES))
            servers = {"edge": edge,
                       "hitch+varnish": Server("hitch+varnish", f"https://localhost:{base + 1}", [],
                                               roots=(hitch.pid, varnish.pid)),
                       "nginx": anchor("nginx", f"https://localhost:{base + 3}", nginx)}
            for server in servers.values():
                asyncio.run(warm(server.base, list(paths.values()), bodies))
                server.pin(core)
            print(f"# warmed; servers pinned to core {core} (as \"edge\": every process of `up`, pids "
                  f"{edge.pids}; hitch and Varnish together), load generator on core {load_core}; "
                  f"load average {load_average()}", flush=True)
            samples: dict[tuple[str, str, str], list[Sample]] = {}
            for round_index in range(args.rounds):
                order = list(SERVERS[round_index % 3:] + SERVERS[:round_index % 3])
                for mode in modes:
                    for size in (SIZES[:1] if mode in HANDSHAKE_MODES else SIZES):
                        for name in order:
                            server = servers[name]
                            url = f"{server.base}/{paths[size]}"
                            server.pin(core)  # a process started since the last walk is pinned too
                            sample = measure_one(server, mode, url, args, prefix,
                                                 SETTLE_S if name == "edge" else 0.0)
                            samples.setdefault((name, mode, size), []).append(sample)
                            print(f"# round {round_index + 1} {mode} {size} {name}: {sample.rps:,.0f} req/s, "
                                  f"{sample.cpu:.2f} cores, {sample.errors} errors; load {load_average()}", flush=True)
            print(table(samples, modes))
            print(f"# done; load average {load_average()}")
        finally:
            for process in processes:
                stop(Server("", "", [], process))
            cdn.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
