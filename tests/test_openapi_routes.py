"""The served OpenAPI document (assetcdn/shared/openapi.json) against the route tables: every route of control and of
the edge is an operation there and every operation a route, with the credentials the route accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from assetcdn.control.app import ROUTES as CONTROL_ROUTES
from assetcdn.control.app import create_app
from assetcdn.control.identity.auth import ROUTE_ACCESS, Access, Key
from assetcdn.edge import app as edge_app
from assetcdn.edge.app import CLUSTER_ROUTES, PUBLIC_ROUTES, EdgeIdentity
from assetcdn.edge.proxy import forward_to_control
from assetcdn.shared.cluster import PREFIX
from assetcdn.shared.config import load_settings
from assetcdn.shared.middleware import no_such_method
from assetcdn.shared.openapi import document
from tests.support.control import SECRETS
from tests.support.openapi import METHODS, documented

SCHEME_OF_KEY = {Key.ACCESS: "AccessKey", Key.ACCOUNT: "AccountKey", Key.PURGE: "PurgeKey",
                 Key.ANALYTICS: "AnalyticsKey"}
# Public routes that check a credential themselves (the metrics key), not through the route table.
SELF_CHECKED = {(method, "/metrics"): [{"MetricsKey": []}] for method in ("get", "head")}


def template(path: str) -> str:
    """An aiohttp route path as an OpenAPI path template: `{path:[\\s\\S]*}` -> `{path}`."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


def routed() -> dict[tuple[str, str], Access | None]:
    """(method, path template) -> what the route accepts (None: public), for every public route of either
    process; the edge's forwarder (any other /api path goes to control), its 405s for the other methods of its
    own /api paths and the internal cluster protocol are no operations of their own."""
    found: dict[tuple[str, str], Access | None] = {}
    for route in CONTROL_ROUTES:
        if not route.path.startswith(PREFIX + "/"):
            for method in with_head(route.method):
                found.setdefault((method, template(route.path)), route.access)
    for edge_route in PUBLIC_ROUTES:
        # (a 405 of a path a page reads from another origin: `no_such_method` with its CORS fields, cross_origin's)
        if edge_route.handler is not forward_to_control and \
                getattr(edge_route.handler, "__wrapped__", edge_route.handler) is not no_such_method:
            # A route for any method (a pull zone's paths) is one operation per method OpenAPI can name.
            methods = [m for m in METHODS if m not in ("get", "head")] if edge_route.method == "*" else \
                with_head(edge_route.method)
            for method in methods:
                found.setdefault((method, template(edge_route.path)), None)
    return found


def with_head(method: str) -> list[str]:
    """A route's method and, for a GET, the HEAD every GET route answers too (test_every_get_route_answers_head)."""
    return [method.lower(), "head"] if method == "GET" else [method.lower()]


def public_apps(tmp_path: Path) -> dict[str, web.Application]:
    """Control's app and an edge worker's public app as each process builds them (not started)."""
    settings = load_settings(environ={})
    identity = EdgeIdentity(name="edge-t", worker=0, control_url="http://127.0.0.1:1", cache_dir=tmp_path / "edge",
                            advertise_host="127.0.0.1")
    return {"control": create_app(settings, SECRETS, tmp_path / "data"),
            "edge": edge_app.create_app(settings, SECRETS, identity)}


def test_every_get_route_answers_head(tmp_path: Path) -> None:
    """RFC 9110 9.3.2: HEAD is allowed wherever GET is (uptime monitors send it). Every GET route either process
    registers (the internal cluster protocol aside) has a HEAD route beside it, with the same credentials on control."""
    for name, app in public_apps(tmp_path).items():
        routes: dict[str, dict[str, web.AbstractRoute]] = {}
        for route in app.router.routes():
            if route.resource is not None and not route.resource.canonical.startswith(PREFIX + "/"):
                routes.setdefault(route.resource.canonical, {}).setdefault(route.method, route)
        without_head = sorted(path for path, methods in routes.items() if "GET" in methods and "HEAD" not in methods)
        assert not without_head, f"{name}: GET routes that answer HEAD with 404 or 405: {without_head}"
        if name == "control":
            access = app[ROUTE_ACCESS]
            for path, methods in routes.items():
                if "GET" in methods:
                    assert access.get(methods["HEAD"]) == access.get(methods["GET"]), path


