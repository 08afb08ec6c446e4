"""The lock files pin every dependency the project declares, with hashes, at versions pyproject.toml allows:
a dependency added or narrowed without `make lock` fails here instead of installing unpinned (or not at all,
since `make setup` installs the lock with --require-hashes and the project with --no-deps)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BUILD = "requirements-build.lock"
RUNTIME = "requirements.lock"
TEST = "requirements-test.lock"
# The environments the lock serves (Linux, x86-64 and ARM, the Python the project targets).
ENVIRONMENTS = [{"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
                 "platform_system": "Linux", "platform_machine": machine, "implementation_name": "cpython",
                 "platform_python_implementation": "CPython", "os_name": "posix"}
                for machine in ("x86_64", "aarch64")]


def parse_lock(name: str) -> list[tuple[Requirement, list[str]]]:
    """Each pinned requirement of a pip lock file with its --hash values (continuation lines joined)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    entries = []
    for logical in re.sub(r"\\\n", " ", text).splitlines():
        line = logical.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        spec, *options = re.split(r"\s+--", line)
        hashes = [o.split("=", 1)[1] for o in options if o.startswith("hash=")]
        entries.append((Requirement(spec), hashes))
    return entries


def pins(name: str, environment: dict[str, str]) -> dict[str, str]:
    """Package -> pinned version in that environment (universal locks fork by markers)."""
    found: dict[str, str] = {}
    for requirement, _ in parse_lock(name):
        if requirement.marker is None or requirement.marker.evaluate(environment):
            specifier = str(requirement.specifier)
            assert specifier.startswith("=="), f"{name}: {requirement} is not pinned exactly"
            found[canonicalize_name(requirement.name)] = specifier[2:]
    return found


def build_tools() -> list[Requirement]:
    """The project's build backend and the build tools of dependencies published as source only."""
    lines = (ROOT / "requirements-build.in").read_text(encoding="utf-8").splitlines()
    requirements = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    return requirements + [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def declared(*extras: str) -> list[Requirement]:
    if extras == ("build",):
        return build_tools()
    requirements = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]] + build_tools()
    for extra in extras:
        requirements += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    return requirements


@pytest.mark.parametrize(("lock", "extras"), [(BUILD, ("build",)), (RUNTIME, ()), (TEST, ("test",))])
@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=lambda e: e["platform_machine"])
def test_every_declared_dependency_is_pinned_at_an_allowed_version(lock: str, extras: tuple[str, ...],
                                                                    environment: dict[str, str]) -> None:
    pinned = pins(lock, environment)
    wrong = []
    for requirement in declared(*extras):
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement} (locked: {version})")
    assert wrong == [], f"{lock} is out of date with pyproject.toml: run `make lock`"


@pytest.mark.parametrize("lock", [BUILD, RUNTIME, TEST])
def test_every_pin_carries_hashes(lock: str) -> None:
    entries = parse_lock(lock)
    assert entries
    assert [str(r) for r, hashes in entries if not hashes or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", h)
                                                                    for h in hashes)] == []


@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=lambda e: e["platform_machine"])
def test_the_locks_agree_on_every_version(environment: dict[str, str]) -> None:
    """The test environment runs what the service runs, and both were built with the build lock's tools."""
    build, service, test = pins(BUILD, environment), pins(RUNTIME, environment), pins(TEST, environment)
    assert {name: (version, test.get(name)) for name, version in service.items() if test.get(name) != version} == {}
    assert {name: (version, service.get(name)) for name, version in build.items()
            if service.get(name) != version} == {}

