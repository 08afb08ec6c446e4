"""Tools for fault tests and benchmarks: a TCP proxy that can cut a link (a partition on loopback), an
edge process started on its own (so its link to control can run through that proxy), and bounded polling."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from tests.integration.harness import METRICS, RunningCdn, free_port_block, up_env

T = TypeVar("T")
CHUNK = 64 * 1024


class BlockingProxy:
    """A TCP proxy from a free 127.0.0.1 port to `target_port`, run on its own thread. `cut()` stops
    everything in both directions without closing anything (connections stay open and bytes wait, as
    when a network drops packets); `heal()` lets them flow again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="blocking-proxy", daemon=True)

    def start(self) -> int:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self.port

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            await self._open.wait()
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pump(client_reader, upstream_writer), self._pump(upstream_reader, client_writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._open.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self._open.wait()  # cut while reading: the bytes wait here
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        async def stop() -> None:
            self._open.set()
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


@dataclass
class EdgeProcess:
    process: subprocess.Popen[bytes]
    url: str
    name: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_edge(data_dir: Path, log_dir: Path, *, name: str, control_url: str,
               env_extra: dict[str, str] | None = None) -> EdgeProcess:
    """One edge node (one worker) outside `assetcdn up`, e.g. with its control URL pointing at a proxy."""
    port = free_port_block(1)
    log_path = log_dir / f"{name}.log"
    command = [sys.executable, "-m", "assetcdn.edge", "--control-url", control_url, "--name", name, "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", "--data-dir", str(data_dir)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=up_env(env_extra), stdout=log, stderr=subprocess.STDOUT,
                                   process_group=0)
    return EdgeProcess(process, f"http://127.0.0.1:{port}", name, log_path)


async def poll(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float, what: str,
               interval_s: float = 0.05) -> T:
    """Call `probe` until it returns something other than None (bounded); its result."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            result = await probe()
        except (aiohttp.ClientError, TimeoutError) as exc:
            result, last = None, exc
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")
        await asyncio.sleep(interval_s)


async def health(session: aiohttp.ClientSession, url: str, *, deep: bool = False) -> tuple[int, dict[str, Any]]:
    async with session.get(f"{url}/api/health" + ("?deep=1" if deep else ""),
                           headers=METRICS if deep else None) as resp:
        return resp.status, await resp.json()


def control_check(body: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in body["checks"] if c["name"] == "control")


async def wait_healthy(session: aiohttp.ClientSession, url: str, timeout_s: float = 60) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        status, body = await health(session, url)
        return body if status == 200 else None

    return await poll(probe, timeout_s=timeout_s, what=f"{url} healthy", interval_s=0.2)


async def wait_control_restarted(session: aiohttp.ClientSession, cdn: RunningCdn, old_pids: list[int], *,
                                 timeout_s: float = 60) -> None:
    """Until `assetcdn up` has started control again (a process other than `old_pids`) and it answers its health
    (bounded); past `timeout_s`, fails with the end of up's log, where control's lines are."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = cdn.pids("-m assetcdn.control")
        if pids and not set(pids) & set(old_pids):
            try:
                async with session.get(f"{cdn.control_url}/api/health",
                                       timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
        if time.monotonic() > deadline:
            log = cdn.log_path.read_bytes()[-3000:].decode(errors="replace")
            raise AssertionError(f"control did not come back within {timeout_s:g} s (its processes now: {pids}, "
                                 f"before: {old_pids}); the end of the log:\n{log}")
        await asyncio.sleep(0.2)
