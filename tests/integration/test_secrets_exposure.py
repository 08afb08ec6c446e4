"""`assetcdn up` on a first start with no keys in its environment: the generated secrets stay in
secrets.env (0600, in a 0700 data directory), never in the log; /metrics and deep health need the
metrics key on control and on the edge; the public health names no internal address. And with two
workers per edge, each worker accepts only the pushes signed for it, once."""

from __future__ import annotations

import asyncio
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.secrets import SECRETS_FILE, Secrets
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
    # Two workers: the push test below needs them, and one `up` serves every test of the file.
    running = start_cdn(tmp, edges=1, workers=2, env_extra=no_keys)
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


async def test_each_worker_takes_only_its_own_push_and_only_once(cdn: RunningCdn) -> None:
    """Control pushes to every worker of a node on its private port; a push for one worker is refused by
    the other and by itself the second time."""
    keys = _stored_secrets(cdn.data_dir)
    metrics = {"Authorization": f"Bearer {keys['ASSETCDN_METRICS_KEY']}"}
    async with aiohttp.ClientSession() as http:

        async def members() -> dict[str, dict]:
            async with http.get(f"{cdn.control_url}/api/health?deep=1", headers=metrics) as resp:
                return {e["name"]: e for e in (await resp.json())["edges"]}

        deadline = time.monotonic() + 30  # `up` saw one worker healthy; the other may still be registering
        while set(await members()) != {"edge-0/0", "edge-0/1"}:
            assert time.monotonic() < deadline, await members()
            await asyncio.sleep(0.1)
        async with http.post(f"{cdn.edge_urls[0]}/api/core/zones", json={"Name": "workers"},
                             headers={"AccountKey": keys["ASSETCDN_ACCOUNT_KEY"]}) as resp:
            assert resp.status == 201, await resp.text()
            assert "Acknowledged by 1 of 1 edges" in (await resp.json())["EdgeNote"]
        workers = await members()
        assert all(m["lastPushMs"] is not None for m in workers.values())  # each worker acknowledged its push

        generation = workers["edge-0/0"]["generation"]
        body = orjson.dumps({"v": 1, "generation": generation})
        push = {**sign_request(keys["ASSETCDN_CLUSTER_SECRET"], "POST", PREFIX + "/push", body, audience="edge-0/0"),
                "Content-Type": "application/json"}
        async with http.post(workers["edge-0/1"]["url"] + PREFIX + "/push", data=body, headers=push) as resp:
            assert resp.status == 401  # signed for the other worker
        async with http.post(workers["edge-0/0"]["url"] + PREFIX + "/push", data=body, headers=push) as resp:
            assert resp.status == 200
        async with http.post(workers["edge-0/0"]["url"] + PREFIX + "/push", data=body, headers=push) as resp:
            assert resp.status == 401  # the same message again
