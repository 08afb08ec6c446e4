"""`assetcdn control` and `assetcdn edge` hand over to their own entry points (how deploy/compose.yaml runs them);
every command stops on a setting it cannot read with a line naming it (docs/operations.md, "Keys and
configuration"), not a Python traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import KEYS, free_port_block

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("command", "usage"), [("control", "usage: assetcdn control"),
                                                ("edge", "usage: assetcdn edge")])
def test_subcommand_runs_its_own_entry_point(command: str, usage: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", command, "--help"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(usage), result.stdout[:300]


def commands(tmp_path: Path) -> dict[str, list[str]]:
    port = free_port_block(3)
    return {"up": ["up", "--check-ports", "--edge-port", str(port), "--control-port", str(port + 1),
                   "--dashboard-port", str(port + 2)],
            "control": ["control", "--port", str(port + 1), "--dashboard-port", str(port + 2),
                        "--data-dir", str(tmp_path / "data")],
            "edge": ["edge", "--control-url", f"http://127.0.0.1:{port + 1}", "--port", str(port),
                     "--data-dir", str(tmp_path / "data")],
            "sign": ["sign", "/zone/v1/logos/logo.png", "--data-dir", str(tmp_path / "data")]}


@pytest.mark.parametrize(("command", "setting", "named"), [
    ("up", {"ASSETCDN_SERVER_EDGE_PORT": "88x"},
     "ASSETCDN_SERVER_EDGE_PORT ([server] edge_port) must be a number like 8788, not '88x'"),
    ("up", {"ASSETCDN_TLS_REDIRECT_HTTP": "y"}, "ASSETCDN_TLS_REDIRECT_HTTP ([tls] redirect_http) must be true or"),
    ("up", {"ASSETCDN_CONFIG": "{tmp}/missing.toml"}, "{tmp}/missing.toml"),
    ("up", {"ASSETCDN_CONFIG": "{tmp}/broken.toml"}, "{tmp}/broken.toml"),
    # A setting written above every [section], and a port that is no number: TOML, but no setting of that form.
    ("up", {"ASSETCDN_CONFIG": "{tmp}/sectionless.toml"}, "edge_port"),
    ("up", {"ASSETCDN_CONFIG": "{tmp}/wordy.toml"}, "[server] edge_port must be a number like 8788, not 'soon'"),
    ("control", {"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "maybe"},
     "ASSETCDN_ORIGIN_ALLOW_LOOPBACK ([origin] allow_loopback) must be true or false"),
    # Read as the app was made: a Python traceback, exit status 1.
    ("control", {"ASSETCDN_CONTROL_TRUSTED_PROXIES": "127.0.0.1,proxy.local"},
     "control.trusted_proxies: 'proxy.local' is not an IP address or network"),
    ("edge", {"ASSETCDN_ORIGIN_POOL_PER_ORIGIN": "abc"},
     "ASSETCDN_ORIGIN_POOL_PER_ORIGIN ([origin] pool_per_origin) must be a number like 32, not 'abc'"),
    ("sign", {"ASSETCDN_CONFIG": "{tmp}/broken.toml"}, "{tmp}/broken.toml"),
])
def test_a_setting_that_cannot_be_read_is_named_not_a_traceback(tmp_path: Path, command: str, setting: dict[str, str],
                                                                named: str) -> None:
    (tmp_path / "broken.toml").write_text("[server\nedge_port = 1\n")
    (tmp_path / "sectionless.toml").write_text("edge_port = 9788\n")
    (tmp_path / "wordy.toml").write_text('[server]\nedge_port = "soon"\n')
    env = {**KEYS, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           **{name: value.format(tmp=tmp_path) for name, value in setting.items()}}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", *commands(tmp_path)[command]], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert named.format(tmp=tmp_path) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_a_number_quoted_in_a_config_file_is_read_as_the_number(tmp_path: Path) -> None:
    """As an environment variable's is: `edge_port = "9788"` stopped `assetcdn up` with a traceback."""
    port = free_port_block(3)
    config = tmp_path / "quoted.toml"
    config.write_text(f'[server]\nedge_port = "{port}"\ncontrol_port = {port + 1}\ndashboard_port = "{port + 2}"\n')
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", "up", "--check-ports", "--config", str(config)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize(("flag", "value"), [("--edges", "0"), ("--edges", "-1"), ("--workers", "0")])
def test_up_refuses_no_edge_or_no_worker(tmp_path: Path, flag: str, value: str) -> None:
    """`assetcdn up --edges 0` started control, then stopped everything with an IndexError traceback (exit status
    1) where it printed the base URL of its first edge; `--workers 0` ran one worker."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", *commands(tmp_path)["up"], flag, value],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert f"argument {flag}: must be 1 or more, not {value}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_up_names_a_data_directory_it_cannot_use(tmp_path: Path) -> None:
    """`assetcdn up --data-dir /var/lib/assetcdn` run by a user who may not write there (the wheel install's example)
    stopped with a PermissionError traceback; here the directory would be under a file."""
    (tmp_path / "a-file").write_text("not a directory")
    data_dir = tmp_path / "a-file" / "data"
    port = free_port_block(3)
    env = {**KEYS, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", "up", "--data-dir", str(data_dir), "--edge-port",
                             str(port), "--control-port", str(port + 1), "--dashboard-port", str(port + 2)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert f"assetcdn up: the data directory {data_dir} cannot be used (" in result.stderr, result.stderr
    assert "--data-dir or ASSETCDN_SERVER_DATA_DIR" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_control_names_a_data_directory_it_cannot_use(tmp_path: Path) -> None:
    """`assetcdn control` alone (a host of its own) stopped with a traceback on a data directory it cannot make."""
    (tmp_path / "a-file").write_text("not a directory")
    data_dir = tmp_path / "a-file" / "data"
    port = free_port_block(2)
    env = {**KEYS, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", "control", "--data-dir", str(data_dir),
                             "--port", str(port), "--dashboard-port", str(port + 1)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert f"the data directory {data_dir} cannot be used (" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
