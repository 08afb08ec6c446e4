"""The project as a wheel, not a checkout: built from a copy of the sources, installed into a fresh virtualenv
outside the repository (its dependencies seen through the project's own site-packages, so nothing is
downloaded), it finds its default configuration and every runtime file (dashboard, sign-in page, vendored
hls.js, OpenAPI document, the README and docs pages the chat retrieves from and its vectors) in the installed package, and `assetcdn up` serves the demo from there."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import ACCESS, PORT_TAKEN, free_port_block, made_demo_videos, up_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "docs", "assetcdn")
# Run inside the installed copy: where each package came from, and what it reads at run time.
PROBE = """
import json, sys
from assetcdn import control, edge, shared
from importlib import resources
from assetcdn.control.chat import documentation, passage_vectors
from assetcdn.control.search.encoder import MODEL_ID
from assetcdn.control.routes import dashboard, dashboard_login
from assetcdn.shared import config, openapi
print(json.dumps({
    "packages": [control.__file__, edge.__file__, shared.__file__],
    "defaults": config.default_config_text(),
    "settings": config.load_settings().get("server", "edge_port"),
    "static": sorted(dashboard.static_files()),
    "index": (dashboard.ROOT / "index.html").is_file(),
    "signin": sorted(p.name for p in dashboard_login.PAGES.iterdir()),
    "openapi": len(openapi.document_bytes()),
    "readme": documentation.readme_text(),
    "docs": dict(documentation.docs_pages()),
    "docs_dir": str(documentation.DOCS),
    "vectors_file": str(passage_vectors.VECTORS_FILE),
    "vectors_missing": len({passage_vectors.passage_key(MODEL_ID, p.embedding_text())
                            for p in documentation.documentation_passages()} - set(passage_vectors.read_prebuilt())),
    "sys_path": sys.path,
}))
"""


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtualenv in a temporary directory with only the project's wheel installed in it."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    for name in SOURCES:  # a copy: no build/ or egg-info left in the checkout, none of its leftovers used
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    dist = tmp / "dist"
    # The build backend comes from the project's environment (the lock pins it): no download.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", str(dist), str(source)])
    wheels = list(dist.glob("assetcdn-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--quiet", str(wheels[0])])
    # The dependencies: the project environment's site-packages, listed after the venv's own (a plain path
    # entry, so its .pth files, among them an editable install's finder, are not run).
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp).stdout.strip())
    (site / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    shutil.rmtree(source)  # nothing of the sources is left to fall back on
    yield venv


def _clean_env() -> dict[str, str]:
    env = up_env()
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def test_installed_wheel_carries_its_defaults_and_runtime_files(installed: Path, tmp_path: Path) -> None:
    import json

    probe = _run([str(installed / "bin" / "python"), "-c", PROBE], cwd=tmp_path, env=_clean_env())
    found = json.loads(probe.stdout)
    site = installed / "lib"
    assert all(Path(p).is_relative_to(site) for p in found["packages"]), found["packages"]
    assert str(ROOT) not in found["sys_path"] and "" not in found["sys_path"][1:]
    shipped = (ROOT / "assetcdn" / "shared" / "default.toml").read_text(encoding="utf-8")
    assert found["defaults"] == shipped
    assert found["settings"] == tomllib.loads(shipped)["server"]["edge_port"]
    assert found["index"] is True
    assert {"app.js", "dashboard.css", "vendor/hls.light.min.mjs", "views/files.js"} <= set(found["static"])
    expected_static = {p.relative_to(ROOT / "assetcdn/control/dashboard/static").as_posix()
                       for p in (ROOT / "assetcdn/control/dashboard/static").rglob("*")
                       if p.is_file() and not p.name.startswith(".")}
    assert set(found["static"]) == expected_static
    assert found["signin"] == sorted(p.name for p in (ROOT / "assetcdn/control/signin_page").iterdir())
    assert found["openapi"] == (ROOT / "assetcdn/shared/openapi.json").stat().st_size
    # The chat's documentation passages: the README, from the distribution's metadata when installed.
    assert found["readme"].strip() == (ROOT / "README.md").read_text(encoding="utf-8").strip()
    # ... and the pages of docs/, package data (the source tree's link to docs/ becomes real files).
    assert Path(found["docs_dir"]).is_relative_to(site)
    assert found["docs"] == {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")
                             if p.name != "README.md"}
    # ... and their vectors, made ahead (package data), for every passage of the installed documentation.
    assert Path(found["vectors_file"]).is_relative_to(site) and found["vectors_missing"] == 0

    # `assetcdn defaults` prints them for an operator who has no checkout to look at.
    printed = _run([str(installed / "bin" / "assetcdn"), "defaults"], cwd=tmp_path, env=_clean_env())
    assert printed.stdout == shipped


def _get(url: str, headers: dict[str, str] | None = None, *, method: str = "GET",
         data: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
        return resp.status, dict(resp.headers), resp.read()


def test_installed_wheel_runs_assetcdn_up_with_the_demo(installed: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "up.log"
    for attempt in range(5):
        base = free_port_block(3)
        edge_port, control_port, dashboard_port = base, base + 1, base + 2
        data_dir = tmp_path / f"data-{attempt}"
        made_demo_videos(data_dir)  # the demo's videos are not what this test is about
        command = [str(installed / "bin" / "assetcdn"), "up", "--data-dir", str(data_dir),
                   "--host", "127.0.0.1", "--edge-port", str(edge_port), "--control-port", str(control_port),
                   "--dashboard-port", str(dashboard_port)]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, cwd=tmp_path, env=_clean_env(), stdout=log,
                                       stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while b"assetcdn is up" not in log_path.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            output = log_path.read_bytes()
            if b"assetcdn is up" not in output:
                if any(sign in output for sign in PORT_TAKEN):
                    continue
                raise AssertionError(f"assetcdn up did not start:\n{output.decode(errors='replace')[-4000:]}")
            edge = f"http://127.0.0.1:{edge_port}"
            status, headers, body = _get(f"{edge}/demo/v1/logos/logo.svg")
            assert status == 200 and body.startswith(b"<svg") and headers["Content-Type"] == "image/svg+xml"
            status, headers, body = _get(f"{edge}/demo/v1/logos/logo.png?width=64")
            assert status == 200 and body.startswith(b"\x89PNG")
            status, headers, body = _get(f"http://127.0.0.1:{dashboard_port}/dashboard/login")
            assert status == 200 and b"<form" in body
            status, _, body = _get(f"{edge}/api/openapi.json")
            assert status == 200 and body == (ROOT / "assetcdn/shared/openapi.json").read_bytes()
            status, _, body = _get(f"{edge}/api/storage/demo/v1/logos/wheel.txt", ACCESS, method="PUT",
                                   data=b"from a wheel")
            assert status == 201, body
            status, _, body = _get(f"{edge}/demo/v1/logos/wheel.txt")
            assert status == 200 and body == b"from a wheel"
            return
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    raise AssertionError("assetcdn up found its ports taken 5 times in a row")

