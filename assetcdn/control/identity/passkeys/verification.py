"""Every call into py_webauthn: the options the browser is sent, and the verification of what it sends back.

Loaded by `ceremony` at the first passkey ceremony, not when control starts: py_webauthn brings its ASN.1,
CBOR and attestation-format modules, which most starts of control never use.
"""

from __future__ import annotations

from typing import Any

from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import decode_credential_public_key, options_to_json_dict
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.passkeys.store import Passkey, base64url_decode, base64url_encode
from assetcdn.shared.timestamps import utc_now_iso

USER_NAME = "operator"
USER_DISPLAY_NAME = "assetcdn operator"
TIMEOUT_MS = 120_000  # how long the browser waits for the user (a hint); challenges live 5 minutes


def _descriptor(passkey: Passkey) -> PublicKeyCredentialDescriptor:
    transports = [AuthenticatorTransport(t) for t in passkey.transports]
    return PublicKeyCredentialDescriptor(id=base64url_decode(passkey.id), transports=transports or None)


def registration_options(config: DashboardConfig, user_id: bytes, challenge: bytes,
                         existing: list[Passkey]) -> dict[str, Any]:
    options = generate_registration_options(
        rp_id=config.rp_id, rp_name=config.rp_name, user_id=user_id, user_name=USER_NAME,
        user_display_name=USER_DISPLAY_NAME, challenge=challenge, timeout=TIMEOUT_MS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED, user_verification=UserVerificationRequirement.PREFERRED),
        exclude_credentials=[_descriptor(p) for p in existing])
    return options_to_json_dict(options)


def authentication_options(config: DashboardConfig, challenge: bytes, existing: list[Passkey]) -> dict[str, Any]:
    options = generate_authentication_options(
        rp_id=config.rp_id, challenge=challenge, timeout=TIMEOUT_MS,
        allow_credentials=[_descriptor(p) for p in existing], user_verification=UserVerificationRequirement.PREFERRED)
    return options_to_json_dict(options)


def registered_passkey(config: DashboardConfig, credential: dict[str, Any], challenge: bytes, name: str,
                       max_credential_id_bytes: int) -> Passkey | str:
    """The passkey an attestation registers, or why it is refused (whatever py_webauthn raises on a client's
    bytes, CBOR, ASN.1 or OpenSSL errors among them, is a refusal)."""
    try:
        verified = verify_registration_response(
            credential=credential, expected_challenge=challenge, expected_rp_id=config.rp_id,
            expected_origin=list(config.passkey_origins), require_user_verification=False)
    except Exception as exc:  # py_webauthn raises many kinds (CBOR, ASN.1, OpenSSL) on a client's bytes
        return f"the attestation does not verify ({_short(exc)})"
    if len(verified.credential_id) > max_credential_id_bytes:
        return "the credential id is longer than WebAuthn allows"
    algorithm = int(decode_credential_public_key(verified.credential_public_key).alg)
    return Passkey(
        id=base64url_encode(verified.credential_id), name=name, public_key=verified.credential_public_key,
        algorithm=algorithm, sign_count=verified.sign_count, transports=_transports(credential),
        device_type=verified.credential_device_type.value, backed_up=verified.credential_backed_up,
        aaguid=verified.aaguid, created_at=utc_now_iso(), last_used_at=None)


def asserted_sign_count(config: DashboardConfig, credential: dict[str, Any], challenge: bytes,
                        stored: Passkey) -> int | str:
    """The authenticator's new sign counter when the assertion verifies against `stored`, or why not."""
    try:
        verified = verify_authentication_response(
            credential=credential, expected_challenge=challenge, expected_rp_id=config.rp_id,
            expected_origin=list(config.passkey_origins), credential_public_key=stored.public_key,
            credential_current_sign_count=stored.sign_count, require_user_verification=False)
    except Exception as exc:  # as above: whatever the library raises on a client's bytes is a refusal
        return f"the assertion does not verify ({_short(exc)})"
    return int(verified.new_sign_count)


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
