"""Edge->control cluster requests are accepted once: a captured heartbeat or register sent again is
refused, a freshly signed one still works, and one signed for an edge worker is refused by control."""

from __future__ import annotations

import orjson
from aiohttp.test_utils import TestClient

from assetcdn.shared.cluster import PREFIX, sign_request
from tests.control.expect import expect_error
from tests.support.control import SECRETS


def _signed(path: str, message: dict, **kwargs: str) -> tuple[bytes, dict[str, str]]:
    body = orjson.dumps({"v": 1, **message})
    return body, {**sign_request(SECRETS.cluster_secret, "POST", PREFIX + path, body, **kwargs),
                  "Content-Type": "application/json"}


async def test_a_captured_request_is_refused_the_second_time(control: TestClient) -> None:
    body, headers = _signed("/register", {"name": "edge-r/0", "url": "http://127.0.0.1:49998", "generation": 0})
    assert (await control.post(PREFIX + "/register", data=body, headers=headers)).status == 200
    await expect_error(await control.post(PREFIX + "/register", data=body, headers=headers), 401, "Unauthorized")

    heartbeat, heartbeat_headers = _signed("/heartbeat", {"name": "edge-r/0", "generation": 0})
    resp = await control.post(PREFIX + "/heartbeat", data=heartbeat, headers=heartbeat_headers)
    assert resp.status == 200 and (await resp.json())["known"] is True
    await expect_error(await control.post(PREFIX + "/heartbeat", data=heartbeat, headers=heartbeat_headers),
                       401, "Unauthorized")

    again, again_headers = _signed("/heartbeat", {"name": "edge-r/0", "generation": 0})  # the same, signed anew
    assert (await control.post(PREFIX + "/heartbeat", data=again, headers=again_headers)).status == 200


async def test_a_message_signed_for_an_edge_worker_is_refused_by_control(control: TestClient) -> None:
    body, headers = _signed("/heartbeat", {"name": "edge-r/0", "generation": 0}, audience="edge-r/0")
    await expect_error(await control.post(PREFIX + "/heartbeat", data=body, headers=headers), 401, "Unauthorized")


async def test_get_requests_are_single_use_too(control: TestClient) -> None:
    path = PREFIX + "/changes?since=0"
    headers = sign_request(SECRETS.cluster_secret, "GET", path)
    assert (await control.get(path, headers=headers)).status == 200
    await expect_error(await control.get(path, headers=headers), 401, "Unauthorized")
