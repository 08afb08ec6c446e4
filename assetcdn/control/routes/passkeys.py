"""Auth plane, passkeys: /api/passkeys (list, rename, remove), /api/passkeys/register/begin|complete
(the account key or a session, as list and remove) and /api/passkeys/auth/begin|complete (public; a verified assertion sets `cdn_session`).

Bodies are JSON of at most 64 KiB. Records show the credential id and metadata, never the public key.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from assetcdn.control.app_keys import DASHBOARD
from assetcdn.control.identity.login_attempts import Refused
from assetcdn.control.identity.passkeys.ceremony import PasskeyRejected, passkey_name
from assetcdn.control.identity.passkeys.store import (
    ALGORITHM_NAMES,
    MAX_PASSKEYS,
    DuplicatePasskey,
    TooManyPasskeys,
)
from assetcdn.control.identity.service import PASSKEYS, SIGN_IN
from assetcdn.control.identity.session import issuing_cookies
from assetcdn.control.identity.signin import Denied, Granted
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.request_body import read_json
from assetcdn.control.routes.dashboard_login import caller_of, too_many_attempts_headers
from assetcdn.shared.errors import ApiError, bad_request, conflict, not_found
from assetcdn.shared.middleware import json_response


async def register_begin(request: web.Request) -> web.Response:
    options = await request.app[PASSKEYS].registration_options(request_ip(request))
    return json_response(options, headers={"Cache-Control": "no-store"})


async def register_complete(request: web.Request) -> web.Response:
    body = await read_json(request)
    try:
        passkey = await request.app[PASSKEYS].register(body)
    except PasskeyRejected as rejected:
        raise ApiError(400, "InvalidAttestation", f"The passkey was not registered: {rejected.reason}.") from None
    except TooManyPasskeys:
        raise ApiError(400, "TooManyPasskeys", f"Maximum {MAX_PASSKEYS} passkeys allowed. Remove one first.") from None
    except DuplicatePasskey:
        raise conflict("This passkey is already registered.", code="PasskeyExists") from None
    return json_response({"ok": True, "message": "Passkey registered.", **passkey.public()}, status=201)


async def auth_begin(request: web.Request) -> web.Response:
    options = await request.app[PASSKEYS].authentication_options(request_ip(request))
    return json_response(options, headers={"Cache-Control": "no-store"})


async def auth_complete(request: web.Request) -> web.Response:
    body = await read_json(request)
    config = request.app[DASHBOARD]
    outcome = await request.app[SIGN_IN].with_passkey(caller_of(request), body)
    if isinstance(outcome, Refused):
        raise ApiError(429, "TooManyRequests", "Too many failed sign-ins from your address. Retry after the "
                       "Retry-After delay.", headers=too_many_attempts_headers(outcome, config.login_max_failures))
    if isinstance(outcome, Denied):
        raise ApiError(401, "Unauthorized", f"Passkey sign-in failed: {outcome.reason}.")
    assert isinstance(outcome, Granted) and outcome.passkey is not None
    response = json_response({"ok": True, "verification": ALGORITHM_NAMES.get(outcome.passkey.algorithm, "unknown"),
                              "passkey": {"id": outcome.passkey.id, "name": outcome.passkey.name}},
                             headers={"Cache-Control": "no-store"})
    for cookie in issuing_cookies(outcome.cookie_value, ttl=config.session_ttl_s, secure=config.secure_cookies):
        response.headers.add("Set-Cookie", cookie)
    return response


async def list_passkeys(request: web.Request) -> web.Response:
    passkeys = await request.app[PASSKEYS].store.list()
    return json_response({"passkeys": [p.public() for p in passkeys]})


def _passkey_id(request: web.Request) -> str:
    passkey_id = request.query.get("id")
    if not passkey_id:
        raise bad_request("Missing required query parameter: id (a passkey id from GET /api/passkeys).",
                          target="id", code="MissingId")
    return passkey_id


async def delete_passkey(request: web.Request) -> web.Response:
    passkey_id = _passkey_id(request)
    if not await request.app[PASSKEYS].store.delete(passkey_id):
        raise not_found(f"No passkey with id '{passkey_id[:128]}'.", target="id", code="PasskeyNotFound")
    return web.Response(status=204)


async def rename_passkey(request: web.Request) -> web.Response:
    passkey_id = _passkey_id(request)
    body: Any = await read_json(request)
    if not isinstance(body, dict) or "name" not in body:
        raise bad_request("The body must be a JSON object with 'name'.", target="name", code="InvalidBody")
    if not isinstance(body["name"], str) or not body["name"].strip():
        raise bad_request("'name' must be a non-empty string.", target="name", code="InvalidName")
    renamed = await request.app[PASSKEYS].store.rename(passkey_id, passkey_name(body["name"]))
    if renamed is None:
        raise not_found(f"No passkey with id '{passkey_id[:128]}'.", target="id", code="PasskeyNotFound")
    return json_response(renamed.public())
