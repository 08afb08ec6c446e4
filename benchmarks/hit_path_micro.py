"""The Python part of a cache hit alone: request heads fed to a hit connection, answers to a no-op transport.

    .venv/bin/python -m benchmarks.hit_path_micro [--requests 200000] [--repeat 5]

A control app and an edge app in this process (as tests/support/hit_cdn.py builds them), a
5 KB file uploaded and warmed. Then one ``HitProtocol`` (assetcdn/edge/fastpath/protocol.py) is handed, one
at a time as a client sends them, the request heads of wrk (two lines) and of a browser (nine
headers, the same path); its transport throws the answers away. Printed: microseconds of process
CPU per request (best of ``--repeat`` runs: the least disturbed by the rest of the machine) and what
the same loop costs with ``data_received`` doing nothing (the loop's own share). Nothing here is the
kernel's or the event loop's part of a hit (benchmarks/profile_hits.py measures the whole).
Delivery-log shipping is done by a timer on the event loop, which does not run during the loop; after
each run its share is measured apart: the batch made of that run's hits (``DeliveryLog.take``, the
rollups and the sample) and its JSON encoding, per hit of the run. Last, the wrk head with the access
log on (``[access_log] output = "file"``): the cost per hit, and the writer thread's per hit.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import uvloop
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.access_log import AccessLog
from assetcdn.edge.app import EdgeIdentity
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.fastpath.hit_server import HitSite
from assetcdn.edge.fastpath.protocol import HitProtocol
from assetcdn.shared.config import load_settings
from assetcdn.shared.http_server import name_the_server
from tests.support.control import ACCESS, ACCOUNT, SECRETS

ZONE = "micro"
PATH = f"/{ZONE}/v1/a.bin"
WRK = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n".encode()
BROWSER = (f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) "
           "Gecko/20100101 Firefox/128.0\r\nAccept: */*\r\nAccept-Language: en-US,en;q=0.5\r\n"
           "Accept-Encoding: gzip, deflate, br\r\nReferer: http://127.0.0.1:8080/\r\nConnection: keep-alive\r\n"
           "Sec-Fetch-Dest: empty\r\nSec-Fetch-Mode: cors\r\n\r\n").encode()


class NullTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += 1

    def writelines(self, chunks: Any) -> None:
        self.written += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass  # at the end, when the site stops


def per_request(feed: Any, request: bytes, count: int) -> float:
    began = time.process_time()
    for _ in range(count):
        feed(request)
    return (time.process_time() - began) / count * 1e6


@asynccontextmanager
async def hit_site(tmp: Path, name: str, environ: dict[str, str]) -> AsyncIterator[tuple[web.Application, HitSite]]:
    """A control app and an edge app (worker 0 of edge `name`, its hits answered by a ``HitSite`` on a free port)
    in this process, with `environ`'s settings, the zone ``ZONE`` made and a 5 KB file uploaded at ``PATH``;
    both stopped on leaving."""
    name_the_server()
    settings = load_settings(environ=environ)
    control_server = TestServer(control.app.create_app(settings, SECRETS, tmp / "data"))
    client = TestClient(control_server)
    await client.start_server()
    identity = EdgeIdentity(name=name, worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp / "edge", advertise_host="127.0.0.1")
    app = edge.app.create_app(settings, SECRETS, identity)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = HitSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        assert (await client.post("/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT)).status == 201
        assert (await client.put(f"/api/storage{PATH}", data=b"x" * 5120, headers=ACCESS)).status == 201
        yield app, site
    finally:
        await runner.cleanup()
        await client.close()


def run_in_temporary_directory(run: Callable[[argparse.Namespace, Path], Coroutine[Any, Any, None]],
                               args: argparse.Namespace, prefix: str) -> int:
    """`run(args, directory)` on uvloop, in a temporary directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        uvloop.run(run(args, Path(tmp)))
    return 0


async def run(args: argparse.Namespace, tmp: Path) -> None:
    async with hit_site(tmp, "edge-m", {}) as (app, site):
        node = app[NODE]
        for _ in range(200):
            if node.replica.get(PATH[1:]) is not None:
                break
            await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        for _ in range(3):  # a miss, then hits: the path gets prepared
            writer.write(WRK)
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(0.2)
        writer.close()
        assert site.hits is not None
        connection = HitProtocol(site.hits)
        transport = NullTransport()
        connection.connection_made(transport)
        for request in (WRK, BROWSER):
            served = site.hits.served
            connection.data_received(request)
            assert site.hits.served == served + 1, f"not answered on the hit path: {request!r}"
        node.deliveries.take()  # what the warm-up counted
        shipping: list[float] = []
        for name, request in (("wrk (2 lines)", WRK), ("browser (9 headers)", BROWSER)):
            runs = []
            for _ in range(args.repeat):
                served = site.hits.served
                runs.append(per_request(connection.data_received, request, args.requests))
                # Between runs the loop runs (heartbeats: control stays reachable, so these stay hits).
                assert site.hits.served == served + args.requests, "some requests were not hits"
                began = time.process_time()
                while (batch := node.deliveries.take(time.time() + 2)) is not None:  # the run's second is over
                    orjson.dumps(batch)
                shipping.append((time.process_time() - began) / args.requests * 1e6)
                await asyncio.sleep(0.1)
            print(f"{name:>20}: {min(runs):.2f} us of CPU per hit (median of runs {sorted(runs)[len(runs) // 2]:.2f})")
        print(f"{'batch per hit':>20}: {min(shipping):.3f} us (take and JSON encoding, median "
              f"{sorted(shipping)[len(shipping) // 2]:.3f})")
        # The access log on (a file): its share of a hit, and its writer thread's per hit.
        access = node.deliveries.access = AccessLog("file", "edge-m/0", directory=tmp / "access-logs")
        runs, writes = [], []
        for _ in range(args.repeat):
            runs.append(per_request(connection.data_received, WRK, args.requests))
            began = time.process_time()
            await access.flush()
            writes.append((time.process_time() - began) / args.requests * 1e6)
            node.deliveries.take(time.time() + 2)
            await asyncio.sleep(0.1)
        node.deliveries.access = None
        access.close()
        print(f"{'wrk, access log on':>20}: {min(runs):.2f} us of CPU per hit (median {sorted(runs)[len(runs) // 2]:.2f}),"
              f" and {min(writes):.3f} us per hit to write the lines")
        empty = min(per_request(lambda data: None, WRK, args.requests) for _ in range(args.repeat))
        print(f"{'loop alone':>20}: {empty:.2f} us")
    await asyncio.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per run (a run blocks the loop)")
    parser.add_argument("--repeat", type=int, default=15)
    return run_in_temporary_directory(run, parser.parse_args(argv), "hit-micro-")


if __name__ == "__main__":
    sys.exit(main())
