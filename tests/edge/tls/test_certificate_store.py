"""The certificate store's choices, through real TLS handshakes against its contexts (in this process): an
ECDSA and an RSA certificate for one name (the client's abilities pick), the longest-lasting of two
certificates control lists for one name during a renewal, and the self-signed default."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path

from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.edge.tls.state import EdgeTlsState
from assetcdn.shared.config import load_settings
from assetcdn.shared.tls_state import CertificateEntry, TlsState
from tests.edge.tls.certs import TestCa
from tests.support.https import peer_certificate, unverified

SECRET = "store-test-secret"


def store_with(tmp_path: Path, pairs: list[tuple[Path, Path]], state: EdgeTlsState | None = None) -> CertificateStore:
    settings = load_settings(environ={"ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(c), str(k)] for c, k in pairs])})
    return CertificateStore(settings, state or EdgeTlsState(SECRET), spill_dir=tmp_path)


def test_an_ecdsa_and_an_rsa_certificate_for_one_name_are_both_offered(tmp_path: Path) -> None:
    ca = TestCa()
    ecdsa, rsa = ca.issue("both.example.test"), ca.issue("both.example.test", rsa_key=True)
    store = store_with(tmp_path, [ecdsa.write(tmp_path, "ecdsa"), rsa.write(tmp_path, "rsa")])
    assert peer_certificate(store, "both.example.test", unverified()).serial_number == ecdsa.serial
    assert peer_certificate(store, "both.example.test", unverified(rsa_only=True)).serial_number == rsa.serial


def test_of_two_certificates_from_control_for_one_name_the_later_expiry_is_offered(tmp_path: Path) -> None:
    ca = TestCa()
    old, new = ca.issue("shop.example.test", days=5), ca.issue("shop.example.test", days=60)
    entries = tuple(CertificateEntry.seal(SECRET, ("shop.example.test",), issued.chain_pem.decode(), issued.key_pem,
                                          (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=d))
                                          .strftime("%Y-%m-%dT%H:%M:%SZ"))
                    for issued, d in ((old, 5), (new, 60)))
    state = EdgeTlsState(SECRET)
    store = store_with(tmp_path, [], state)
    default = peer_certificate(store, "shop.example.test", unverified())  # nothing for it yet: self-signed
    assert default.issuer == default.subject
    asyncio.run(state.apply(TlsState(1, {}, entries).to_message(), persist=False))
    assert peer_certificate(store, "shop.example.test", unverified()).serial_number == new.serial
    asyncio.run(state.apply(TlsState(2, {}, ()).to_message(), persist=False))
    assert peer_certificate(store, "shop.example.test", unverified()).serial_number == default.serial_number
