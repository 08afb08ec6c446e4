"""`assetcdn control` and `assetcdn edge` hand over to their own entry points (how deploy/compose.yaml runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("command", "usage"), [("control", "usage: assetcdn control"),
                                                ("edge", "usage: assetcdn edge")])
def test_subcommand_runs_its_own_entry_point(command: str, usage: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "assetcdn.cli", command, "--help"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(usage), result.stdout[:300]
