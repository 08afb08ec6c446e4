"""Load generator for cache hits on loopback: req/s, p50 and p99 latency, errors.

    .venv/bin/python -m benchmarks.load --url http://127.0.0.1:8788/path --duration 10 --concurrency 64

Uses ``wrk`` when it is installed (Debian package ``wrk``), reading its results from a Lua
``done()`` hook that prints exact numbers as JSON. Without wrk it falls back to an aiohttp
client spread over several processes; that client is much slower than wrk, so it can be the
bottleneck: the output always names the generator that produced the numbers.
Only loopback URLs are accepted, and every run is bounded by ``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from benchmarks.measure import percentile

WRK_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%.0f,"duration_us":%.0f,"bytes":%.0f,"p50_us":%.0f,'
    .. '"p99_us":%.0f,"connect":%.0f,"read":%.0f,"write":%.0f,"status":%.0f,"timeout":%.0f}\\n',
    summary.requests, summary.duration, summary.bytes, latency:percentile(50),
    latency:percentile(99), e.connect, e.read, e.write, e.status, e.timeout))
end
"""


@dataclass(frozen=True, slots=True)
class LoadResult:
    generator: str
    url: str
    concurrency: int
    duration_s: float
    requests: int
    bytes_read: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    error_detail: str

    def summary(self) -> str:
        return (
            f"generator: {self.generator}\n"
            f"url: {self.url} (concurrency {self.concurrency})\n"
            f"requests: {self.requests} in {self.duration_s:.2f} s, "
            f"{self.bytes_read / 1e6:.1f} MB read\n"
            f"req/s: {self.rps:,.0f}\n"
            f"latency: p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms\n"
            f"errors: {self.errors} ({self.error_detail})"
        )


def require_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"refusing to load-test {url!r}: only loopback hosts are allowed")


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(url: str, duration: float, concurrency: int, threads: int,
            prefix: tuple[str, ...] = (), headers: tuple[str, ...] = (), lua: str = "") -> LoadResult:
    """One wrk run; ``prefix`` goes before the command (e.g. ``taskset -c 1`` to pin it); ``headers``
    are sent with every request (``Connection: close``: a new connection per request); ``lua`` is more
    of the wrk script (a ``request`` function: a new URL per request, benchmarks/pull_bench.py)."""
    threads = max(1, min(threads, concurrency))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua + WRK_SCRIPT)
    try:
        command = [
            *prefix,
            "wrk",
            f"-t{threads}",
            f"-c{concurrency}",
            f"-d{max(1, round(duration))}s",
            "--timeout",
            "5s",
            "-s",
            script.name,
            *(arg for header in headers for arg in ("-H", header)),
            url,
        ]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=duration + 30, check=False
        )
    finally:
        os.unlink(script.name)
    line = next((ln for ln in completed.stdout.splitlines() if ln.startswith("WRK_RESULT ")), None)
    if completed.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr.strip()}")
    data = json.loads(line.removeprefix("WRK_RESULT "))
    seconds = data["duration_us"] / 1e6
    socket_errors = data["connect"] + data["read"] + data["write"] + data["timeout"]
    return LoadResult(
        generator=f"wrk -t{threads} -c{concurrency} (Lua done() summary)",
        url=url,
        concurrency=concurrency,
        duration_s=seconds,
        requests=int(data["requests"]),
        bytes_read=int(data["bytes"]),
        rps=data["requests"] / seconds if seconds else 0.0,
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        errors=int(socket_errors + data["status"]),
        error_detail=(
            f"connect {data['connect']:.0f}, read {data['read']:.0f}, write {data['write']:.0f}, "
            f"timeout {data['timeout']:.0f}, non-2xx/3xx {data['status']:.0f}"
        ),
    )


@dataclass(slots=True)
class _ClientPart:
    """What one client process measured."""

    latencies: list[float]
    requests: int = 0
    bytes_read: int = 0
    status: int = 0
    exceptions: int = 0
    elapsed: float = 0.0


def _client_process(url: str, duration: float, connections: int) -> _ClientPart:
    """One client process: ``connections`` keep-alive loops until the deadline."""
    import aiohttp
    import uvloop

    async def run() -> _ClientPart:
        part = _ClientPart(latencies=[])
        deadline = time.perf_counter() + duration
        timeout = aiohttp.ClientTimeout(total=5)
        connector = aiohttp.TCPConnector(limit=connections, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def loop() -> None:
                while time.perf_counter() < deadline:
                    started = time.perf_counter()
                    try:
                        async with session.get(url) as response:
                            body = await response.read()
                            if response.status >= 400:
                                part.status += 1
                    except (aiohttp.ClientError, TimeoutError):
                        part.exceptions += 1
                        continue
                    part.latencies.append(time.perf_counter() - started)
                    part.requests += 1
                    part.bytes_read += len(body)

            started = time.perf_counter()
            await asyncio.gather(*(loop() for _ in range(connections)))
            part.elapsed = time.perf_counter() - started
        return part

    return uvloop.run(run())


def run_python(url: str, duration: float, concurrency: int, processes: int) -> LoadResult:
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        parts = pool.starmap(_client_process, [(url, duration, share) for share in shares])
    latencies = sorted(x for part in parts for x in part.latencies)
    requests = sum(part.requests for part in parts)
    status = sum(part.status for part in parts)
    exceptions = sum(part.exceptions for part in parts)
    elapsed = max(part.elapsed for part in parts)
    return LoadResult(
        generator=f"python aiohttp client, {processes} processes (may be the bottleneck)",
        url=url,
        concurrency=concurrency,
        duration_s=elapsed,
        requests=requests,
        bytes_read=sum(part.bytes_read for part in parts),
        rps=requests / elapsed if elapsed else 0.0,
        p50_ms=percentile(latencies, 0.50) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        errors=status + exceptions,
        error_detail=f"non-2xx/3xx {status}, exceptions {exceptions}",
    )


def run_load(
    url: str,
    duration: float = 10.0,
    concurrency: int = 64,
    generator: str = "auto",
    threads: int = 2,
) -> LoadResult:
    """Run one bounded load test; ``generator`` is ``auto``, ``wrk`` or ``python``."""
    require_loopback(url)
    if generator == "wrk" or (generator == "auto" and wrk_available()):
        return run_wrk(url, duration, concurrency, threads)
    return run_python(url, duration, concurrency, processes=threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a loopback URL that answers a cache hit")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument("--concurrency", type=int, default=64, help="open connections")
    parser.add_argument(
        "--threads", type=int, default=2, help="wrk threads or client processes (default 2)"
    )
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 600:
        parser.error("--duration must be within (0, 600] seconds")
    result = run_load(args.url, args.duration, args.concurrency, args.generator, args.threads)
    sys.stdout.write((json.dumps(asdict(result)) if args.json else result.summary()) + "\n")
    return 0 if result.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
