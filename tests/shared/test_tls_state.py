"""The TLS state message: round trip, sealing bound to the certificate and the cluster secret."""

from __future__ import annotations

import pytest

from assetcdn.shared.tls_state import CertificateEntry, TlsState, TlsStateError

CHAIN = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"


def test_round_trip_keeps_key_sealed_and_unseals_with_the_cluster_secret() -> None:
    entry = CertificateEntry.seal("cluster-secret", ("cdn.example.com",), CHAIN, KEY, "2027-01-01T00:00:00Z")
    state = TlsState(3, {"tok": "tok.thumb"}, (entry,))
    message = state.to_message()
    assert b"secret" not in str(message).encode()
    again = TlsState.from_message(message)
    assert again == state
    assert again.certificates[0].key_pem("cluster-secret") == KEY


def test_key_refuses_another_secret_or_another_certificate() -> None:
    entry = CertificateEntry.seal("cluster-secret", ("a.example",), CHAIN, KEY, "2027-01-01T00:00:00Z")
    with pytest.raises(TlsStateError):
        entry.key_pem("other-secret")
    other_chain = CHAIN.replace("MIIB", "MIIC")
    moved = CertificateEntry.seal("cluster-secret", ("b.example",), other_chain, b"k", "2027-01-01T00:00:00Z")
    swapped = CertificateEntry(moved.id, moved.names, moved.chain_pem, entry.key_sealed, moved.not_after)
    with pytest.raises(TlsStateError):
        swapped.key_pem("cluster-secret")


@pytest.mark.parametrize("message", [
    {"v": 2, "serial": 1, "challenges": {}, "certificates": []},
    {"v": 1, "serial": "1", "challenges": {}, "certificates": []},
    {"v": 1, "serial": 1, "challenges": {"t": 1}, "certificates": []},
    {"v": 1, "serial": 1, "challenges": {}, "certificates": [{"id": "x"}]},
    {"v": 1, "serial": 1, "challenges": {}, "certificates": [
        {"id": "0" * 64, "names": ["a"], "chain_pem": CHAIN, "key_sealed": "", "not_after": ""}]},
])
def test_malformed_messages_are_refused(message: dict) -> None:
    with pytest.raises(TlsStateError):
        TlsState.from_message(message)
