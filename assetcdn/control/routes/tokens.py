"""Auth plane: POST/GET/DELETE /api/tokens (AccountKey).

Token records show an 8-character ``prefix`` and a revoke answers 204 with no body, both as the
OpenAPI document describes them.
"""

from __future__ import annotations

from aiohttp import web

from assetcdn.control.identity.auth import PRINCIPAL
from assetcdn.control.identity.service import SESSION_SCOPES, TOKENS
from assetcdn.control.identity.tokens import parse_token_request
from assetcdn.control.request_body import read_json
from assetcdn.shared.errors import ApiError, bad_request, not_found
from assetcdn.shared.middleware import json_response


async def create_token(request: web.Request) -> web.Response:
    token_request = parse_token_request(await read_json(request))
    if request[PRINCIPAL].kind == "session":
        grantable: frozenset[str] = request.app[SESSION_SCOPES]
        beyond = [scope for scope in token_request.scopes if scope not in grantable]
        if beyond:
            raise ApiError(403, "ScopeNotGrantable",
                           f"A dashboard session cannot grant {', '.join(beyond)}: it may only grant what it "
                           f"may use itself ({', '.join(sorted(grantable))}). Mint such a token with the "
                           "AccountKey.", target="scopes", extra={"invalid": beyond})
    secret, record = await request.app[TOKENS].create(token_request)
    # Both shapes of the API reference: the flat {id, token, name, scopes} and the wrapped {HttpCode, Message, Token{...}}.
    return json_response({
        "HttpCode": 201, "Message": "Token created. Store the secret securely — it cannot be retrieved again.",
        "id": record["id"], "token": secret, "name": record["name"], "scopes": record["scopes"],
        "expiresAt": record["expiresAt"],
        "Token": {"id": record["id"], "name": record["name"], "secret": secret, "prefix": record["prefix"],
                  "scopes": record["scopes"], "createdAt": record["createdAt"], "expiresAt": record["expiresAt"]},
    }, status=201)


async def list_tokens(request: web.Request) -> web.Response:
    tokens = await request.app[TOKENS].list()
    return json_response({"Tokens": tokens, "tokens": tokens, "Count": len(tokens)})


async def revoke_token(request: web.Request) -> web.Response:
    token_id = request.query.get("id")
    if not token_id:
        raise bad_request("Missing required query parameter: id (the token id from GET /api/tokens).",
                          target="id", code="MissingId")
    if not await request.app[TOKENS].revoke(token_id):
        raise not_found(f"Token '{token_id}' does not exist or is already revoked.", target="id", code="TokenNotFound")
    return web.Response(status=204)
