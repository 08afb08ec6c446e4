"""An operator certificate or key the edge cannot use stops `assetcdn edge` at start with a message naming
the file (before any worker starts), rather than serving without it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assetcdn.edge.server import EXIT_BAD_CONFIG
from tests.edge.tls.certs import TestCa
from tests.integration.harness import KEYS, free_port_block, up_command, up_env


def start_edge(tmp_path: Path, certificates: list[list[str]]) -> subprocess.CompletedProcess[str]:
    port = free_port_block(2)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_TLS_CERTIFICATES": json.dumps(certificates)}
    return subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(port), "--https-port", str(port + 1), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("broken", ["missing", "directory", "other key", "garbage"])
def test_an_unusable_key_file_is_named_at_start(tmp_path: Path, broken: str) -> None:
    ca = TestCa()
    chain, key = ca.issue("cdn.example.test").write(tmp_path, "cdn")
    if broken == "missing":
        key = tmp_path / "no-such.key"
    elif broken == "directory":
        key = tmp_path / "a-directory"
        key.mkdir()
    elif broken == "other key":
        _, key = ca.issue("other.example.test").write(tmp_path, "other")
    else:
        key.write_text("not a key")
    done = start_edge(tmp_path, [[str(chain), str(key)]])
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert str(key) in done.stderr
    assert "PRIVATE KEY" not in done.stderr  # the key's content is never printed


def test_a_malformed_certificates_setting_is_refused(tmp_path: Path) -> None:
    done = start_edge(tmp_path, [["only-one-file.pem"]])
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert "[tls] certificates" in done.stderr


def test_up_refuses_an_https_port_in_use_and_names_it(tmp_path: Path) -> None:
    base = free_port_block(5)  # edges on base and base + 1, control on base + 2, https on base + 3 and base + 4
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 4))
        holder.listen()
        command = [*up_command(tmp_path / "data", edge_port=base, control_port=base + 2, edges=2),
                   "--https-port", str(base + 3)]
        done = subprocess.run(command, env=up_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"edge-1 https port {base + 4} on 127.0.0.1 is already in use" in done.stdout + done.stderr
