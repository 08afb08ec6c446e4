"""The floor of a cache fill on this stack: a bare proxy on uvloop and httptools, CPU per request, no cache.

    .venv/bin/python -m benchmarks.fill_floor [--duration 4] [--rounds 3] [--decisions]

What the edge's fill (assetcdn/edge/fastpath/pull_fill.py) cannot do with less, on the same event loop and
parser: read a client's request, send a GET on a kept-alive connection to the origin (one per client
connection: no pool to wait for), read the answer and write it back with its fields (hop-by-hop ones left
out). No cache, no freshness rules, no logging. The origin is benchmarks/pull_bench.py's nginx, pinned with wrk
to core 1; the proxy runs on core 0; wrk (``-t2 -c64``) asks for pull_bench's fill URLs, a new one per request.
Prints the proxy's CPU per request per size: the part of a fill's cost that is the stack's, not the edge's.
With ``--decisions`` the proxy also takes the edge's own steps of a fill on each answer (`Decisions`: the memory
tier's look-up and the disk tier's filter, `pull.judge`, keeping it in a one-worker edge's cache with the calls
`pull.store` makes, the client's head by `pull.client_headers`), so that what a fill's decisions cost is told apart
from what the plumbing around them costs. Unlike the edge it never waits for the cache's writer (the edge's fill
waits when the writer is behind what the memory tier evicts: here the oldest evicted entries waiting for it are let
go unwritten instead, so it may write fewer than the edge) and asks no SQLite for a key the filter says the disk
may hold (every URL here is new); the writer thread's CPU, in the same process, is counted, read once the
process's CPU has stopped rising after each round (`settled`).
Loopback only; every run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from assetcdn.edge.fastpath.prepared import STATUS_200, header_lines
from assetcdn.edge.states.freshness import first_value, stored_headers, vary_fields
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import (
    client_headers,
    fill_cache_status,
    judge,
    origin_tags,
    own_tags,
    stored_meta,
)
from assetcdn.shared.cache_results import CacheResult
from benchmarks.hits_bench import SETTLE_S, anchor, stop, wait_up
from benchmarks.load import run_wrk
from benchmarks.measure import load_average, machine, require_tools
from benchmarks.pull_bench import FILL_LUA, SIZES, ready_origin
from tests.integration.harness import free_port_block

if TYPE_CHECKING:
    from assetcdn.edge.origin_client import OriginResponse

HOP_BY_HOP = (b"connection", b"keep-alive", b"transfer-encoding")


class Upstream(asyncio.Protocol):
    """The origin side of one client connection: a response parsed, then written to the client whole."""

    def __init__(self, client: Client) -> None:
        import httptools

        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.fields: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.fields, self.body = [], []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        if self.client.decisions is not None:
            self.client.answer(self.client.decisions.answer(self.client.sent, self.fields, body), body)
            return
        head = b"HTTP/1.1 200 OK\r\n" + b"".join(name + b": " + value + b"\r\n" for name, value in self.fields
                                                 if name.lower() not in HOP_BY_HOP[:2]) + b"\r\n"
        self.client.answer(head, body)


class Decisions:
    """``--decisions``: the edge's own steps of a fill on the floor's plumbing (its cache, the functions that
    judge and store an answer and make the client's head), to tell what a fill's decisions cost from what the
    plumbing around them (coroutines, the origin pool, the hit path's claim, the delivery log) costs."""

    def __init__(self, directory: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from yarl import URL

        from assetcdn.edge.cache.store import EdgeCache
        from assetcdn.edge.origin_client import Origin
        from assetcdn.edge.site_config import PullZone

        self.cache = EdgeCache(directory, memory_bytes=512 * 1024 * 1024)
        self.cache.alone = True
        self.writer = ThreadPoolExecutor(1)
        self.zone = PullZone("pull", Origin(URL("http://127.0.0.1/")))

    def answer(self, url: bytes, raw: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        """The client's head for a 200 the origin sent (`raw` fields), the answer kept as the edge keeps it."""
        now = time.time()
        path = url.decode("ascii")
        key = pull_key(self.zone.name, path, "")
        cache = self.cache
        found = cache.memory.hit(key) is None and cache.disk.may_hold(key)
        headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in raw
                   if name.lower() not in HOP_BY_HOP]
        response = cast("OriginResponse", _Answer(200, headers, now, now))
        why, declared, parsed = judge(self.zone, [("host", "origin")], response, 1 << 30)
        if why is None and not found:
            head = stored_headers(headers, parsed)
            meta = stored_meta(head, 200, response, None)
            vary_fields(headers)
            tags = [*origin_tags(headers), *own_tags(self.zone, path)]
            cache.put_behind(key, body, first_value(head, "content-type") or "", first_value(head, "etag") or "",
                             tags, meta, writer=self.writer, since=cache.purge_mark())
        client = client_headers(headers, str(CacheResult.MISS), fill_cache_status("uri-miss", None), age=None,
                                shared_host=True, cookie_host="")
        return STATUS_200 + header_lines(client) + b"Content-Length: %d\r\n\r\n" % len(body)


def settled(cpu_seconds: Callable[[], float], quiet_s: float = 0.5, idle: float = 0.005) -> None:
    """Wait (at least SETTLE_S) until the process's CPU stops rising: a writer behind the round's evictions is
    done, so that its work is counted in the round that made it."""
    time.sleep(SETTLE_S)
    last = cpu_seconds()
    while True:
        time.sleep(quiet_s)
        now = cpu_seconds()
        if now - last < idle:
            return
        last = now


class _Answer:
    """What `judge` and `stored_meta` read of an origin's answer."""

    def __init__(self, status: int, headers: list[tuple[str, str]], request_time: float,
                 response_time: float) -> None:
        self.status, self.headers = status, headers
        self.request_time, self.response_time = request_time, response_time
        self.stale = False  # an origin's own answer, not a shield's from its stale copy


class Client(asyncio.Protocol):
    """One client connection: its requests in order, each sent to the origin once the previous one is answered."""

    def __init__(self, origin: tuple[str, int], decisions: Decisions | None) -> None:
        import httptools

        self.origin = origin
        self.decisions = decisions
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.upstream: Upstream | None = None
        self.waiting: deque[bytes] = deque()
        self.busy = False
        self.url = b""
        self.sent = b""  # the target of the request on the origin connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self.connect())

    async def connect(self) -> None:
        _, self.upstream = await asyncio.get_running_loop().create_connection(lambda: Upstream(self), *self.origin)
        self.next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        self.waiting.append(self.url)
        if not self.busy:
            self.next()

    def answer(self, head: bytes, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines((head, body))
        self.busy = False
        self.next()

    def next(self) -> None:
        if self.waiting and self.upstream is not None and self.upstream.transport is not None and not self.busy:
            self.busy = True
            self.sent = self.waiting.popleft()
            self.upstream.transport.write(b"GET " + self.sent + b" HTTP/1.1\r\nHost: origin\r\n\r\n")


def serve(port: int, origin_port: int, cache_dir: str | None) -> None:
    import uvloop

    decisions = None if cache_dir is None else Decisions(cache_dir)

    async def run() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: Client(("127.0.0.1", origin_port), decisions),
                                                                "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decisions", action="store_true",
                        help="also take the edge's own steps of a fill: judge, keep and head each answer")
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)  # the proxy process itself
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)  # its cache, with --decisions
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve[0], args.serve[1], args.cache_dir)
        return 0
    if not 0 < args.duration <= 60 or not 0 < args.rounds <= 20:
        parser.error("--duration within (0, 60], --rounds within (0, 20]")
    require_tools(("wrk", "nginx", "taskset"), "bench-pull")
    print(f"# fill_floor: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="fill-floor-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # the origin's nginx workers run as their own user
        port = free_port_block(2)
        origin, _ = ready_origin(workdir, port, "1")
        proxy = None
        try:
            command = ["taskset", "-c", "0", sys.executable, "-m", "benchmarks.fill_floor", "--serve",
                       str(port + 1), str(port)]
            if args.decisions:
                (workdir / "cache").mkdir()
                command += ["--cache-dir", str(workdir / "cache")]
            process = subprocess.Popen(command)
            proxy = anchor("bare proxy", f"http://127.0.0.1:{port + 1}", process)
            asyncio.run(wait_up(f"{proxy.base}/fill5k/up"))
            for size, (_, prefix, _) in SIZES.items():
                for round_ in range(args.rounds):
                    before = proxy.cpu_seconds()
                    result = run_wrk(f"{proxy.base}/", args.duration, 64, 2, prefix=("taskset", "-c", "1"),
                                     lua=FILL_LUA.replace("{prefix}", f"/{prefix}/r{round_}-"))
                    if args.decisions:  # the cache's writer thread finishes what the round evicted: counted
                        settled(proxy.cpu_seconds)
                    used = proxy.cpu_seconds() - before
                    print(f"{size}: {result.rps:,.0f} requests/s, {used / max(result.requests, 1) * 1e6:.0f} us of "
                          f"CPU a request; load {load_average()}", flush=True)
        finally:
            if proxy is not None:
                stop(proxy)
            stop(origin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
