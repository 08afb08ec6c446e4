"""`assetcdn.shared.process.serve` as a real process: a port it cannot bind ends it at once with a clear message,
repeated stop signals never cut its cleanup short, a cleanup that hangs cannot keep it alive, and a server that
started with garbage collection off (as control and the edge do while they import) collects once it serves."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from assetcdn.shared.process import EXIT_CANNOT_LISTEN, EXIT_DEADLINE_EXCEEDED, port_in_use
from tests.integration.harness import free_port_block

ROOT = Path(__file__).resolve().parents[2]
SERVER = textwrap.dedent("""
    import gc, logging, sys, threading, time
    from pathlib import Path
    from aiohttp import web
    from assetcdn.shared.process import serve

    logging.basicConfig(level=logging.INFO)
    port, mode, marker = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])

    if mode == "collections-off":
        gc.disable()

    async def resources(app):
        if mode == "collections-off":
            marker.write_text(f"{gc.isenabled()} {gc.get_freeze_count()}")
        yield
        if mode == "slow-cleanup":
            time.sleep(1.0)  # a close that takes a while (blocking on purpose: signals arrive meanwhile)
            marker.write_text("closed")
        elif mode == "leaked-thread":
            threading.Thread(target=threading.Event().wait, name="never-ends").start()

    app = web.Application()
    app.cleanup_ctx.append(resources)
    sys.exit(serve(app, host="127.0.0.1", port=port, exit_deadline_s=2.0))
""")


def _start(port: int, mode: str, marker: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SERVER, str(port), mode, str(marker)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while not port_in_use("127.0.0.1", port):
        assert process.poll() is None, process.communicate()[0].decode()
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.05)


def test_a_port_in_use_ends_the_process_at_once_with_the_address(tmp_path: Path) -> None:
    port = free_port_block(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        process = _start(port, "plain", tmp_path / "marker")
        output, _ = process.communicate(timeout=60)
    assert process.returncode == EXIT_CANNOT_LISTEN
    assert f"cannot listen on 127.0.0.1:{port}" in output.decode()


def test_repeated_stop_signals_do_not_cut_the_cleanup_short(tmp_path: Path) -> None:
    port = free_port_block(1)
    marker = tmp_path / "marker"
    process = _start(port, "slow-cleanup", marker)
    _wait_listening(process, port)
    for _ in range(3):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output.decode()
    assert marker.read_text() == "closed"
    assert b"already stopping" in output


def test_a_cleanup_that_leaves_a_thread_running_cannot_keep_the_process_alive(tmp_path: Path) -> None:
    port = free_port_block(1)
    process = _start(port, "leaked-thread", tmp_path / "marker")
    _wait_listening(process, port)
    os.kill(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    text = output.decode()
    assert process.returncode == EXIT_DEADLINE_EXCEEDED, text
    assert "threads still running at exit: never-ends" in text
    assert "exiting now" in text


def test_a_server_started_with_collections_off_collects_once_it_serves_and_skips_what_it_made_before(
        tmp_path: Path) -> None:
    port = free_port_block(1)
    marker = tmp_path / "marker"
    process = _start(port, "collections-off", marker)
    _wait_listening(process, port)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output.decode()
    enabled, frozen = marker.read_text().split()
    assert enabled == "True"  # collections run again: no garbage cycle of a request is kept for good
    assert int(frozen) > 10_000  # the modules and the application, out of every later collection's way
