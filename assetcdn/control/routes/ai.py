"""/api/ai/alt-text, /api/ai/moderate, /api/ai/smart-crop (GET `?url=`, POST `{"url": ...}`) and the
reserved /api/ai/background-remove (always 501).

Access: AccountKey, AccessKey, or a Bearer token with `ai:read` (assetcdn/control/app.py's route table).
The asset is named by path or by a URL on this CDN's own hosts (assetcdn/control/ai/asset_ref.py) and read
from the control plane's own store; answers are replayed for 24 hours per asset version.
`source` is `ai` for a fresh answer and `cached` for a replay; `engine` and `model` say what answered.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from assetcdn.control.ai.asset_ref import OwnHosts, cdn_path_of_url, is_absolute
from assetcdn.control.ai.service import IMAGE_ANALYSIS
from assetcdn.control.app_keys import SETTINGS, public_url
from assetcdn.control.identity.auth import PRINCIPAL
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.request_body import read_json
from assetcdn.control.storage.service import EDGE_CONFIG
from assetcdn.shared.errors import ApiError, bad_request
from assetcdn.shared.host_url import host_url
from assetcdn.shared.middleware import json_response


async def _own_hosts(request: web.Request) -> OwnHosts:
    app = request.app
    settings = app[SETTINGS]
    origins = [public_url(app), host_url(settings.get('server', 'host'), settings.get('server', 'edge_port'))]
    origins += [edge.url for edge in app[REGISTRY].edges.values()]
    snapshot = await app[EDGE_CONFIG].snapshot()
    return OwnHosts.build(origins, snapshot.get("domains") or {}, snapshot.get("base_domain") or "",
                          snapshot.get("own_hosts") or ())


async def _asset_url(request: web.Request) -> Any:
    if request.method == "POST":
        body = await read_json(request)
        if not isinstance(body, dict):
            raise bad_request('The request body must be a JSON object such as {"url": "/<zone>/v1/logos/logo.png"}.',
                              code="InvalidJson")
        return body.get("url")
    return request.query.get("url")


async def _answer(request: web.Request, kind: str) -> web.Response:
    raw = await _asset_url(request)
    hosts = await _own_hosts(request) if isinstance(raw, str) and is_absolute(raw) else None
    cdn_path = cdn_path_of_url(raw, hosts)
    principal = request.get(PRINCIPAL)
    allow_private = principal is not None and principal.kind == "key"
    fields, cached = await request.app[IMAGE_ANALYSIS].analyse(kind, cdn_path, allow_private=allow_private)
    return json_response({"url": raw, **fields, "source": "cached" if cached else "ai"})


async def alt_text(request: web.Request) -> web.Response:
    return await _answer(request, "alt-text")


async def moderate(request: web.Request) -> web.Response:
    return await _answer(request, "moderate")


async def smart_crop(request: web.Request) -> web.Response:
    return await _answer(request, "smart-crop")


async def background_remove(request: web.Request) -> web.Response:
    raise ApiError(501, "NotImplemented", "Background removal needs an image segmentation (matting) model, and "
                   "none ships in a package this service can install and run offline. For subject-aware "
                   "framing use /api/ai/smart-crop with /api/transform?gravity=.",
                   details=[{"code": "BlockedByDependency", "target": "offline segmentation model",
                             "message": "No packaged matting model (U^2-Net or rembg class) is installed."}])
