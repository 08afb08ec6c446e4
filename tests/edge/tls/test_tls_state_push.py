"""Control's TLS state reaching an edge worker (POST /_cluster/tls, signed like every push) and the ACME
HTTP-01 answers it carries (GET /.well-known/acme-challenge/<token>)."""

from __future__ import annotations

import datetime

import aiohttp
import orjson

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.tls_state import TLS_STATE_PATH, CertificateEntry, TlsState
from tests.control.expect import expect_error
from tests.edge.tls.certs import TestCa
from tests.support.cdn import CdnFactory
from tests.support.control import SECRETS

TOKEN = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"
KEY_AUTHORIZATION = TOKEN + ".9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"


def _state(serial: int, challenges: dict[str, str], ca: TestCa, secret: str = SECRETS.cluster_secret) -> TlsState:
    issued = ca.issue("cdn.example.test")
    not_after = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = CertificateEntry.seal(secret, ("cdn.example.test",), issued.chain_pem.decode(), issued.key_pem, not_after)
    return TlsState(serial, challenges, (entry,))


async def _push(cdn_control_app: aiohttp.web.Application, state: TlsState | dict[str, object], *,
                signed: bool = True) -> aiohttp.ClientResponse:
    (member,) = cdn_control_app[REGISTRY].edges.values()
    body = orjson.dumps(state.to_message() if isinstance(state, TlsState) else state)
    headers = {"Content-Type": "application/json"}
    if signed:
        headers |= sign_request(SECRETS.cluster_secret, "POST", PREFIX + TLS_STATE_PATH, body, audience=member.name)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(member.url + PREFIX + TLS_STATE_PATH, data=body, headers=headers)
        await resp.read()
        return resp


async def test_a_pushed_state_answers_its_challenges_and_only_a_newer_one_replaces_it(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    ca = TestCa()
    challenge = f"/.well-known/acme-challenge/{TOKEN}"
    await expect_error(await cdn.edge.get(challenge), 404, "NotFound")

    resp = await _push(cdn.control.app, _state(3, {TOKEN: KEY_AUTHORIZATION}, ca))
    assert resp.status == 200 and await resp.json() == {"serial": 3, "applied": True}
    resp = await cdn.edge.get(challenge)
    assert resp.status == 200 and resp.content_type == "text/plain"
    assert await resp.text() == KEY_AUTHORIZATION
    assert (await cdn.edge.head(challenge)).status == 200
    await expect_error(await cdn.edge.get("/.well-known/acme-challenge/other-token"), 404, "NotFound")
    await expect_error(await cdn.edge.get("/.well-known/acme-challenge/..%2F..%2Fsecrets.env"), 404, "NotFound")

    # The same serial again, or an older one: nothing changes.
    resp = await _push(cdn.control.app, _state(3, {}, ca))
    assert resp.status == 200 and await resp.json() == {"serial": 3, "applied": False}
    resp = await _push(cdn.control.app, _state(2, {}, ca))
    assert await resp.json() == {"serial": 3, "applied": False}
    assert await (await cdn.edge.get(challenge)).text() == KEY_AUTHORIZATION

    # A newer one without the token: the challenge is gone.
    resp = await _push(cdn.control.app, _state(4, {}, ca))
    assert await resp.json() == {"serial": 4, "applied": True}
    await expect_error(await cdn.edge.get(challenge), 404, "NotFound")


async def test_a_state_the_edge_cannot_trust_or_unseal_changes_nothing(make_cdn: CdnFactory) -> None:
    # Serials above control's own (its real state starts at 1 and the edge may pull it at any catch-up)
    cdn = await make_cdn()
    ca = TestCa()
    assert (await _push(cdn.control.app, _state(101, {TOKEN: KEY_AUTHORIZATION}, ca))).status == 200

    resp = await _push(cdn.control.app, _state(105, {}, ca), signed=False)
    assert resp.status == 401
    # Signed, but its key sealed under another cluster secret: refused whole.
    resp = await _push(cdn.control.app, _state(105, {}, ca, secret="another-cluster-secret"))
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "InvalidTlsState"
    resp = await _push(cdn.control.app, {"v": 99, "serial": 106, "challenges": {}, "certificates": []})
    assert resp.status == 400
    resp = await _push(cdn.control.app, {"v": 1, "serial": "107", "challenges": {}, "certificates": []})
    assert resp.status == 400
    assert cdn.node.tls.serial == 101
    assert await (await cdn.edge.get(f"/.well-known/acme-challenge/{TOKEN}")).text() == KEY_AUTHORIZATION


async def test_the_state_is_kept_on_disk_with_its_keys_still_sealed(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    ca = TestCa()
    state = _state(101, {TOKEN: KEY_AUTHORIZATION}, ca)
    assert (await _push(cdn.control.app, state)).status == 200
    stored = cdn.node.tls.state_file
    assert stored is not None and stored.stat().st_mode & 0o777 == 0o600
    key_pem = state.certificates[0].key_pem(SECRETS.cluster_secret)
    assert b"PRIVATE KEY" not in stored.read_bytes() and key_pem not in stored.read_bytes()
    assert orjson.loads(stored.read_bytes()) == state.to_message()
