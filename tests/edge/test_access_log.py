"""The access log on its own: one JSON line per delivery, files rotated by size as lines are written (never
past it, however many lines a flush brings), stdout in whole lines,
and the configuration refused when it names no output this edge has."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from assetcdn.edge.access_log import AccessLog, access_log_from_settings

NOW = 1_790_000_000.25


def files(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in directory.iterdir()}


def deliver(log: AccessLog, index: int) -> None:
    log.write(NOW, "cdn.example.com", "GET", f"z/v1/{index}.txt", 200, 1000 + index, "HIT", 0.0012345, "::1", "DE",
              b"req-" + str(index).encode())


async def test_each_delivery_is_one_line_of_the_common_fields(tmp_path: Path) -> None:
    log = AccessLog("file", "edge-0/1", directory=tmp_path)
    deliver(log, 1)
    log.write(NOW, "h", "HEAD", 'z/v1/"quoted"\\.txt', 404, 0, "MISS", 0.0, None, "XX", None)
    log.write(NOW, "h", "GET", "z/v1/big.bin", 200, 65536, "HIT", 0.5, "127.0.0.1", "XX", None, True)
    await log.flush()
    log.close()
    lines = [orjson.loads(line) for line in (tmp_path / "access-edge-0-1.log").read_bytes().splitlines()]
    assert lines == [
        {"time": "2026-09-21T14:13:20.250Z", "edge": "edge-0/1", "host": "cdn.example.com", "method": "GET",
         "path": "/z/v1/1.txt", "status": 200, "bytes": 1001, "cache": "HIT", "duration_ms": 1.234,
         "client_ip": "::1", "country": "DE", "request_id": "req-1", "aborted": False},
        {"time": "2026-09-21T14:13:20.250Z", "edge": "edge-0/1", "host": "h", "method": "HEAD",
         "path": '/z/v1/"quoted"\\.txt', "status": 404, "bytes": 0, "cache": "MISS", "duration_ms": 0.0,
         "client_ip": None, "country": "XX", "request_id": None, "aborted": False},
        {"time": "2026-09-21T14:13:20.250Z", "edge": "edge-0/1", "host": "h", "method": "GET",
         "path": "/z/v1/big.bin", "status": 200, "bytes": 65536, "cache": "HIT", "duration_ms": 500.0,
         "client_ip": "127.0.0.1", "country": "XX", "request_id": None, "aborted": True}]


async def test_a_file_is_rotated_past_its_size_and_only_the_backups_kept(tmp_path: Path) -> None:
    log = AccessLog("file", "edge-0/0", directory=tmp_path, max_bytes=4096, backups=2)
    for round_ in range(6):
        for index in range(10):
            deliver(log, round_ * 10 + index)
        await log.flush()
    log.close()
    sizes = files(tmp_path)
    assert sorted(sizes) == ["access-edge-0-0.log", "access-edge-0-0.log.1", "access-edge-0-0.log.2"]
    assert all(size <= 4096 for size in sizes.values())
    newest = [orjson.loads(line)["request_id"] for line in (tmp_path / "access-edge-0-0.log").read_bytes().splitlines()]
    assert newest[-1] == "req-59"


async def test_a_second_of_traffic_is_rotated_line_by_line_never_past_the_size(tmp_path: Path) -> None:
    log = AccessLog("file", "edge-0/0", directory=tmp_path, max_bytes=4096, backups=3)
    for index in range(60):  # about 15 KB, written in one flush
        deliver(log, index)
    await log.flush()
    log.close()
    sizes = files(tmp_path)
    assert sorted(sizes) == ["access-edge-0-0.log", "access-edge-0-0.log.1", "access-edge-0-0.log.2",
                             "access-edge-0-0.log.3"]
    assert all(size <= 4096 for size in sizes.values())
    newest = [orjson.loads(line)["request_id"] for line in (tmp_path / "access-edge-0-0.log").read_bytes().splitlines()]
    assert newest[-1] == "req-59"


async def test_stdout_gets_whole_lines(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = AccessLog("stdout", "edge-0/0")
    for index in range(200):  # more than one pipe-sized write
        deliver(log, index)
    await log.flush()
    log.close()
    lines = capfd.readouterr().out.splitlines()
    assert [orjson.loads(line)["request_id"] for line in lines] == [f"req-{i}" for i in range(200)]


async def test_a_long_host_or_path_is_cut_so_each_line_stays_one_atomic_pipe_write(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A client's path and Host may be as long as the request parser takes (8 KB each): a line past a pipe's atomic
    write (4096 bytes) would be written to a stdout the workers share in several writes, which another worker's
    lines can split. Such a host is cut to a DNS name's length and the path until the line fits; others are whole."""
    log = AccessLog("stdout", "edge-0/0")
    long_host = "h" * 8000
    log.write(NOW, long_host, "GET", "z/" + "a" * 8000, 200, 5, "MISS", 0.001, "127.0.0.1", "XX", None)
    log.write(NOW, "h", "GET", "z/" + "\x1b\r\n" * 2000, 404, 0, "BYPASS", 0.0, "127.0.0.1", "XX", None)
    log.write(NOW, "h", "GET", "z/v1/7.txt", 200, 7, "HIT", 0.0, "127.0.0.1", "XX", None)
    await log.flush()
    log.close()
    out = capfd.readouterr().out.encode()
    lines = out.splitlines(keepends=True)
    assert len(lines) == 3 and all(len(line) <= 4096 for line in lines), [len(line) for line in lines]
    first, second, third = (orjson.loads(line) for line in lines)
    assert first["host"] == "h" * 253 and first["path"].startswith("/z/aaa") and set(first["path"][3:]) == {"a"}
    assert second["path"].startswith("/z/\x1b\r\n") and len(second["path"]) > 100
    assert (third["path"], third["host"]) == ("/z/v1/7.txt", "h")


def test_the_configuration_names_an_output(tmp_path: Path) -> None:
    assert access_log_from_settings({"output": "off"}, "edge-0/0", tmp_path) is None
    made = access_log_from_settings({"output": "file", "directory": str(tmp_path / "logs")}, "edge-0/0", tmp_path)
    assert made is not None and made.path == tmp_path / "logs" / "access-edge-0-0.log"
    made.close()
    with pytest.raises(ValueError, match="output"):
        access_log_from_settings({"output": "syslog"}, "edge-0/0", tmp_path)
    assert os.listdir(tmp_path) == ["logs"]
