"""A software WebAuthn authenticator for tests: a real EC P-256 key pair (cryptography), real CBOR
(cbor2), `packed` self-attestation or `none`, and assertions signed over authenticatorData and the
client data hash, exactly as a browser and an authenticator produce them together."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP, UV, AT = 0x01, 0x04, 0x40
ES256 = -7


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftAuthenticator:
    """One credential on one authenticator. `clone()` copies the key and the counter, as an attacker
    who extracted them would."""

    def __init__(self, origin: str = "http://localhost:8787", rp_id: str = "localhost") -> None:
        self.origin, self.rp_id = origin, rp_id
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(32)
        self.sign_count = 0
        self.aaguid = bytes(16)

    def clone(self) -> SoftAuthenticator:
        twin = copy.copy(self)
        twin.key = self.key  # the same private key: cryptography keys are not deep-copied
        return twin

    @property
    def id(self) -> str:
        return b64url(self.credential_id)

    def cose_public_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps({1: 2, 3: ES256, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                            -3: numbers.y.to_bytes(32, "big")})

    def _client_data(self, kind: str, challenge: str, origin: str | None) -> bytes:
        return json.dumps({"type": kind, "challenge": challenge, "origin": origin or self.origin,
                           "crossOrigin": False}).encode()

    def _auth_data(self, flags: int, counter: int, rp_id: str | None, attested: bytes = b"") -> bytes:
        rp_hash = hashlib.sha256((rp_id or self.rp_id).encode()).digest()
        return rp_hash + bytes([flags]) + struct.pack(">I", counter) + attested

    def _sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def create(self, options: dict[str, Any], *, attestation: str = "packed", origin: str | None = None,
               rp_id: str | None = None, challenge: str | None = None) -> dict[str, Any]:
        """The JSON form of navigator.credentials.create()'s answer to `options` (registration)."""
        client_data = self._client_data("webauthn.create", challenge or options["challenge"], origin)
        attested = self.aaguid + struct.pack(">H", len(self.credential_id)) + self.credential_id + self.cose_public_key()
        auth_data = self._auth_data(UP | UV | AT, self.sign_count, rp_id or options["rp"]["id"], attested)
        if attestation == "packed":
            statement: dict[str, Any] = {"alg": ES256,
                                         "sig": self._sign(auth_data + hashlib.sha256(client_data).digest())}
        else:
            statement = {}
        attestation_object = cbor2.dumps({"fmt": attestation, "attStmt": statement, "authData": auth_data})
        return {"id": self.id, "rawId": self.id, "type": "public-key",
                "response": {"clientDataJSON": b64url(client_data), "attestationObject": b64url(attestation_object),
                             "transports": ["internal"]},
                "clientExtensionResults": {}}

    def get(self, options: dict[str, Any], *, origin: str | None = None, rp_id: str | None = None,
            counter: int | None = None) -> dict[str, Any]:
        """The JSON form of navigator.credentials.get()'s answer (an assertion); the counter steps by one
        unless `counter` is given."""
        if counter is None:
            self.sign_count += 1
            counter = self.sign_count
        client_data = self._client_data("webauthn.get", options["challenge"], origin)
        auth_data = self._auth_data(UP | UV, counter, rp_id or options.get("rpId"))
        signature = self._sign(auth_data + hashlib.sha256(client_data).digest())
        return {"id": self.id, "rawId": self.id, "type": "public-key",
                "response": {"clientDataJSON": b64url(client_data), "authenticatorData": b64url(auth_data),
                             "signature": b64url(signature), "userHandle": None},
                "clientExtensionResults": {}}
