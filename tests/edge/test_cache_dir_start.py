"""An edge whose cache directory cannot be made (`--cache-dir`, `[edge] cache_dir`, or `<data_dir>/<name>`) says so
on one line as it starts: before, it stopped with a Python traceback (FileNotFoundError, PermissionError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assetcdn.edge.server import EXIT_BAD_CONFIG
from tests.integration.harness import KEYS, free_port_block


def test_an_edge_names_a_cache_directory_it_cannot_make(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    cache_dir = tmp_path / "a-file" / "cache"
    port = free_port_block(1)
    env = {**KEYS, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(port), "--cache-dir", str(cache_dir), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert f"the cache directory {cache_dir} cannot be made" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
