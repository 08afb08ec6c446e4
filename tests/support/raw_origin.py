"""A raw origin for pull zone tests: an asyncio server on 127.0.0.1 that answers each request with a script of bytes
(an origin that breaks HTTP/1.1 at will), a pull zone of its own in front of it, and a client that reads an edge's
answer byte by byte and says whether it was complete."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn, parse_head, request_bytes
from tests.support.wait import WAIT_S, wait_until

ZONES = itertools.count()
KEPT = b"Cache-Control: max-age=600\r\nContent-Type: application/octet-stream\r\n"
# Answers the origin's n-th request (from 1) once its head is read; raises ConnectionError to end the connection.
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Origin:
    """A raw origin: each request answered by a script; the requests and connections it was sent counted."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                await self.script(reader, writer, self.requests)
        writer.close()


@asynccontextmanager
async def zone_before(cdn: HitCdn, script: Script) -> AsyncIterator[tuple[str, Origin]]:
    """A pull zone of its own in front of an origin answering with `script`; its name and the origin."""
    origin = Origin(script)
    server = await asyncio.start_server(origin.handle, "127.0.0.1", 0)
    try:
        zone = f"hostile{next(ZONES)}"
        resp = await cdn.control.post("/api/core/zones", headers=ACCOUNT, json={
            "Name": zone, "Origin": {"Url": f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"}})
        assert resp.status == 201, await resp.text()

        async def arrived() -> bool:
            return zone in cdn.node.config.pull_zones

        await wait_until(arrived, "the pull zone reaching the edge")
        yield zone, origin
    finally:
        server.close()


async def fetch(port: int, path: str) -> tuple[int, dict[str, str], bytes, bool]:
    """GET `path` from the edge on a connection of its own: the status, the fields (lower-case names), the body read
    to its declared length or last chunk, and whether it was complete (else the edge cut the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes(path))
        async with asyncio.timeout(WAIT_S):
            status, _, fields = parse_head(await reader.readuntil(b"\r\n\r\n"))
            headers = {name.lower(): value for name, value in fields.items()}
            body = b""
            try:
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding") == "chunked":
                    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                        body += (await reader.readexactly(size + 2))[:-2]
                    await reader.readexactly(2)
                elif status not in (204, 304):
                    body = await reader.read()
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                return status, headers, body or getattr(exc, "partial", b""), False
        return status, headers, body, True
    finally:
        writer.close()
