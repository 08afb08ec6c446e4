"""The API's own description: `GET /api/openapi.json` (OpenAPI 3.1, kept in assetcdn/shared/openapi.json beside
this module) and `GET /api/docs` (the same as one self-contained HTML page: no scripts, no external
loads). Both processes serve both, so the reference is there even while control is down.

The document is maintained by hand next to the route tables (assetcdn/control/app.py, assetcdn/edge/app.py);
tests/test_openapi_routes.py fails when a route has no operation there, or an operation no route.
"""

from __future__ import annotations

import html
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson
from aiohttp import web

DOCUMENT = "openapi.json"
METHOD_ORDER = ("get", "head", "post", "put", "delete", "options", "patch")
CACHE_CONTROL = "public, max-age=300"


@lru_cache(maxsize=1)
def document_bytes() -> bytes:
    return resources.files("assetcdn.shared").joinpath(DOCUMENT).read_bytes()


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(document_bytes())
    return loaded


async def openapi_document(request: web.Request) -> web.Response:
    return web.Response(body=document_bytes(), content_type="application/json",
                        headers={"Cache-Control": CACHE_CONTROL})


async def api_docs(request: web.Request) -> web.Response:
    return web.Response(body=docs_page(), content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": CACHE_CONTROL})


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)


def _schema_text(schema: dict[str, Any] | None) -> str:
    """A short description of a schema: its $ref name, type and listed values."""
    if not schema:
        return "any"
    if "$ref" in schema:
        ref: str = schema["$ref"]
        return ref.rsplit("/", 1)[-1]
    kind = schema.get("type", "any")
    kind = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array":
        return f"array of {_schema_text(schema.get('items'))}"
    if "enum" in schema:
        return f"{kind}: " + ", ".join(str(v) for v in schema["enum"])
    return kind


def _security_text(operation: dict[str, Any], default: list[dict[str, list[str]]]) -> str:
    requirements = operation.get("security", default)
    if not requirements:
        return "none (public)"
    options = []
    for requirement in requirements:
        if not requirement:
            options.append("none")
        for name, roles in requirement.items():
            options.append(name + (f" ({', '.join(roles)})" if roles else ""))
    return " or ".join(options)


def _operation_html(path: str, method: str, operation: dict[str, Any], default_security: list[Any]) -> str:
    anchor = _text(operation.get("operationId") or f"{method}-{path}")
    parts = [f'<section id="{anchor}"><h3><span class="m {method}">{method.upper()}</span> <code>{_text(path)}'
             f'</code></h3><p class="s">{_text(operation.get("summary", ""))}</p>',
             f"<p>{_text(operation.get('description', ''))}</p>",
             f"<p><b>Credentials:</b> {_text(_security_text(operation, default_security))}</p>"]
    params = operation.get("parameters") or []
    if params:
        rows = "".join(
            f"<tr><td><code>{_text(p['name'])}</code></td><td>{_text(p['in'])}</td>"
            f"<td>{'yes' if p.get('required') else ''}</td><td>{_text(_schema_text(p.get('schema')))}</td>"
            f"<td>{_text(p.get('description', ''))}</td></tr>" for p in params)
        parts.append("<table><tr><th>Parameter</th><th>In</th><th>Required</th><th>Type</th><th>Meaning</th></tr>"
                     f"{rows}</table>")
    body = operation.get("requestBody")
    if body:
        kinds = ", ".join(f"{_text(kind)} ({_text(_schema_text(media.get('schema')))})"
                          for kind, media in body.get("content", {}).items())
        parts.append(f"<p><b>Body:</b> {kinds}</p>")
    response_rows = []
    for status, response in operation.get("responses", {}).items():
        name = response["$ref"].rsplit("/", 1)[-1] if "$ref" in response else ""
        description = response.get("description", f"{name} envelope")
        kinds = ", ".join(f"{_text(kind)} ({_text(_schema_text(media.get('schema')))})"
                          for kind, media in response.get("content", {}).items())
        response_rows.append(f"<tr><td>{_text(status)}</td><td>{_text(description)}</td><td>{kinds}</td></tr>")
    parts.append("<table><tr><th>Status</th><th>Meaning</th><th>Body</th></tr>" + "".join(response_rows) + "</table>")
    return "".join(parts) + "</section>"


@lru_cache(maxsize=1)
def docs_page() -> bytes:
    doc = document()
    info = doc["info"]
    default_security = doc.get("security", [])
    toc, sections = [], []
    for path, operations in doc["paths"].items():
        for method in sorted(operations, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99):
            operation = operations[method]
            anchor = _text(operation.get("operationId") or f"{method}-{path}")
            toc.append(f'<li><a href="#{anchor}"><span class="m {method}">{method.upper()}</span> '
                       f"{_text(path)}</a></li>")
            sections.append(_operation_html(path, method, operation, default_security))
    schemes = "".join(f"<tr><td><code>{_text(name)}</code></td><td>{_text(s.get('type'))}"
                      f"{' ' + _text(s.get('in')) + ' ' + _text(s.get('name')) if s.get('in') else ''}</td>"
                      f"<td>{_text(s.get('description', ''))}</td></tr>"
                      for name, s in doc["components"]["securitySchemes"].items())
    description = "".join(f"<p>{_text(paragraph)}</p>" for paragraph in info.get("description", "").split("\n\n"))
    page = (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_text(info['title'])} API reference</title>"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>"
        "body{font:15px/1.5 system-ui,sans-serif;margin:0 auto;max-width:70rem;padding:1rem 2rem;color:#222}"
        "code{font:13px ui-monospace,monospace}table{border-collapse:collapse;margin:.5rem 0}"
        "td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}"
        "section{border-top:1px solid #ddd;padding:.5rem 0}.s{font-weight:600}"
        ".m{display:inline-block;min-width:4.5em;font:bold 12px ui-monospace,monospace}"
        ".get{color:#0a6}.post{color:#06c}.put{color:#a60}.delete{color:#c22}.head,.options{color:#666}"
        "ul{columns:2;list-style:none;padding:0}a{text-decoration:none}</style></head><body>"
        f"<h1>{_text(info['title'])} API reference</h1><p>{_text(info.get('summary', ''))}</p>{description}"
        "<p>Machine-readable: <a href=\"/api/openapi.json\">/api/openapi.json</a> (OpenAPI "
        f"{_text(doc['openapi'])}).</p><h2>Credentials</h2><table><tr><th>Scheme</th><th>Sent as</th>"
        f"<th>What it is</th></tr>{schemes}</table><h2>Endpoints</h2><ul>{''.join(toc)}</ul>"
        f"{''.join(sections)}</body></html>")
    return page.encode()
