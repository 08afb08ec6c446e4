"""The TLS state control hands to every edge: ACME HTTP-01 answers and the certificates to offer.

Control owns it (ACME orders, renewals, removed domains); each edge applies it whole, so a message
is idempotent and a later one replaces an earlier one (``serial`` only grows). It travels over the
signed cluster protocol (assetcdn/shared/cluster.py): pushed by control to ``/_cluster/tls`` on every
edge worker when it changes, and pulled by an edge from control's ``/_cluster/tls`` at start and on
its catch-up timer, so an edge that missed a push still converges.

Private keys never travel in the clear, even inside the signed message (edges may run on other
machines): each key is sealed with AES-256-GCM under a key derived from the cluster secret (HKDF),
bound to its certificate's id, so a key cannot be moved onto another certificate's entry.

Wire form (version 1)::

    {"v": 1, "serial": 7,
     "challenges": {"<token>": "<key authorization>"},
     "certificates": [{"id": "<sha256 hex of chain_pem>", "names": ["cdn.example.com", "*.t.example.com"],
                       "chain_pem": "-----BEGIN CERTIFICATE-----...", "key_sealed": "<base64url>",
                       "not_after": "2027-02-24T10:00:00Z"}]}
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

TLS_STATE_VERSION = 1
TLS_STATE_PATH = "/tls"  # under the cluster prefix: /_cluster/tls on control (GET) and on edges (POST)
_SEAL_INFO = b"assetcdn tls key transport v1"
_NONCE_BYTES = 12


class TlsStateError(ValueError):
    """A TLS state message that is malformed, of another version, or whose key does not unseal."""


def _sealing_key(cluster_secret: str) -> AESGCM:
    # Imported on first use: an edge without HTTPS never seals or unseals, and the library is megabytes of RSS.
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEAL_INFO).derive(cluster_secret.encode())
    return AESGCM(key)


def certificate_id(chain_pem: str) -> str:
    return hashlib.sha256(chain_pem.encode()).hexdigest()


def seal_key(cluster_secret: str, key_pem: bytes, cert_id: str) -> str:
    """The private key `key_pem` sealed for the edges, bound to the certificate `cert_id`."""
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _sealing_key(cluster_secret).encrypt(nonce, key_pem, cert_id.encode())
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def unseal_key(cluster_secret: str, key_sealed: str, cert_id: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(key_sealed.encode())
        return _sealing_key(cluster_secret).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], cert_id.encode())
    except Exception as exc:  # InvalidTag, bad base64, short input: all mean "not for us"
        raise TlsStateError(f"certificate {cert_id[:12]}: its key does not unseal with this cluster secret") from exc


@dataclass(frozen=True)
class CertificateEntry:
    id: str
    names: tuple[str, ...]
    chain_pem: str
    key_sealed: str
    not_after: str

    @classmethod
    def seal(cls, cluster_secret: str, names: tuple[str, ...], chain_pem: str, key_pem: bytes,
             not_after: str) -> CertificateEntry:
        cert_id = certificate_id(chain_pem)
        return cls(cert_id, tuple(names), chain_pem, seal_key(cluster_secret, key_pem, cert_id), not_after)

    def key_pem(self, cluster_secret: str) -> bytes:
        return unseal_key(cluster_secret, self.key_sealed, self.id)


@dataclass(frozen=True)
class TlsState:
    serial: int = 0
    challenges: Mapping[str, str] = field(default_factory=dict)
    certificates: tuple[CertificateEntry, ...] = ()

    def to_message(self) -> dict[str, Any]:
        return {"v": TLS_STATE_VERSION, "serial": self.serial, "challenges": dict(self.challenges),
                "certificates": [{"id": c.id, "names": list(c.names), "chain_pem": c.chain_pem,
                                  "key_sealed": c.key_sealed, "not_after": c.not_after}
                                 for c in self.certificates]}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> TlsState:
        if message.get("v") != TLS_STATE_VERSION:
            raise TlsStateError(f"TLS state version {message.get('v')!r} is not {TLS_STATE_VERSION}")
        serial, challenges, certificates = message.get("serial"), message.get("challenges"), message.get("certificates")
        if not isinstance(serial, int) or not isinstance(challenges, dict) or not isinstance(certificates, list):
            raise TlsStateError("TLS state needs an integer serial, a challenges object and a certificates list")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in challenges.items()):
            raise TlsStateError("challenges map tokens (strings) to key authorizations (strings)")
        entries = []
        for item in certificates:
            try:
                entry = CertificateEntry(str(item["id"]), tuple(str(n) for n in item["names"]), str(item["chain_pem"]),
                                         str(item["key_sealed"]), str(item["not_after"]))
            except (KeyError, TypeError) as exc:
                raise TlsStateError(f"certificate entry is missing {exc}") from None
            if entry.id != certificate_id(entry.chain_pem):
                raise TlsStateError(f"certificate {entry.id[:12]}: id is not the SHA-256 of its chain")
            entries.append(entry)
        return cls(serial, dict(challenges), tuple(entries))
