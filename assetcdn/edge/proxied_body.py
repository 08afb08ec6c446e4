"""A forwarded request's body, received whole before control is asked.

Control sees a forwarded call only once its body is complete, so a client that sends slowly holds
one of this edge's connections, never one of the few to control (assetcdn/edge/proxy.py). Small bodies stay
in memory; larger ones wait in an unlinked temporary file. The body is decoded (gzip, deflate) and
bounded in size and time on the way in (assetcdn/shared/request_body.py).
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import BinaryIO

from aiohttp import web

from assetcdn.shared.request_body import body_chunks


class ProxiedBody:
    def __init__(self, memory_limit: int) -> None:
        self._memory_limit = memory_limit
        self._chunks: list[bytes] = []
        self._file: BinaryIO | None = None
        self.size = 0

    async def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._file is None and self.size <= self._memory_limit:
            self._chunks.append(chunk)
            return
        if self._file is None:
            self._file = await asyncio.to_thread(tempfile.TemporaryFile)
        pending, self._chunks = [*self._chunks, chunk], []
        await asyncio.to_thread(self._file.writelines, pending)

    def payload(self) -> bytes | BinaryIO:
        """What aiohttp sends: the bytes, or the file from its start (read in a thread as it is sent)."""
        if self._file is None:
            return b"".join(self._chunks)
        self._file.flush()
        self._file.seek(0)
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


async def receive_body(request: web.Request, limit: int, memory_limit: int) -> ProxiedBody:
    body = ProxiedBody(memory_limit)
    try:
        async for chunk in body_chunks(request, limit):
            await body.add(chunk)
    except BaseException:
        body.close()
        raise
    return body
