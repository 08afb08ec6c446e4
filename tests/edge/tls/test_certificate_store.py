"""The certificate store's choices, through real TLS handshakes against its contexts (in this process): an
ECDSA and an RSA certificate for one name (the client's abilities pick), the longest-lasting of two
certificates control lists for one name during a renewal, and the self-signed default (the names it covers)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from assetcdn.edge.tls.certificates import CertificateStore, default_certificate_names
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


def trusting(certificate: x509.Certificate, tmp_path: Path) -> ssl.SSLContext:
    """A client that trusts `certificate` alone and checks the name it connects to, as `curl --cacert` does."""
    ca_file = tmp_path / "default.pem"
    ca_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return ssl.create_default_context(cafile=str(ca_file))


@pytest.mark.parametrize(("public_url", "host", "url_host"),
                         [("", "127.0.0.1", "127.0.0.1"), ("", "::1", "::1"), ("", "127.0.0.1", "localhost"),
                          ("https://192.0.2.10:8443", "0.0.0.0", "192.0.2.10"),
                          ("https://cdn.example.test", "0.0.0.0", "cdn.example.test")])
def test_the_self_signed_default_covers_the_address_the_edge_is_reached_on(
        tmp_path: Path, public_url: str, host: str, url_host: str) -> None:
    """`assetcdn up --https-port P` prints https://127.0.0.1:P, but its self-signed certificate named only localhost
    (an IP address of the public URL went in as a DNS name, which no client matches): a client trusting it still
    failed the name check ("no alternative certificate subject name matches target host name '127.0.0.1'")."""
    names = default_certificate_names(public_url, host)
    store = CertificateStore(load_settings(environ={}), EdgeTlsState(SECRET), default_names=names, spill_dir=tmp_path)
    default = peer_certificate(store, url_host, unverified())
    assert peer_certificate(store, url_host, trusting(default, tmp_path)).serial_number == default.serial_number
    assert "0.0.0.0" not in names  # a wildcard listening address is no address to reach


def test_a_half_written_operator_pair_is_logged_once_and_read_again_when_whole(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A renewal tool that wrote the new key but not (yet, or ever) its chain got an ERROR line per worker at every
    check (every 5 s by default: 17,280 a day each) for as long as the pair stayed half-written."""
    ca = TestCa()
    first, renewed = ca.issue("cdn.example.test"), ca.issue("cdn.example.test")
    chain, key = first.write(tmp_path, "main")
    store = store_with(tmp_path, [(chain, key)])
    key.write_bytes(renewed.key_pem)  # the key of a certificate not written yet
    with caplog.at_level(logging.ERROR, logger="assetcdn.edge.tls.certificates"):
        for _ in range(3):
            assert asyncio.run(store.reload_if_changed()) is False
    assert [r.getMessage() for r in caplog.records if str(key) in r.getMessage()] == [
        f"cannot use TLS certificate {chain} with key file {key}: the key does not belong to the certificate; "
        "still offering the previous certificates"]
    assert peer_certificate(store, "cdn.example.test", unverified()).serial_number == first.serial
    chain.write_bytes(renewed.chain_pem)
    assert asyncio.run(store.reload_if_changed()) is True
    assert peer_certificate(store, "cdn.example.test", unverified()).serial_number == renewed.serial
