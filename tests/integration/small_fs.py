"""A small filesystem for disk-full tests: a tmpfs of a few MB mounted on a directory (needs root, or a
user namespace that allows mounts; see `mount_small_fs`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_small_fs(directory: Path, size_kb: int) -> None:
    """Mount a `size_kb` tmpfs on `directory`. Skips the test when this machine does not allow it, except
    under CI=true, where a fault test must run or fail."""
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0700", "tmpfs", str(directory)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        reason = f"cannot mount a tmpfs here (root needed): {result.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def unmount(directory: Path) -> None:
    subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)


@contextlib.contextmanager
def small_fs(directory: Path, size_kb: int) -> Iterator[Path]:
    mount_small_fs(directory, size_kb)
    try:
        yield directory
    finally:
        unmount(directory)


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize
