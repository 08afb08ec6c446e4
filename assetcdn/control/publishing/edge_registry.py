"""EdgeRegistry: the edges control knows, and the fan-out of manifest changes and purges to them.

Pushes to one edge are serialised (so generations arrive in order) and at-least-once: an edge that
misses one catches up by itself. Every acknowledgement is recorded with its latency.

The list is kept in a file of control's data directory (`edges.json`, written at most every SAVE_EVERY_S), so that
control started again knows the edges that were live before it stopped: until each calls again (at most a heartbeat
away) they are pushed to and counted, and a purge made meanwhile names one that does not acknowledge it as pending
rather than leaving it out of its answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from assetcdn.shared.cluster import PREFIX, PROTOCOL_VERSION, sign_request
from assetcdn.shared.timestamps import utc_now_iso

log = logging.getLogger(__name__)
PUSH_TIMEOUT_S = 5.0
SAVE_EVERY_S = 1.0  # the list's file is written at most this often: a kill loses at most this much of last_seen
SHARED_NAME_WARNING_S = 60.0  # two edges sharing a name or an address are warned of at most this often per each


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
                 observe: LatencyObserver | None = None, path: Path | None = None) -> None:
        self._secret = cluster_secret
        self._timeout_s = edge_timeout_s
        self._observe = observe or (lambda kind, edge, seconds: None)
        self.edges: dict[str, RegisteredEdge] = {}
        self._session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._path = path  # where the list is kept across restarts; None: not kept
        self._saved_at = 0.0  # monotonic
        self._save_later: asyncio.TimerHandle | None = None
        # name or address -> when control last warned that two edges share it (`_shared_name`, `_shared_address`)
        self._shared_warned: dict[str, float] = {}

    async def start(self) -> None:
        self._load()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S))

    async def close(self) -> None:
        """Cancel the sends still under way (to edges that may be unreachable) and wait for them to end."""
        pending = list(self._background)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._session:
            await self._session.close()
        if self._save_later is not None:
            self._save_later.cancel()
            self._save()

    def _load(self) -> None:
        """The edges that were live when the list was last written (their last contact within the timeout)."""
        if self._path is None:
            return
        try:
            saved = orjson.loads(self._path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("the list of edges in %s cannot be read (%s); edges register again", self._path, exc)
            return
        now = time.time()
        for entry in saved if isinstance(saved, list) else []:
            try:
                name, url, last_seen = entry["name"], entry["url"], float(entry["lastSeen"])
                node = RegisteredEdge(name, url, str(entry["registeredAt"]), last_seen, int(entry["generation"]))
            except (KeyError, TypeError, ValueError):
                continue
            if isinstance(name, str) and isinstance(url, str) and now - last_seen <= self._timeout_s:
                self.edges[name] = node

    def _touched(self) -> None:
        """An edge registered, called or acknowledged: the list's file is written now, or within SAVE_EVERY_S."""
        if self._path is None or self._save_later is not None:
            return
        wait = self._saved_at + SAVE_EVERY_S - time.monotonic()
        if wait <= 0:
            self._save()
        else:
            self._save_later = asyncio.get_running_loop().call_later(wait, self._save)

    def _save(self) -> None:
        self._save_later = None
        self._saved_at = time.monotonic()
        if self._path is None:
            return
        listed = [{"name": e.name, "url": e.url, "registeredAt": e.registered_at, "lastSeen": e.last_seen,
                   "generation": e.generation} for e in self.edges.values()]
        tmp = self._path.with_name(f"{self._path.name}.tmp")
        try:
            tmp.write_bytes(orjson.dumps(listed))
            os.replace(tmp, self._path)
        except OSError as exc:  # control goes on; only a restart's knowledge of the edges is lost
            log.warning("the list of edges cannot be written to %s: %s", self._path, exc)

    def register(self, name: str, url: str, generation: int) -> RegisteredEdge:
        node = self.edges.get(name)
        if node is None or node.url != url:
            node = RegisteredEdge(name, url.rstrip("/"), utc_now_iso(), time.time(), generation)
            self.edges[name] = node
            self._shared_address(node)
        node.last_seen = time.time()
        node.generation = generation
        self._touched()
        return node

    def heartbeat(self, name: str, generation: int, url: str = "") -> bool:
        """`url`: the address the edge worker registered (edges older than it send none). Another than the one
        registered under its name means two edges share that name: one registered it after the other, which is now
        pushed nothing (it catches up on its own) and takes itself for the shield of the other's pull zone paths.
        Which one is meant is the operator's to say: control warns and goes on as before."""
        node = self.edges.get(name)
        if node is None:
            return False
        if url and url.rstrip("/") != node.url:
            self._shared_name(name, url.rstrip("/"), node.url)
        node.last_seen = time.time()
        node.generation = max(node.generation, generation)
        self._touched()
        return True

    def leave(self, name: str, url: str) -> bool:
        """An edge worker stopping (its last call): forgotten, so that it is neither pushed to nor named as pending
        from now on, as a stopped edge that never said so (killed, cut off) still is. Only the registration of the
        address it names: a worker started since under the same name at another address keeps its own."""
        node = self.edges.get(name)
        if node is None or node.url != url.rstrip("/"):
            return False
        del self.edges[name]
        self._touched()
        return True

    def _shared_name(self, name: str, heard: str, registered: str) -> None:
        now = time.monotonic()
        if now - self._shared_warned.get(name, -SHARED_NAME_WARNING_S) >= SHARED_NAME_WARNING_S:
            self._shared_warned[name] = now
            log.warning("two edges share the name %s: one at %s, the other registered at %s since; only the latter "
                        "is pushed to. Give each edge a name of its own (--name)", name, heard, registered)

    def _shared_address(self, node: RegisteredEdge) -> None:
        """Warn when a live edge of another name is registered at the address `node` registered: the pushes for one
        reach the other, which refuses them (they name their edge), so one of the two is pending in every answer and
        only catches up on its own; its shield requests reach the other. A copied --advertise-host, or an edge
        started again under a new name at its fixed cluster port (the old name lapses after the timeout)."""
        now = time.time()
        others = [e.name for e in self.edges.values()
                  if e.url == node.url and e.name != node.name and now - e.last_seen <= self._timeout_s]
        warned = self._shared_warned.get(node.url, -SHARED_NAME_WARNING_S)
        if others and time.monotonic() - warned >= SHARED_NAME_WARNING_S:
            self._shared_warned[node.url] = time.monotonic()
            log.warning("edge worker %s registered at %s, where %s is registered too: control's pushes for one reach "
                        "the other, which refuses them. Give each edge its own address (--advertise-host, "
                        "edge.cluster_port)", node.name, node.url, ", ".join(sorted(others)))

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
            self._touched()
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


