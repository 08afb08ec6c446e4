"""WebAuthn ceremonies (py_webauthn): options for the browser, and the checks on what it sends back.

One operator, one user handle (derived from the session secret, so it says nothing about the
installation). Registration needs a session; authentication is public and, when the assertion
verifies, leads to a new session. Every check py_webauthn makes applies: challenge (single-use,
5 minutes, issued for this purpose), origin (one of `[dashboard] origins` on the relying party's domain), relying-party id hash,
user presence, signature, and the sign counter, which must grow when the authenticator keeps one.
The calls into py_webauthn are in `verification`, loaded at the first ceremony.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

import orjson

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.labels import checked_label
from assetcdn.control.identity.passkeys.store import (
    Passkey,
    PasskeyStore,
    PendingChallenges,
    base64url_decode,
)
from assetcdn.shared.errors import bad_request

log = logging.getLogger(__name__)

MAX_CREDENTIAL_ID_BYTES = 1023  # WebAuthn's upper bound for a credential id
DEFAULT_NAME = "Passkey"
REGISTER, AUTHENTICATE = "register", "auth"


class PasskeyRejected(Exception):
    """An assertion or attestation that does not verify; `reason` is safe to show and to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def user_handle(session_secret: str) -> bytes:
    return hmac.new(session_secret.encode(), b"assetcdn passkey user handle", hashlib.sha256).digest()


def passkey_name(raw: Any) -> str:
    """A label: 1-100 printable characters (a missing one becomes 'Passkey')."""
    if raw is None:
        return DEFAULT_NAME
    if not isinstance(raw, str):
        raise bad_request("'name' must be a string: a label for the passkey, e.g. \"MacBook Pro\".",
                          target="name", code="InvalidName")
    return checked_label(raw) or DEFAULT_NAME


def _credential_of(body: Any) -> dict[str, Any]:
    """The credential object: `{"credential": {...}}` as the API documents it, or the bare credential."""
    if isinstance(body, dict) and isinstance(body.get("credential"), dict):
        return body["credential"]
    if isinstance(body, dict) and "response" in body and "id" in body:
        return body
    raise PasskeyRejected("the body must be a JSON object with 'credential': the PublicKeyCredential the "
                          "browser returned (its JSON form)")


def _client_challenge(credential: dict[str, Any]) -> str:
    response = credential.get("response")
    client_data_text = response.get("clientDataJSON") if isinstance(response, dict) else None
    if not isinstance(client_data_text, str) or len(client_data_text) > 16_384:
        raise PasskeyRejected("credential.response.clientDataJSON is missing")
    try:
        client_data = orjson.loads(base64url_decode(client_data_text))
    except (ValueError, orjson.JSONDecodeError):
        raise PasskeyRejected("credential.response.clientDataJSON is not base64url-encoded JSON") from None
    challenge = client_data.get("challenge") if isinstance(client_data, dict) else None
    if not isinstance(challenge, str) or not 0 < len(challenge) <= 128:
        raise PasskeyRejected("clientDataJSON carries no challenge")
    return challenge


@dataclass(frozen=True)
class PasskeyCeremonies:
    config: DashboardConfig
    store: PasskeyStore
    challenges: PendingChallenges
    user_id: bytes

    async def registration_options(self, ip: str) -> dict[str, Any]:
        from assetcdn.control.identity.passkeys import verification  # noqa: PLC0415 (at the first ceremony)

        existing = await self.store.list()
        return verification.registration_options(self.config, self.user_id, self.challenges.issue(REGISTER, ip),
                                                 existing)

    async def authentication_options(self, ip: str) -> dict[str, Any]:
        """Request options naming every registered passkey (none registered: an empty `allowCredentials`,
        and no assertion will verify)."""
        from assetcdn.control.identity.passkeys import verification  # noqa: PLC0415 (as above)

        existing = await self.store.list()
        return verification.authentication_options(self.config, self.challenges.issue(AUTHENTICATE, ip), existing)

    async def _consume(self, credential: dict[str, Any], purpose: str) -> bytes:
        challenge = _client_challenge(credential)
        if not self.challenges.consume(challenge, purpose):
            raise PasskeyRejected("the challenge is unknown, already used or expired (it lives 5 minutes): "
                                  "start again with begin")
        return base64url_decode(challenge)

    async def register(self, body: Any) -> Passkey:
        """Verify an attestation against its challenge and keep the new credential."""
        from assetcdn.control.identity.passkeys import verification  # noqa: PLC0415 (as above)

        name = passkey_name(body.get("name") if isinstance(body, dict) else None)
        credential = _credential_of(body)
        challenge = await self._consume(credential, REGISTER)
        passkey = verification.registered_passkey(self.config, credential, challenge, name, MAX_CREDENTIAL_ID_BYTES)
        if isinstance(passkey, str):
            log.info("passkey registration refused: %s", passkey)
            raise PasskeyRejected(passkey)
        await self.store.add(passkey)
        return passkey

    async def authenticate(self, body: Any) -> Passkey:
        """Verify an assertion; the passkey it came from (its counter moved on), or PasskeyRejected."""
        from assetcdn.control.identity.passkeys import verification  # noqa: PLC0415 (as above)

        credential = _credential_of(body)
        challenge = await self._consume(credential, AUTHENTICATE)
        credential_id = credential.get("id")
        if not isinstance(credential_id, str) or len(credential_id) > 2 * MAX_CREDENTIAL_ID_BYTES:
            raise PasskeyRejected("credential.id is missing")
        stored = await self.store.get(credential_id)
        if stored is None:
            raise PasskeyRejected("no passkey with this credential id is registered (it may have been removed)")
        sign_count = verification.asserted_sign_count(self.config, credential, challenge, stored)
        if isinstance(sign_count, str):
            log.info("passkey sign-in refused for %s: %s", stored.id[:16], sign_count)
            raise PasskeyRejected(sign_count)
        if not await self.store.record_use(stored, sign_count):
            raise PasskeyRejected("another sign-in used this passkey's counter value first (a replay or a clone)")
        return stored
