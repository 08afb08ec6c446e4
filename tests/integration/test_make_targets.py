"""`make clean` removes build output and never the data directory (repository, database, secrets);
`make wipe-data` deletes the data only when told so explicitly; `make run` names a taken port, and what moves
it, or a setting it cannot read, before its setup. Run on a copy of the Makefile."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import free_port_block

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
DATA_FILES = ("repo.git/HEAD", "control.sqlite3", "secrets.env", "edge-0/cache/x/__pycache__/kept.pyc")
BUILD_OUTPUT = (".venv/bin/python", ".pytest_cache/v/cache/nodeids", "shared/__pycache__/cli.cpython-311.pyc")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    for name in (*(f"var/{f}" for f in DATA_FILES), *BUILD_OUTPUT):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    return tmp_path


def make(project: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSETCDN_", "MAKE"))} | (env_extra or {})
    return subprocess.run(["make", "-C", str(project), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_clean_removes_build_output_and_keeps_the_data(project: Path) -> None:
    result = make(project, "clean")
    assert result.returncode == 0, result.stderr
    assert [f for f in DATA_FILES if not (project / "var" / f).exists()] == []
    assert [f for f in BUILD_OUTPUT if (project / f).exists()] == []


def test_wipe_data_needs_an_explicit_confirmation(project: Path) -> None:
    refused = make(project, "wipe-data")
    assert refused.returncode != 0
    assert "CONFIRM=yes" in refused.stderr
    assert [f for f in DATA_FILES if not (project / "var" / f).exists()] == []

    done = make(project, "wipe-data", "CONFIRM=yes")
    assert done.returncode == 0, done.stderr
    assert not (project / "var").exists()
    assert (project / ".venv/bin/python").exists()  # wiping data leaves the build alone


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    """The Makefile beside the sources and nothing built: what `make run` finds in a fresh clone (without
    pyproject.toml and the lock files, so a setup that starts stops at once)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    (tmp_path / "assetcdn").symlink_to(MAKEFILE.parent / "assetcdn")
    return tmp_path


def test_run_names_a_taken_port_and_what_moves_it_before_setup(fresh_clone: Path) -> None:
    base = free_port_block(3)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 2))
        squatter.listen()
        # The dashboard's port from the environment, the others as flags, an interpreter with no site-packages:
        # the check reads settings as `assetcdn up` does and needs none of the dependencies.
        result = make(fresh_clone, "run", f"PYTHON={sys.executable} -S",
                      f"ARGS=--edge-port {base} --control-port {base + 1}",
                      env_extra={"ASSETCDN_SERVER_DASHBOARD_PORT": str(base + 2)})
    assert result.returncode != 0
    assert (f"dashboard port {base + 2} on 127.0.0.1 is already in use; choose another with --dashboard-port "
            "or ASSETCDN_SERVER_DASHBOARD_PORT ([server] dashboard_port)") in result.stderr
    assert "make run ARGS='--edge-port N --control-port N --dashboard-port N'" in result.stderr
    assert "control port" not in result.stderr and "edge-0 port" not in result.stderr
    assert not (fresh_clone / ".venv").exists()  # refused before setup began


def test_run_names_a_setting_it_cannot_read_without_blaming_the_ports(fresh_clone: Path) -> None:
    """A port variable that is no number stopped the check with a Python traceback, and `make run` then told the
    operator to choose other ports."""
    base = free_port_block(3)
    result = make(fresh_clone, "run", f"PYTHON={sys.executable} -S",
                  f"ARGS=--control-port {base + 1} --dashboard-port {base + 2}",
                  env_extra={"ASSETCDN_SERVER_EDGE_PORT": f"{base}x"})
    assert result.returncode != 0
    assert (f"assetcdn up: ASSETCDN_SERVER_EDGE_PORT ([server] edge_port) must be a number like 8788, not "
            f"'{base}x'") in result.stderr
    assert "Traceback" not in result.stderr and "choose other ports" not in result.stderr, result.stderr
    assert not (fresh_clone / ".venv").exists()  # refused before setup began


def test_run_goes_on_to_setup_when_its_ports_are_free(fresh_clone: Path) -> None:
    base = free_port_block(3)
    result = make(fresh_clone, "run", f"PYTHON={sys.executable} -S",
                  f"ARGS=--edge-port {base} --control-port {base + 1} --dashboard-port {base + 2}")
    assert result.returncode != 0
    assert "already in use" not in result.stderr
    assert "needed by '.venv/.installed'" in result.stderr  # setup began (and stopped: nothing to install here)
