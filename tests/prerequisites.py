"""Programs from Debian packages that some tests need (`make setup` installs them): found on PATH, or the
test skips on a developer's machine without them and fails under CI (CI=true), where it must run."""

from __future__ import annotations

import os
import shutil

import pytest


def installed_program(name: str, installed_by: str) -> str:
    """The path of `name`; `installed_by` names the setup script that installs it (said when it is missing)."""
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is missing (make setup installs it: {installed_by})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}: this test must run in CI")
        pytest.skip(reason)
    return path
