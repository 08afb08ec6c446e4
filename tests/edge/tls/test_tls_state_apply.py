"""A TLS state push of many certificates is applied off the edge worker's event loop: the loop keeps
answering (its longest stall stays a small part of the push) and the pushed certificates are offered."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path

import aiohttp
import orjson
import pytest

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.tls_state import TLS_STATE_PATH, CertificateEntry, TlsState
from tests.edge.tls.certs import Issued, TestCa
from tests.support.cdn import CdnFactory
from tests.support.control import SECRETS
from tests.support.https import peer_certificate, unverified

CERTIFICATES = 300  # a few seconds of loading on a loaded test machine, a few hundred ms on a quiet one
PROBE_TICK_S = 0.005


@pytest.fixture(scope="session")
def many_certificates() -> tuple[list[Issued], tuple[CertificateEntry, ...]]:
    """CERTIFICATES certificates (one name each) and their entries sealed with the test cluster secret."""
    ca = TestCa()
    not_after = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    issued = [ca.issue(f"site{i}.example.test") for i in range(CERTIFICATES)]
    entries = tuple(CertificateEntry.seal(SECRETS.cluster_secret, (f"site{i}.example.test",), cert.chain_pem.decode(),
                                          cert.key_pem, not_after) for i, cert in enumerate(issued))
    return issued, entries


async def longest_stall(stop: asyncio.Event) -> float:
    """How late the loop woke this task at most (a request arriving meanwhile waits as long)."""
    loop = asyncio.get_running_loop()
    longest = 0.0
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(PROBE_TICK_S)
        longest = max(longest, loop.time() - before - PROBE_TICK_S)
    return longest


async def test_a_push_of_many_certificates_does_not_hold_the_loop(
        make_cdn: CdnFactory, tmp_path: Path,
        many_certificates: tuple[list[Issued], tuple[CertificateEntry, ...]]) -> None:
    cdn = await make_cdn()
    issued, entries = many_certificates
    # The certificate store the worker's https port has (assetcdn/edge/server.py), on the node's TLS state.
    settings = load_settings(environ={"ASSETCDN_TLS_CERTIFICATES": json.dumps([])})
    store = CertificateStore(settings, cdn.node.tls, spill_dir=tmp_path)
    (member,) = cdn.control.app[REGISTRY].edges.values()
    body = orjson.dumps(TlsState(7, {}, entries).to_message())
    headers = {"Content-Type": "application/json",
               **sign_request(SECRETS.cluster_secret, "POST", PREFIX + TLS_STATE_PATH, body, audience=member.name)}

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    probe = asyncio.create_task(longest_stall(stop))
    started = loop.time()
    async with aiohttp.ClientSession() as http, http.post(member.url + PREFIX + TLS_STATE_PATH, data=body,
                                                          headers=headers) as resp:
        reply = await resp.json()
    took = loop.time() - started
    stop.set()
    stall = await probe

    assert resp.status == 200 and reply == {"serial": 7, "applied": True}
    # Applied on the loop, the whole push was one stall; off it, the loop only swaps the result in.
    assert stall < took / 4, f"the loop stalled {stall:.3f} s during a push that took {took:.3f} s"
    for i in (0, CERTIFICATES - 1):
        offered = await asyncio.to_thread(peer_certificate, store, f"site{i}.example.test", unverified())
        assert offered.serial_number == issued[i].serial
