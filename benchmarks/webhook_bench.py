"""Webhook delivery: latency from event to receiver, and outbox throughput (written and delivered).

    .venv/bin/python -m benchmarks.webhook_bench [--events 300] [--backlog 1000] [--hooks 4]

Starts the real product (``tests/integration/harness.start_cdn``: control plus one edge on free
loopback ports, the development setting ``webhooks.allow_loopback`` on) and a receiver in this
process on 127.0.0.1 that checks every signature. Three measurements:

- latency: ``--events`` sequential uploads (one commit, one ``asset.created`` each) to one webhook;
  for each event, receiver arrival time minus the time control wrote the event to the outbox
  (``webhook_events.created_at``, read from the database afterwards; both clocks are this machine's).
- delivered: the receiver holds every request while ``--backlog`` events are written by batch
  uploads (50 files, 50 events per commit) for each of ``--hooks`` webhooks; then it answers, and
  the drain (first answer to last delivery) gives deliveries/s, with the default bounds (4 in flight
  per webhook, 32 in all) and a new connection per delivery.
- written: the same batch uploads, events written per second through the API (commit included), and
  the outbox alone (``Outbox.stage`` + commit on a scratch database, 1 and 50 events per transaction).

Loopback only; every wait is bounded (``--timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from assetcdn.control.storage.database import open_database
from assetcdn.control.webhooks.events import Event
from assetcdn.control.webhooks.outbox import Outbox
from benchmarks.measure import percentile
from tests.control.webhooks.receiver import Receiver
from tests.integration.harness import ACCESS, ACCOUNT, start_cdn

ZONE = "bench"
BATCH = 50


async def wait_for(receiver: Receiver, condition: Callable[[], bool], bound_s: float) -> None:
    """Receiver.wait, repeated up to `bound_s` (a large backlog may take longer than one wait's bound)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            await receiver.wait(condition)
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise


async def register(session: aiohttp.ClientSession, control: str, receiver: Receiver, name: str) -> None:
    async with session.post(f"{control}/api/webhooks", headers=ACCOUNT, json={
            "url": receiver.url(name, host="127.0.0.1"), "events": ["asset.created"]}) as resp:
        assert resp.status == 201, await resp.text()
        receiver.secrets[name] = (await resp.json())["secret"]


async def measure_latency(session: aiohttp.ClientSession, control: str, receiver: Receiver, events: int,
                          database: Path, bound_s: float) -> list[float]:
    await register(session, control, receiver, "latency")
    for i in range(events):
        async with session.put(f"{control}/api/storage/{ZONE}/v1/logos/l{i}.txt", data=b"x" * 100,
                               headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
    await wait_for(receiver, lambda: len(receiver.delivered("latency")) >= events, bound_s)
    arrived = {r.headers["X-Webhook-Id"]: r.arrived for r in receiver.delivered("latency")}

    def written() -> dict[str, float]:
        with sqlite3.connect(database) as db:
            return dict(db.execute("SELECT id, created_at FROM webhook_events"))

    created = await asyncio.to_thread(written)
    return [(arrived[i] - created[i]) * 1000 for i in arrived if i in created]


async def measure_backlog(session: aiohttp.ClientSession, control: str, receiver: Receiver, backlog: int,
                          hooks: int, bound_s: float) -> tuple[float, float]:
    """(events written per second through batch uploads, deliveries per second draining the backlog)."""
    names = [f"drain{i}" for i in range(hooks)]
    for name in names:
        await register(session, control, receiver, name)
        receiver.hold(name)
    started = time.perf_counter()
    for first in range(0, backlog, BATCH):
        files = [{"path": f"{ZONE}/v1/banners/b{n}.txt", "content": base64.b64encode(b"y" * 100).decode()}
                 for n in range(first, min(first + BATCH, backlog))]
        async with session.post(f"{control}/api/storage/batch", json={"files": files}, headers=ACCESS) as resp:
            assert resp.status == 201, await resp.text()
    written = backlog / (time.perf_counter() - started)
    opened = time.time()
    for name in names:
        receiver.gates[name].set()
    await wait_for(receiver, lambda: all(len(receiver.delivered(n)) >= backlog for n in names), bound_s)
    last = max(r.arrived for n in names for r in receiver.delivered(n))
    return written, backlog * hooks / (last - opened)


async def outbox_alone(events: int) -> dict[int, float]:
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = await open_database(Path(tmp) / "bench.sqlite3")
        try:
            outbox = Outbox(db)
            for per_transaction in (1, BATCH):
                started = time.perf_counter()
                for _ in range(0, events, per_transaction):
                    async with db.transaction() as tx:
                        await outbox.stage(tx, [Event(str(uuid.uuid4()), "asset.created", "2026-01-01T00:00:00.000Z",
                                                      {"path": "/bench/v1/logos/x.txt", "size": 100})
                                                for _ in range(per_transaction)])
                rates[per_transaction] = events / (time.perf_counter() - started)
        finally:
            await db.close()
    return rates


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--hooks", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    receiver = Receiver()
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    receiver.port = runner.addresses[0][1]
    with tempfile.TemporaryDirectory() as tmp:
        cdn = await asyncio.to_thread(start_cdn, Path(tmp), env_extra={"ASSETCDN_WEBHOOKS_ALLOW_LOOPBACK": "true"})
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE},
                                        headers=ACCOUNT) as resp:
                    assert resp.status == 201, await resp.text()
                latency = await measure_latency(session, cdn.control_url, receiver, args.events,
                                                cdn.data_dir / "control.sqlite3", args.timeout)
                written, delivered = await measure_backlog(session, cdn.control_url, receiver, args.backlog,
                                                           args.hooks, args.timeout)
        finally:
            await asyncio.to_thread(cdn.stop)
            await runner.cleanup()
    alone = await outbox_alone(args.backlog * 2)
    assert not receiver.bad_signatures
    print(f"latency event -> receiver ({len(latency)} events, one webhook): p50 {statistics.median(latency):.1f} ms, "
          f"p90 {percentile(latency, 0.9):.1f} ms, p99 {percentile(latency, 0.99):.1f} ms, max {max(latency):.1f} ms")
    print(f"written through the API (batch uploads of {BATCH}): {written:.0f} events/s")
    print(f"delivered ({args.backlog} events x {args.hooks} webhooks, backlog drained): {delivered:.0f} deliveries/s")
    print(f"outbox alone: {alone[1]:.0f} events/s (1 per transaction), {alone[BATCH]:.0f} events/s "
          f"({BATCH} per transaction)")


if __name__ == "__main__":
    asyncio.run(main())