def expected_security(access: Access) -> list[dict[str, list[str]]]:
    requirements: list[dict[str, list[str]]] = [{SCHEME_OF_KEY[key]: []} for key in access.keys]
    if access.scope:
        requirements.append({"BearerToken": [access.scope]})
    if access.session:
        requirements.append({"SessionCookie": []})
    return requirements


def _canonical(requirements: list[dict[str, list[str]]]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in requirements)


def test_every_route_is_documented_and_every_operation_is_routed() -> None:
    routes, operations = routed(), documented()
    undocumented = sorted(set(routes) - set(operations))
    unrouted = sorted(set(operations) - set(routes))
    assert not undocumented, f"routes without an operation in assetcdn/shared/openapi.json: {undocumented}"
    assert not unrouted, f"operations in assetcdn/shared/openapi.json that no route serves: {unrouted}"


def test_cluster_routes_stay_out_of_the_public_document() -> None:
    internal = {template(r.path) for r in CONTROL_ROUTES if r.path.startswith(PREFIX + "/")}
    internal |= {template(r.path) for r in CLUSTER_ROUTES}
    assert internal and not internal & set(document()["paths"])


@pytest.mark.parametrize(("method", "path"), sorted(routed()))
def test_each_operation_names_the_credentials_its_route_accepts(method: str, path: str) -> None:
    access = routed()[(method, path)]
    operation = documented()[(method, path)]
    security = operation.get("security", document().get("security", []))
    if access is not None:
        assert _canonical(security) == _canonical(expected_security(access)), (method, path, security)
    elif (method, path) in SELF_CHECKED:
        assert security == SELF_CHECKED[(method, path)]
    else:  # public: no credential required (an optional one, such as the metrics key for deep health, may be listed)
        assert security == [] or {} in security, (method, path, security)


def test_the_document_is_openapi_3_1_with_unique_operation_ids_and_resolvable_references() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    ids = [op["operationId"] for op in documented().values()]
    assert len(ids) == len(set(ids)), "operationId must be unique"
    text = repr(doc)
    for name in set(re.findall(r"#/components/(\w+)/(\w+)", text)):
        assert name[1] in doc["components"][name[0]], f"unresolved reference #/components/{name[0]}/{name[1]}"
    for (method, path), operation in documented().items():
        declared = set(re.findall(r"\{(\w+)\}", path))
        params = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == params, (method, path, "path parameters must match the template")
        assert "default" in operation["responses"], (method, path, "errors are documented by `default`")


async def test_control_serves_the_document_and_the_reference_page(aiohttp_client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    control: TestClient = await aiohttp_client(create_app(load_settings(environ={}), SECRETS, tmp_path / "data"))
    resp = await control.get("/api/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert (await resp.json())["paths"].keys() == document()["paths"].keys()
    resp = await control.get("/api/docs")
    page = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    assert "sandbox" in resp.headers["Content-Security-Policy"]
    for operation in documented().values():
        assert f'id="{operation["operationId"]}"' in page


@pytest.mark.parametrize(("method", "path"), [("get", "/api/storage/{path}"), ("get", "/{path}"),
                                               ("get", "/api/signed")])
def test_stored_bytes_are_never_promised_to_parse(method: str, path: str) -> None:
    """A stored `.json` file is served as `application/json` with whatever bytes were uploaded (found by the
    fuzzer: a PNG stored as index.json), so an answer carrying stored bytes names no schema at all (an
    empty schema still invites a client to parse the body as its content type says)."""
    for status, response in documented()[(method, path)]["responses"].items():
        if status.startswith("2"):
            assert response["content"] == {"*/*": {}}, (method, path, status)
