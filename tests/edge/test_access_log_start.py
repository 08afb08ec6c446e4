"""An access log the edge cannot write (`[access_log] directory` that cannot be made) stops the edge as it starts,
naming the setting: before, each worker stopped with a Python traceback (FileNotFoundError, NotADirectoryError)
and `assetcdn up` said only `edge-0 exited early with status 1`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assetcdn.edge.server import EXIT_BAD_CONFIG
from tests.integration.harness import KEYS, free_port_block


def test_an_edge_does_not_start_with_an_access_log_directory_it_cannot_make(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    directory = tmp_path / "a-file" / "access-logs"
    port = free_port_block(1)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_ACCESS_LOG_OUTPUT": "file",
           "ASSETCDN_ACCESS_LOG_DIRECTORY": str(directory)}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(port), "--workers", "2", "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert f"[access_log] directory {str(directory)!r} cannot be made" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
