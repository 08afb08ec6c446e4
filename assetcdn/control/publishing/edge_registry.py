"""EdgeRegistry: the edges control knows, and the fan-out of manifest changes and purges to them.

Pushes to one edge are serialised (so generations arrive in order) and at-least-once: an edge that
misses one catches up by itself. Every acknowledgement is recorded with its latency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from assetcdn.shared.cluster import PREFIX, PROTOCOL_VERSION, sign_request
from assetcdn.shared.timestamps import utc_now_iso

log = logging.getLogger(__name__)
PUSH_TIMEOUT_S = 5.0


@dataclass
class RegisteredEdge:
    name: str
    url: str
    registered_at: str
    last_seen: float
    generation: int = 0
    last_push_ms: float | None = None
    last_ack_at: str | None = None  # when the edge last acknowledged a push or purge (UTC ISO)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def public(self, now: float, timeout_s: float) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "registeredAt": self.registered_at,
                "lastSeenSecondsAgo": round(now - self.last_seen, 1), "generation": self.generation,
                "alive": now - self.last_seen <= timeout_s, "lastPushMs": self.last_push_ms,
                "lastAckAt": self.last_ack_at}


@dataclass(frozen=True)
class FanOut:
    """Which edges acknowledged a push or purge within the wait, and which had not yet."""

    acknowledged: tuple[str, ...]
    pending: tuple[str, ...]  # sent to, not acknowledged within the wait
    elapsed_ms: float
    results: dict[str, Any] = field(default_factory=dict)
    latencies_ms: dict[str, float] = field(default_factory=dict)  # per member: from the start to its ack
    # Registered, but not heard from within `control.edge_timeout_s` (stopped, or cut off from control while it may
    # still serve clients): not sent to, and not holding this yet; each catches up when it is back.
    quiet: tuple[str, ...] = ()

    def nodes(self) -> tuple[list[str], list[str]]:
        """(acknowledged, pending) edge nodes: members are `<node>/<worker>`; a node counts once all of its
        workers acknowledged, and is pending while one of them has not, sent to or `quiet`."""
        pending = sorted({m.split("/", 1)[0] for m in (*self.pending, *self.quiet)})
        acked = sorted({m.split("/", 1)[0] for m in self.acknowledged} - set(pending))
        return acked, pending

    def quiet_nodes(self) -> list[str]:
        """The pending nodes (`nodes`) none of whose workers was sent to: not heard from lately."""
        sent = {m.split("/", 1)[0] for m in (*self.acknowledged, *self.pending)}
        return sorted({m.split("/", 1)[0] for m in self.quiet} - sent)


LatencyObserver = Callable[[str, str, float], None]


class EdgeRegistry:
    def __init__(self, cluster_secret: str, edge_timeout_s: float,
                 observe: LatencyObserver | None = None) -> None:
        self._secret = cluster_secret
        self._timeout_s = edge_timeout_s
        self._observe = observe or (lambda kind, edge, seconds: None)
        self.edges: dict[str, RegisteredEdge] = {}
        self._session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S))

    async def close(self) -> None:
        """Cancel the sends still under way (to edges that may be unreachable) and wait for them to end."""
        pending = list(self._background)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._session:
            await self._session.close()

    def register(self, name: str, url: str, generation: int) -> RegisteredEdge:
        node = self.edges.get(name)
        if node is None or node.url != url:
            node = RegisteredEdge(name, url.rstrip("/"), utc_now_iso(), time.time(), generation)
            self.edges[name] = node
        node.last_seen = time.time()
        node.generation = generation
        return node

    def heartbeat(self, name: str, generation: int) -> bool:
        node = self.edges.get(name)
        if node is None:
            return False
        node.last_seen = time.time()
        node.generation = max(node.generation, generation)
        return True

    def live_edges(self) -> list[RegisteredEdge]:
        now = time.time()
        return [e for e in self.edges.values() if now - e.last_seen <= self._timeout_s]

    def describe(self) -> list[dict[str, Any]]:
        now = time.time()
        return [e.public(now, self._timeout_s) for e in self.edges.values()]

    async def _post(self, node: RegisteredEdge, path: str, message: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        body = orjson.dumps({"v": PROTOCOL_VERSION, **message})
        headers = {"Content-Type": "application/json",
                   **sign_request(self._secret, "POST", PREFIX + path, body, audience=node.name)}
        async with self._session.post(node.url + PREFIX + path, data=body, headers=headers) as resp:
            if resp.status != 200:
                raise RuntimeError(f"edge {node.name} answered {resp.status} to {path}")
            return orjson.loads(await resp.read())

    async def _send(self, kind: str, node: RegisteredEdge, path: str, message: dict[str, Any]) -> dict[str, Any]:
        async with node.lock:
            started = time.perf_counter()
            reply = await self._post(node, path, message)
            seconds = time.perf_counter() - started
            node.last_push_ms = round(seconds * 1000, 2)
            node.last_seen = time.time()
            node.last_ack_at = utc_now_iso()
            if "generation" in reply:
                node.generation = max(node.generation, int(reply["generation"]))
            self._observe(kind, node.name, seconds)
            return reply

    async def fan_out(self, kind: str, path: str, message: dict[str, Any], wait_s: float) -> FanOut:
        """Send `message` to every live edge; wait at most `wait_s`, letting slower sends finish behind."""
        started = time.perf_counter()
        edges = self.live_edges()
        quiet = tuple(sorted(set(self.edges) - {e.name for e in edges}))
        if not edges:
            return FanOut((), (), 0.0, quiet=quiet)
        acked_at: dict[str, float] = {}

        async def timed_send(node: RegisteredEdge) -> dict[str, Any]:
            reply = await self._send(kind, node, path, message)
            acked_at[node.name] = time.perf_counter()
            return reply

        tasks = {asyncio.create_task(timed_send(e)): e.name for e in edges}
        for task in tasks:
            self._background.add(task)
            task.add_done_callback(self._finished)
        done, _ = await asyncio.wait(tasks, timeout=wait_s)
        acked, pending, results = [], [], {}
        for task, name in tasks.items():
            if task in done and task.exception() is None:
                acked.append(name)
                results[name] = task.result()
            else:
                pending.append(name)
        latencies = {name: round((acked_at[name] - started) * 1000, 2) for name in acked if name in acked_at}
        return FanOut(tuple(sorted(acked)), tuple(sorted(pending)),
                      round((time.perf_counter() - started) * 1000, 2), results, latencies, quiet)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("cluster send failed: %s", task.exception())


