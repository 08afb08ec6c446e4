"""Webhook signing secrets at rest: AES-256-GCM under a key derived (HKDF-SHA256) from the operator's
secret ``ASSETCDN_WEBHOOK_SECRET_KEY`` (generated into secrets.env at first start). The webhook's id is
the associated data, so a ciphertext copied onto another webhook's row does not decrypt."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_INFO = b"assetcdn webhook signing secrets v1"
NONCE_BYTES = 12


class SecretUnavailable(Exception):
    """A stored secret that cannot be decrypted (the key changed, or the row was tampered with)."""


class SecretBox:
    def __init__(self, key_material: str) -> None:
        if not key_material:
            raise ValueError("no key material")
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO).derive(key_material.encode())
        self._aead = AESGCM(key)

    def seal(self, secret: str, webhook_id: str) -> tuple[bytes, bytes]:
        """(nonce, ciphertext) of `secret`, bound to `webhook_id`."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce, self._aead.encrypt(nonce, secret.encode(), webhook_id.encode())

    def open(self, nonce: bytes, ciphertext: bytes, webhook_id: str) -> str:
        try:
            return self._aead.decrypt(nonce, ciphertext, webhook_id.encode()).decode()
        except (InvalidTag, ValueError):
            raise SecretUnavailable("the signing secret cannot be decrypted: ASSETCDN_WEBHOOK_SECRET_KEY is "
                                    "not the key it was stored with") from None
