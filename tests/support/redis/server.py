"""A throw-away redis-server for tests: on a free loopback port, nothing saved to disk, stopped after.

Without the binary the test skips and says why, except under CI=true, where `make setup` must have
installed it (tests/support/redis/setup.sh) and a missing one fails the test.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.harness import free_port_block
from tests.prerequisites import installed_program

START_TIMEOUT_S = 20.0


def redis_server_binary() -> str:
    return installed_program("redis-server", "tests/support/redis/setup.sh")


def free_port() -> int:
    """Below the ephemeral range, which outgoing connections draw from (tests.integration.harness)."""
    return free_port_block(1)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart) the server on its port; returns once it answers PING."""
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 (the server writes it while it runs)
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{output}")
            time.sleep(0.05)

    def flush(self) -> None:
        """Empty every database: a test sharing the server starts from no counts."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            assert sock.recv(16).startswith(b"+OK")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def start_redis(directory: Path, attempts: int = 5) -> RedisServer:
    """A running server on a free port (another port is tried when one was taken in between)."""
    redis_server_binary()
    directory.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _ in range(attempts):
        server = RedisServer(free_port(), directory)
        try:
            server.start()
        except RuntimeError as exc:
            last = exc
            continue
        return server
    raise AssertionError(f"redis-server could not start: {last}")
