"""Drive Debian's headless Chromium over the DevTools protocol, with aiohttp websockets."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--autoplay-policy=no-user-gesture-required", "--mute-audio",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class DevToolsError(Exception):
    """Chromium did not start, or a DevTools command failed."""


class HeadlessChromium:
    """One Chromium process showing one page; ``evaluate`` runs JavaScript in it."""

    def __init__(self, binary: str, profile_dir: Path, *, extra_flags: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.binary = binary
        self.profile_dir = profile_dir
        self.extra_flags = extra_flags  # e.g. --host-resolver-rules for names that only the test resolves
        self.env = env  # e.g. a HOME of its own, whose NSS database trusts a test CA for this browser only
        self.process: asyncio.subprocess.Process | None = None
        self.session: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.ids = itertools.count(1)
        self.tmp: Path | None = None   # Chromium's TMPDIR (its singleton socket), removed on close

    async def open(self, url: str, start_timeout: float = 30) -> None:
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        # A short path of its own (a socket path has at most 108 bytes): Chromium would otherwise leave
        # a directory in /tmp at every start.
        self.tmp = Path(tempfile.mkdtemp(prefix="chromium-"))
        env = {**(self.env if self.env is not None else os.environ), "TMPDIR": str(self.tmp)}
        log = (self.profile_dir / "chromium.log").open("wb")
        self.process = await asyncio.create_subprocess_exec(
            self.binary, *CHROMIUM_FLAGS, *self.extra_flags, f"--user-data-dir={self.profile_dir}", url,
            stdout=log, stderr=log, env=env)
        log.close()
        port = await asyncio.wait_for(self._devtools_port(), start_timeout)
        self.session = aiohttp.ClientSession()
        page = await asyncio.wait_for(self._page_target(port, url), start_timeout)
        self.socket = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)

    async def _devtools_port(self) -> int:
        """Chromium writes the port it chose into DevToolsActivePort once it listens."""
        active = self.profile_dir / "DevToolsActivePort"
        while True:
            if self.process is not None and self.process.returncode is not None:
                raise DevToolsError(f"chromium exited with {self.process.returncode}: "
                                    + (self.profile_dir / "chromium.log").read_text()[-2000:])
            if active.exists():
                first = active.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    return int(first)
            await asyncio.sleep(0.05)

    async def _page_target(self, port: int, url: str) -> dict[str, Any]:
        assert self.session is not None
        while True:
            async with self.session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            for target in targets:
                if target.get("type") == "page" and target.get("url", "").startswith(url[:40]):
                    return target
            await asyncio.sleep(0.05)

    async def command(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.socket is not None
        message_id = next(self.ids)
        await self.socket.send_json({"id": message_id, "method": method, "params": params})
        async for message in self.socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                raise DevToolsError(f"DevTools socket closed during {method}")
            reply = message.json()
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply["result"]
            self._event(reply)
        raise DevToolsError(f"DevTools socket closed during {method}")

    def _event(self, event: dict[str, Any]) -> None:
        """An event that arrived while a command waited for its reply (subclasses record what they need)."""

    async def evaluate(self, expression: str) -> Any:
        """Evaluate, awaiting a returned promise; returns its JSON value."""
        result = await self.command("Runtime.evaluate", expression=expression,
                                    awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise DevToolsError(f"page raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, within: float = 30) -> None:
        """Poll until ``expression`` is truthy in the page (e.g. until a script has loaded)."""
        async with asyncio.timeout(within):
            while True:
                if await self.evaluate(expression):
                    return
                await asyncio.sleep(0.05)

    async def navigate(self, url: str, within: float = 30) -> None:
        """Top-level navigation to ``url``; returns once its document has loaded."""
        result = await self.command("Page.navigate", url=url)
        if result.get("errorText"):
            raise DevToolsError(f"navigation to {url} failed: {result['errorText']}")
        loaded = f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        async with asyncio.timeout(within):
            while True:
                try:
                    if await self.evaluate(loaded):
                        return
                except DevToolsError:
                    pass  # the old document went away mid-evaluation; ask the new one
                await asyncio.sleep(0.05)

    async def set_cookie(self, url: str, name: str, value: str) -> None:
        """A cookie on ``url``'s origin, as a site's own Set-Cookie would leave it."""
        result = await self.command("Network.setCookie", url=url, name=name, value=value)
        if not result.get("success", True):
            raise DevToolsError(f"Network.setCookie refused {name} for {url}")

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
        if self.session is not None:
            await self.session.close()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
