"""`assetcdn up` on a first start with no keys in its environment: the generated secrets stay in
secrets.env (0600, in a 0700 data directory), never in the log; /metrics and deep health need the
metrics key on control and on the edge; the public health names no internal address."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from shared.secrets import SECRETS_FILE, Secrets
from tests.integration.harness import KEYS, RunningCdn, start_cdn
from tests.shared.health_shape import assert_health_shape, assert_no_internal_addresses

pytestmark = pytest.mark.integration


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stored_secrets(data_dir: Path) -> dict[str, str]:
    lines = (data_dir / SECRETS_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    tmp = tmp_path_factory.mktemp("secrets")
    (tmp / "data").mkdir()
    (tmp / "data").chmod(0o755)  # an operator-made data directory that others can read
    no_keys = {name: "" for name in KEYS}  # empty counts as unset: every secret is generated
    running = start_cdn(tmp, edges=1, env_extra=no_keys)
    try:
        yield running
    finally:
        assert running.stop() == 0


def test_generated_secrets_never_reach_the_log(cdn: RunningCdn) -> None:
    stored = _stored_secrets(cdn.data_dir)
    assert set(stored) == {Secrets.env_name(name) for name in Secrets.__dataclass_fields__}
    log = cdn.log_path.read_text()
    for name, value in stored.items():
        assert value not in log, f"{name} is in the log"
    assert str(cdn.data_dir / SECRETS_FILE) in log  # where to find them is said


def test_the_data_directory_and_what_it_holds_are_private(cdn: RunningCdn) -> None:
    assert _mode(cdn.data_dir) == 0o700
    assert _mode(cdn.data_dir / SECRETS_FILE) == 0o600
    assert _mode(cdn.data_dir / "control.sqlite3") == 0o600
    assert _mode(cdn.data_dir / "repo.git") == 0o700
    assert "tightened to 0700" in cdn.log_path.read_text()


async def test_metrics_and_deep_health_need_the_metrics_key_on_both_processes(cdn: RunningCdn) -> None:
    bearer = {"Authorization": f"Bearer {_stored_secrets(cdn.data_dir)['ASSETCDN_METRICS_KEY']}"}
    async with aiohttp.ClientSession() as http:
        for base in (cdn.control_url, cdn.edge_urls[0]):
            for path in ("/metrics", "/api/health?deep=1"):
                async with http.get(base + path) as resp:
                    body = await resp.json()
                    assert resp.status == 401, (base, path, body)
                    assert body["error"]["code"] == "Unauthorized"
            async with http.get(base + "/metrics", headers=bearer) as resp:
                assert resp.status == 200
                assert "assetcdn_requests_total" in await resp.text()
            async with http.get(base + "/api/health?deep=1", headers=bearer) as resp:
                body = await resp.json()
                assert resp.status == 200, body
                assert_health_shape(body)
            async with http.get(base + "/api/health") as resp:
                text = await resp.text()
                assert resp.status == 200, text
                assert_no_internal_addresses(text, str(cdn.data_dir))
