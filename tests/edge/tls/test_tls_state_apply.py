"""A TLS state push of many certificates is applied off the edge worker's event loop: the work that grows with the
certificates (unsealing their keys, parsing them into the SNI table) runs on other threads, so the loop keeps
answering, and the pushed certificates are offered. Which thread does the work is asserted, not how long the loop
waited: a loaded machine's scheduler can keep any thread waiting, and timings belong in benchmarks/."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.edge.tls.state import EdgeTlsState
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.tls_state import TLS_STATE_PATH, CertificateEntry, TlsState
from tests.edge.tls.certs import Issued, TestCa
from tests.support.cdn import CdnFactory
from tests.support.control import SECRETS
from tests.support.https import peer_certificate, unverified

CERTIFICATES = 300  # a few seconds of loading on a loaded test machine, a few hundred ms on a quiet one


@pytest.fixture(scope="session")
def many_certificates() -> tuple[list[Issued], tuple[CertificateEntry, ...]]:
    """CERTIFICATES certificates (one name each) and their entries sealed with the test cluster secret."""
    ca = TestCa()
    not_after = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    issued = [ca.issue(f"site{i}.example.test") for i in range(CERTIFICATES)]
    entries = tuple(CertificateEntry.seal(SECRETS.cluster_secret, (f"site{i}.example.test",), cert.chain_pem.decode(),
                                          cert.key_pem, not_after) for i, cert in enumerate(issued))
    return issued, entries


def recording_threads(method: Callable[..., Any], threads: list[int]) -> Callable[..., Any]:
    """`method`, noting the thread each call runs on."""
    def recorded(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return method(*args, **kwargs)

    return recorded


async def test_a_push_of_many_certificates_does_not_hold_the_loop(
        make_cdn: CdnFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        many_certificates: tuple[list[Issued], tuple[CertificateEntry, ...]]) -> None:
    # The steps whose work grows with the certificates: the keys unsealed, the certificates parsed into a table.
    unsealing: list[int] = []
    building: list[int] = []
    monkeypatch.setattr(EdgeTlsState, "_unsealed", recording_threads(EdgeTlsState._unsealed, unsealing))
    monkeypatch.setattr(CertificateStore, "_build", recording_threads(CertificateStore._build, building))
    cdn = await make_cdn()
    issued, entries = many_certificates
    # The certificate store the worker's https port has (assetcdn/edge/server.py), on the node's TLS state.
    settings = load_settings(environ={"ASSETCDN_TLS_CERTIFICATES": json.dumps([])})
    store = CertificateStore(settings, cdn.node.tls, spill_dir=tmp_path)
    (member,) = cdn.control.app[REGISTRY].edges.values()
    body = orjson.dumps(TlsState(7, {}, entries).to_message())
    headers = {"Content-Type": "application/json",
               **sign_request(SECRETS.cluster_secret, "POST", PREFIX + TLS_STATE_PATH, body, audience=member.name)}

    unsealing.clear()
    building.clear()
    async with aiohttp.ClientSession() as http, http.post(member.url + PREFIX + TLS_STATE_PATH, data=body,
                                                          headers=headers) as resp:
        reply = await resp.json()

    assert resp.status == 200 and reply == {"serial": 7, "applied": True}
    # Both steps ran for the push (the store above listens to the node's TLS state), never on the loop's thread:
    # the loop only swaps the results in. (Either step called on the loop fails here.)
    loop_thread = threading.get_ident()
    assert unsealing and building
    assert loop_thread not in unsealing + building
    for i in (0, CERTIFICATES - 1):
        offered = await asyncio.to_thread(peer_certificate, store, f"site{i}.example.test", unverified())
        assert offered.serial_number == issued[i].serial
