"""The full access log: every delivery an edge worker answers as one JSON line, for the log shippers
operators already run (Vector, Fluent Bit, Promtail/Alloy) to take to their log store.

Off by default (``[access_log] output``). ``stdout``: lines go to the process's standard output;
``file``: to ``access-<edge>-<worker>.log`` in ``directory`` (one file per worker, so no two
processes rotate the same file), renamed to ``.1`` (``.2``, ...) before a line would take it past
``max_bytes``, ``backups`` kept. One line: ``{"time", "edge", "host", "method", "path", "status",
"bytes", "cache", "duration_ms", "client_ip", "country", "request_id", "aborted"}``; the path has no
query string (it may carry signatures), and a line is at most ``MAX_LINE`` bytes (a longer host or path
is cut); ``bytes`` are the body bytes sent, ``aborted`` is true when
the client went away (or reset its stream) before the whole body was. A delivery is kept as a tuple; a thread makes the lines and writes them once a second
(``flush``), so a slow disk or a full pipe never stalls the event loop; past ``MAX_BUFFERED``
deliveries waiting, they are dropped and the count is logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from assetcdn.edge.access_log_setting import OUTPUTS, access_log_directory, access_log_output
from assetcdn.shared.middleware import as_sent

log = logging.getLogger(__name__)
MAX_BUFFERED = 500_000   # deliveries waiting for the writer; past it they are dropped (and counted)
# time, host, method, path, status, bytes, cache, duration, client address, country, request id, aborted
Delivery = tuple[float, str, str, str, int, int, str, float, "str | None", str, "str | bytes | None", bool]
PIPE_CHUNK = 4096       # a write to a pipe this small is atomic: workers sharing stdout never interleave lines
MAX_LINE = PIPE_CHUNK   # so no line is longer: a longer host or path is cut (`_shortened`)
MAX_HOST = 253          # a DNS name's length: what is kept of a longer host when a line is too long


class AccessLog:
    def __init__(self, output: str, edge: str, *, directory: Path | None = None, max_bytes: int = 100 * 1024 * 1024,
                 backups: int = 5) -> None:
        if output not in ("stdout", "file"):
            raise ValueError(f"access log output must be one of {', '.join(OUTPUTS)}")
        self.output = output
        self.edge = edge
        self.path: Path | None = None
        if output == "file":
            if directory is None:
                raise ValueError("a file access log needs a directory")
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / f"access-{edge.replace('/', '-')}.log"
        self.max_bytes = max(int(max_bytes), 1024)
        self.backups = max(int(backups), 0)
        self._lines: list[Delivery] = []
        self.dropped = 0
        self._second = -1
        self._stamp = ""
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="access-log")
        self._fd = -1
        self._size = 0

    def write(self, now: float, host: str, method: str, path: str, status: int, sent: int, cache: str,
              duration_s: float, ip: str | None, country: str, request_id: str | bytes | None,
              aborted: bool = False) -> None:
        # A tuple per hit; the writer thread makes the JSON lines, a batch at a time.
        if len(self._lines) >= MAX_BUFFERED:
            self.dropped += 1
            return
        self._lines.append((now, host, method, path, status, sent, cache, duration_s, ip, country, request_id,
                            aborted))

    async def flush(self) -> None:
        """Hand the buffered lines to the writer thread and wait for them to be written."""
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        dropped, self.dropped = self.dropped, 0
        if dropped:
            log.warning("access log: %d lines dropped (the writer could not keep up)", dropped)
        await asyncio.get_running_loop().run_in_executor(self._writer, self._write, lines)

    def close(self) -> None:
        lines, self._lines = self._lines, []
        self._writer.submit(self._write, lines).result()
        self._writer.shutdown(wait=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- the writer thread ------------------------------------------------------------------------

    def _format(self, deliveries: list[Delivery]) -> list[bytes]:
        lines = []
        dumps, edge = orjson.dumps, self.edge
        for now, host, method, path, status, sent, cache, duration_s, ip, country, request_id, aborted in deliveries:
            second = int(now)
            if second != self._second:  # the date part is formatted once a second
                self._second = second
                self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            if isinstance(request_id, bytes):
                request_id = request_id.decode("ascii", "replace")
            record = {
                "time": f"{self._stamp}.{int((now - second) * 1000):03d}Z", "edge": edge, "host": host,
                "method": method, "path": "/" + path, "status": status, "bytes": sent, "cache": cache,
                "duration_ms": int(duration_s * 1e6) / 1000, "client_ip": ip, "country": country,
                "request_id": request_id, "aborted": aborted}
            try:
                line = dumps(record, option=orjson.OPT_APPEND_NEWLINE)
            except TypeError:  # a client's bytes that are not UTF-8 (a Host), read with surrogate escapes
                record = {name: as_sent(value) for name, value in record.items()}
                line = dumps(record, option=orjson.OPT_APPEND_NEWLINE)
            lines.append(line if len(line) <= MAX_LINE else _shortened(record))
        return lines

    def _write(self, deliveries: list[Delivery]) -> None:
        try:
            lines = self._format(deliveries)
            if self.path is None:
                self._to_stdout(lines)
            else:
                self._to_file(lines)
        except OSError as exc:
            log.warning("access log: %d lines not written: %s", len(lines), exc)
        except Exception:  # never raised to the worker's shipping task, which stopped every later count with it
            log.exception("access log: %d deliveries not written", len(deliveries))

    @staticmethod
    def _to_stdout(lines: list[bytes]) -> None:
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            if chunk and size + len(line) > PIPE_CHUNK:
                _write_all(1, b"".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        if chunk:
            _write_all(1, b"".join(chunk))

    def _to_file(self, lines: list[bytes]) -> None:
        """The lines in as few writes as the size allows: the file is rotated before the line that would
        take it past ``max_bytes`` (a line longer than that gets a file of its own)."""
        assert self.path is not None
        if self._fd < 0:
            self._open()
        chunk: list[bytes] = []
        size = self._size
        for line in lines:
            if size + len(line) > self.max_bytes and size > 0:
                if chunk:
                    _write_all(self._fd, b"".join(chunk))
                    chunk = []
                self._rotate()
                size = self._size
            chunk.append(line)
            size += len(line)
        if chunk:
            _write_all(self._fd, b"".join(chunk))
        self._size = size

    def _open(self) -> None:
        assert self.path is not None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._size = os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        assert self.path is not None
        os.close(self._fd)
        self._fd = -1
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._open()


def _shortened(record: dict[str, Any]) -> bytes:
    """The line of a delivery whose host or path (a client's, up to the request parser's limits) would take it past
    MAX_LINE: the host cut to a DNS name's length, then the path cut until the line fits. A longer line would be
    written to a shared stdout in more than one write, which other workers' lines may split."""
    record["host"] = str(record["host"])[:MAX_HOST]
    path = str(record["path"])
    while True:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        if len(line) <= MAX_LINE or not path:
            return line
        path = path[:min(len(path) - 1, len(path) - (len(line) - MAX_LINE) // 6 - 1)]
        record["path"] = path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def access_log_from_settings(section: dict[str, Any], edge: str, default_directory: Path) -> AccessLog | None:
    """The ``[access_log]`` configuration: None when it is off."""
    output = access_log_output(section)
    if output == "off":
        return None
    return AccessLog(output, edge, directory=access_log_directory(section, default_directory),
                     max_bytes=int(section.get("max_bytes", 100 * 1024 * 1024)),
                     backups=int(section.get("backups", 5)))
