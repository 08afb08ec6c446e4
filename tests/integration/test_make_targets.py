"""`make clean` removes build output and never the data directory (repository, database, secrets);
`make wipe-data` deletes the data only when told so explicitly. Run on a copy of the Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSETCDN_", "MAKE"))}
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
