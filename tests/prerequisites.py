"""Programs from Debian packages that some tests need (`make setup` installs them): found on PATH, or the
test skips on a developer's machine without them and fails under CI (CI=true), where it must run. And what a
test needs of the machine itself that no setup step can install (IPv6 loopback)."""

from __future__ import annotations

import os
import shutil
import socket

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


def ipv6_loopback() -> None:
    """Skip unless this machine can listen on ::1: a kernel or container with IPv6 turned off has none, and no setup
    step can give it one (said as the reason, CI included: the tests of IPv4 loopback still run there)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"this machine has no IPv6 loopback (::1: {exc.strerror or exc})")
