"""The edge side of the cluster protocol: register, heartbeat, catch up, fetch blobs by content id."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from shared.cluster import PREFIX, PROTOCOL_VERSION, sign_request

log = logging.getLogger(__name__)


class ControlUnavailable(Exception):
    """Control could not be reached or answered with a server error."""


class NotFoundAtControl(Exception):
    """Control answered 404: it does not hold the requested content id (or does not know the endpoint)."""


class ControlClient:
    def __init__(self, control_url: str, cluster_secret: str, timeout_s: float, keepalive_s: float = 15.0) -> None:
        self.control_url = control_url.rstrip("/")
        self._secret = cluster_secret
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, 2.0))
        self._keepalive_s = keepalive_s  # shorter than control's idle limit (shared/http_server.py)
        self.session: aiohttp.ClientSession | None = None
        self.last_success = 0.0

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False,
                                             connector=aiohttp.TCPConnector(keepalive_timeout=self._keepalive_s))

    async def close(self) -> None:
        if self.session:
            await self.session.close()

    def reachable(self, within_s: float) -> bool:
        return time.monotonic() - self.last_success <= within_s

    async def _request(self, method: str, path_qs: str, message: dict[str, Any] | None = None) -> bytes:
        assert self.session is not None
        body = orjson.dumps({"v": PROTOCOL_VERSION, **message}) if message is not None else b""
        headers = sign_request(self._secret, method, PREFIX + path_qs, body)
        if message is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self.session.request(method, self.control_url + PREFIX + path_qs, data=body or None,
                                            headers=headers) as resp:
                data = await resp.read()
                if resp.status == 404:
                    raise NotFoundAtControl(path_qs)
                if resp.status != 200:
                    raise ControlUnavailable(f"control answered {resp.status} to {path_qs}")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ControlUnavailable(f"{type(exc).__name__}: {exc}") from exc
        self.last_success = time.monotonic()
        return data

    async def register(self, name: str, url: str, generation: int) -> dict[str, Any]:
        return orjson.loads(await self._request("POST", "/register",
                                                {"name": name, "url": url, "generation": generation}))

    async def heartbeat(self, name: str, generation: int) -> dict[str, Any]:
        return orjson.loads(await self._request("POST", "/heartbeat", {"name": name, "generation": generation}))

    async def changes_since(self, generation: int) -> dict[str, Any]:
        return orjson.loads(await self._request("GET", f"/changes?since={generation}"))

    async def config(self) -> dict[str, Any]:
        return orjson.loads(await self._request("GET", "/config"))

    async def fetch_blob(self, blob_id: str) -> bytes:
        return await self._request("GET", f"/blobs/{blob_id}")

    async def send(self, path: str, message: dict[str, Any]) -> dict[str, Any]:
        return orjson.loads(await self._request("POST", path, message))


async def run_sync_loop(client: ControlClient, *, name: str, url: str, get_generation: Callable[[], int],
                        catch_up: Callable[[], Any], interval_s: float, heartbeat_s: float) -> None:
    """Register, then heartbeat and catch up on a short timer until cancelled; survive control restarts."""
    registered = False
    last_heartbeat = 0.0
    while True:
        try:
            if not registered:
                await client.register(name, url, get_generation())
                registered = True
            await catch_up()
            if time.monotonic() - last_heartbeat >= heartbeat_s:
                reply = await client.heartbeat(name, get_generation())
                last_heartbeat = time.monotonic()
                if not reply.get("known"):
                    registered = False  # control restarted and forgot us
                    continue
        except ControlUnavailable as exc:
            log.debug("control unreachable: %s", exc)
            registered = False
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sync with control failed")
        await asyncio.sleep(interval_s)
