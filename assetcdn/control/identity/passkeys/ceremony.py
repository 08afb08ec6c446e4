"""WebAuthn ceremonies (py_webauthn): options for the browser, and the checks on what it sends back.

One operator, one user handle (derived from the session secret, so it says nothing about the
installation). Registration needs a session; authentication is public and, when the assertion
verifies, leads to a new session. Every check py_webauthn makes applies: challenge (single-use,
5 minutes, issued for this purpose), origin (one of `[dashboard] origins` on the relying party's domain), relying-party id hash,
user presence, signature, and the sign counter, which must grow when the authenticator keeps one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    decode_credential_public_key,
    options_to_json_dict,
)
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.labels import checked_label
from assetcdn.control.identity.passkeys.store import Passkey, PasskeyStore, PendingChallenges
from assetcdn.shared.errors import bad_request, utc_now_iso

log = logging.getLogger(__name__)

USER_NAME = "operator"
USER_DISPLAY_NAME = "assetcdn operator"
TIMEOUT_MS = 120_000            # how long the browser waits for the user (a hint); challenges live 5 minutes
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
        client_data = orjson.loads(base64url_to_bytes(client_data_text))
    except (ValueError, orjson.JSONDecodeError):
        raise PasskeyRejected("credential.response.clientDataJSON is not base64url-encoded JSON") from None
    challenge = client_data.get("challenge") if isinstance(client_data, dict) else None
    if not isinstance(challenge, str) or not 0 < len(challenge) <= 128:
        raise PasskeyRejected("clientDataJSON carries no challenge")
    return challenge


def _descriptor(passkey: Passkey) -> PublicKeyCredentialDescriptor:
    transports = [AuthenticatorTransport(t) for t in passkey.transports]
    return PublicKeyCredentialDescriptor(id=base64url_to_bytes(passkey.id), transports=transports or None)


@dataclass(frozen=True)
class PasskeyCeremonies:
    config: DashboardConfig
    store: PasskeyStore
    challenges: PendingChallenges
    user_id: bytes

    async def registration_options(self, ip: str) -> dict[str, Any]:
        existing = await self.store.list()
        options = generate_registration_options(
            rp_id=self.config.rp_id, rp_name=self.config.rp_name, user_id=self.user_id, user_name=USER_NAME,
            user_display_name=USER_DISPLAY_NAME, challenge=self.challenges.issue(REGISTER, ip), timeout=TIMEOUT_MS,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED,
                user_verification=UserVerificationRequirement.PREFERRED),
            exclude_credentials=[_descriptor(p) for p in existing])
        return options_to_json_dict(options)

    async def authentication_options(self, ip: str) -> dict[str, Any]:
        """Request options naming every registered passkey (none registered: an empty `allowCredentials`,
        and no assertion will verify)."""
        existing = await self.store.list()
        options = generate_authentication_options(
            rp_id=self.config.rp_id, challenge=self.challenges.issue(AUTHENTICATE, ip), timeout=TIMEOUT_MS,
            allow_credentials=[_descriptor(p) for p in existing],
            user_verification=UserVerificationRequirement.PREFERRED)
        return options_to_json_dict(options)

    async def _consume(self, credential: dict[str, Any], purpose: str) -> bytes:
        challenge = _client_challenge(credential)
        if not self.challenges.consume(challenge, purpose):
            raise PasskeyRejected("the challenge is unknown, already used or expired (it lives 5 minutes): "
                                  "start again with begin")
        return base64url_to_bytes(challenge)

    async def register(self, body: Any) -> Passkey:
        """Verify an attestation against its challenge and keep the new credential."""
        name = passkey_name(body.get("name") if isinstance(body, dict) else None)
        credential = _credential_of(body)
        challenge = await self._consume(credential, REGISTER)
        try:
            verified = verify_registration_response(
                credential=credential, expected_challenge=challenge, expected_rp_id=self.config.rp_id,
                expected_origin=list(self.config.passkey_origins), require_user_verification=False)
        except Exception as exc:  # py_webauthn raises many kinds (CBOR, ASN.1, OpenSSL) on a client's bytes
            log.info("passkey registration refused: %s", exc)
            raise PasskeyRejected(f"the attestation does not verify ({_short(exc)})") from None
        if len(verified.credential_id) > MAX_CREDENTIAL_ID_BYTES:
            raise PasskeyRejected("the credential id is longer than WebAuthn allows")
        algorithm = int(decode_credential_public_key(verified.credential_public_key).alg)
        passkey = Passkey(
            id=bytes_to_base64url(verified.credential_id), name=name, public_key=verified.credential_public_key,
            algorithm=algorithm, sign_count=verified.sign_count, transports=_transports(credential),
            device_type=verified.credential_device_type.value, backed_up=verified.credential_backed_up,
            aaguid=verified.aaguid, created_at=utc_now_iso(), last_used_at=None)
        await self.store.add(passkey)
        return passkey

    async def authenticate(self, body: Any) -> Passkey:
        """Verify an assertion; the passkey it came from (its counter moved on), or PasskeyRejected."""
        credential = _credential_of(body)
        challenge = await self._consume(credential, AUTHENTICATE)
        credential_id = credential.get("id")
        if not isinstance(credential_id, str) or len(credential_id) > 2 * MAX_CREDENTIAL_ID_BYTES:
            raise PasskeyRejected("credential.id is missing")
        stored = await self.store.get(credential_id)
        if stored is None:
            raise PasskeyRejected("no passkey with this credential id is registered (it may have been removed)")
        try:
            verified = verify_authentication_response(
                credential=credential, expected_challenge=challenge, expected_rp_id=self.config.rp_id,
                expected_origin=list(self.config.passkey_origins), credential_public_key=stored.public_key,
                credential_current_sign_count=stored.sign_count, require_user_verification=False)
        except Exception as exc:  # as above: whatever the library raises on a client's bytes is a refusal
            log.info("passkey sign-in refused for %s: %s", stored.id[:16], exc)
            raise PasskeyRejected(f"the assertion does not verify ({_short(exc)})") from None
        if not await self.store.record_use(stored, verified.new_sign_count):
            raise PasskeyRejected("another sign-in used this passkey's counter value first (a replay or a clone)")
        return stored


def _transports(credential: dict[str, Any]) -> tuple[str, ...]:
    """The transports the browser reported (hints for later `allowCredentials`), known values only."""
    reported = credential["response"].get("transports")
    if not isinstance(reported, list):
        return ()
    known = AuthenticatorTransport._value2member_map_
    return tuple(dict.fromkeys(t for t in reported if isinstance(t, str) and t in known))


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
