"""Virtualenvs of their own for what a benchmark runs beside ours (thumbor, the SSIMULACRA2 scorer):
their dependencies (Pillow, numpy) are not ours, and nothing of theirs goes into the project's locks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def ensure_venv(path: Path, package: str, version: str, module: str) -> Path:
    """`path`'s bin directory, with `package`==`version` installed from PyPI on the interpreter ours runs on.
    Made once, then reused while both hold; one made with another Python is made again (an anchor must not
    run on a slower or faster interpreter than we do)."""
    python = path / "bin" / "python"
    check = [str(python), "-c", f"import {module}, sys; sys.exit({module}.__version__ != {version!r} or "
             f"(sys.base_prefix, sys.version) != {(sys.base_prefix, sys.version)!r})"]
    if python.exists() and subprocess.run(check, capture_output=True, check=False).returncode == 0:
        return path / "bin"
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{package}=={version}"], check=True)
    return path / "bin"
