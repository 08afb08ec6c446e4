"""`assetcdn up` as an operator runs it: control and one edge as real processes on loopback, driven only
over HTTP through the edge port, then stopped with SIGTERM."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

pytestmark = pytest.mark.integration

KEYS = {
    "ASSETCDN_ACCESS_KEY": "up-access-key", "ASSETCDN_ACCOUNT_KEY": "up-account-key",
    "ASSETCDN_PURGE_KEY": "up-purge-key", "ASSETCDN_ANALYTICS_KEY": "up-analytics-key",
    "ASSETCDN_SIGNED_URL_SECRET": "up-signed-secret", "ASSETCDN_CLUSTER_SECRET": "up-cluster-secret",
    "ASSETCDN_SESSION_SECRET": "up-session-secret",
}
ACCESS = {"AccessKey": KEYS["ASSETCDN_ACCESS_KEY"]}
ACCOUNT = {"AccountKey": KEYS["ASSETCDN_ACCOUNT_KEY"]}
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
ZONE = "upzone"
LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'


@dataclass
class Cdn:
    process: subprocess.Popen[bytes]
    data_dir: Path
    url: str


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/health", timeout=2) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text` (read from /proc; zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cdn]:
    data_dir = tmp_path_factory.mktemp("up") / "data"
    edge_port, control_port = free_port(), free_port()
    while control_port == edge_port:
        control_port = free_port()
    env = {**os.environ, **KEYS}
    env.pop("ASSETCDN_CONFIG", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "up", "--no-demo", "--data-dir", str(data_dir),
         "--edge-port", str(edge_port), "--control-port", str(control_port), "--host", "127.0.0.1"],
        env=env, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{edge_port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not healthy(url):
        if process.poll() is not None:
            pytest.fail(f"assetcdn up exited with {process.returncode}: {process.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the edge was not healthy within {STARTUP_TIMEOUT_S:.0f} s")
        time.sleep(0.2)
    yield Cdn(process, data_dir, url)
    if process.poll() is None:  # the SIGTERM test did not run or failed: leave nothing behind
        process.kill()
        process.wait()
    for pid in processes_mentioning(str(data_dir)):
        os.kill(pid, signal.SIGKILL)


def api(cdn: Cdn, path: str) -> str:
    return cdn.url + path


async def expect_envelope(resp: aiohttp.ClientResponse, status: int, code: str) -> dict:
    body = await resp.json()
    assert resp.status == status, body
    assert body["error"]["code"] == code
    assert body["HttpCode"] == status and body["Message"] == body["error"]["message"]
    assert body["requestId"] == resp.headers["X-Request-ID"] == str(uuid.UUID(body["requestId"]))
    assert body["apiVersion"] == resp.headers["X-API-Version"] == "2026-04-01"
    return body


async def test_zone_upload_and_read_back_through_the_edge(cdn: Cdn) -> None:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(api(cdn, "/api/core/zones"), json={"Name": ZONE}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["Directories"] == ["v1/banners", "v1/github", "v1/icons", "v1/logos", "v1/titles"]

        resp = await http.put(api(cdn, f"/api/storage/{ZONE}/v1/logos/logo.svg"), data=LOGO,
                              headers={**ACCESS, "Content-Type": "image/svg+xml"})
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["EdgeStatus"] == "pending"

        # The public CDN path carries no `clients/` prefix.
        resp = await http.get(api(cdn, f"/{ZONE}/v1/logos/logo.svg"))
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("image/svg+xml")
        assert await resp.read() == LOGO

        resp = await http.get(api(cdn, f"/api/storage/{ZONE}/v1/logos/logo.svg"), headers=ACCESS)
        assert resp.status == 200
        assert await resp.read() == LOGO

        resp = await http.head(api(cdn, f"/api/storage/{ZONE}/v1/logos/logo.svg"), headers=ACCESS)
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(LOGO))

        resp = await http.get(api(cdn, f"/api/storage/{ZONE}/v1/logos/"), headers=ACCESS)
        assert [e["ObjectName"] for e in await resp.json()] == ["logo.svg"]


async def test_overwrite_is_served_new_bytes_and_delete_is_gone(cdn: Cdn) -> None:
    path = f"{ZONE}/v1/icons/dot.svg"
    async with aiohttp.ClientSession() as http:
        assert (await http.put(api(cdn, f"/api/storage/{path}"), data=b"<svg>1</svg>", headers=ACCESS)).status == 201
        assert await (await http.get(api(cdn, f"/{path}"))).read() == b"<svg>1</svg>"
        resp = await http.put(api(cdn, f"/api/storage/{path}"), data=b"<svg>2</svg>", headers=ACCESS)
        assert (await resp.json())["EdgeStatus"] == "purging"
        assert await (await http.get(api(cdn, f"/{path}"))).read() == b"<svg>2</svg>"
        resp = await http.delete(api(cdn, f"/api/storage/{path}"), headers=ACCESS)
        assert (await resp.json())["EdgeStatus"] == "purging"
        assert (await http.get(api(cdn, f"/{path}"))).status == 404


async def test_batch_and_assets_listing(cdn: Cdn) -> None:
    files = [{"path": f"{ZONE}/v1/banners/hero-{i}.png", "content": base64.b64encode(b"png" * (i + 1)).decode()}
             for i in range(3)]
    async with aiohttp.ClientSession() as http:
        resp = await http.post(api(cdn, "/api/storage/batch"), json={"files": files}, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        resp = await http.get(api(cdn, "/api/assets"), params={"project": ZONE, "category": "banners",
                                                                "sort": "size", "order": "desc"}, headers=ACCESS)
        assert resp.status == 200
        raw = await resp.read()
        assert raw.startswith(b'{"Pagination":')
        body = await resp.json()
        assert list(body) == ["Pagination", "Filters", "DateFetched", "Data"]
        assert [a["name"] for a in body["Data"]] == ["hero-2.png", "hero-1.png", "hero-0.png"]
        assert body["Pagination"]["TotalItems"] == 3
        resp = await http.get(api(cdn, "/api/assets/metadata"), params={"path": f"{ZONE}/v1/logos/logo.svg"},
                              headers=ACCESS)
        assert (await resp.json())["AvailableFormats"] == ["svg"]


async def test_token_create_use_revoke(cdn: Cdn) -> None:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(api(cdn, "/api/tokens"), json={"name": "it", "scopes": ["assets:read"]},
                               headers=ACCOUNT)
        assert resp.status == 201
        created = await resp.json()
        bearer = {"Authorization": f"Bearer {created['token']}"}
        assert (await http.get(api(cdn, "/api/assets"), headers=bearer)).status == 200
        listed = await (await http.get(api(cdn, "/api/tokens"), headers=ACCOUNT)).text()
        assert created["token"] not in listed and created["token"][:14] in listed
        resp = await http.delete(api(cdn, "/api/tokens"), params={"id": created["id"]}, headers=ACCOUNT)
        assert resp.status == 200
        await expect_envelope(await http.get(api(cdn, "/api/assets"), headers=bearer), 401, "Unauthorized")


async def test_error_envelopes_pass_through_the_edge(cdn: Cdn) -> None:
    async with aiohttp.ClientSession() as http:
        await expect_envelope(await http.get(api(cdn, "/api/core/zones"), headers=ACCESS), 401, "Unauthorized")
        body = await expect_envelope(await http.get(api(cdn, "/api/no-such-endpoint"), headers=ACCOUNT),
                                     404, "NotFound")
        assert "/api/no-such-endpoint" in body["Message"]
        await expect_envelope(await http.get(api(cdn, "/api/core/zones/nobody"), headers=ACCOUNT),
                              404, "ZoneNotFound")


async def test_encoded_traversal_through_the_edge_is_400(cdn: Cdn) -> None:
    async with aiohttp.ClientSession() as http:
        url = URL(api(cdn, f"/api/storage/{ZONE}/v1/%2e%2e/v1/logos/logo.svg"), encoded=True)
        await expect_envelope(await http.get(url, headers=ACCESS), 400, "InvalidPath")


def test_sigterm_stops_every_process(cdn: Cdn) -> None:
    # Runs last in this file (file order; the suite distributes with --dist loadfile).
    children = processes_mentioning(str(cdn.data_dir))
    assert cdn.process.pid in children and len(children) >= 3  # `up`, control and the edge
    cdn.process.send_signal(signal.SIGTERM)
    assert cdn.process.wait(timeout=STOP_TIMEOUT_S) == 0
    assert processes_mentioning(str(cdn.data_dir)) == []
