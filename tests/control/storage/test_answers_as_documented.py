"""The storage, catalog and core routes' answers against /api/openapi.json: each answer holds to its operation's
schema, and every field answered is one the schema names as required, so a client made from the document knows
which fields it always gets (and their types) for each of them."""

from __future__ import annotations

import base64
from typing import Any

import jsonschema_rs
from aiohttp.test_utils import TestClient

from tests.support.control import ACCESS, ACCOUNT

JSON = "application/json"


def documented_schema(reference: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    return reference["paths"][path][method]["responses"][str(status)]["content"][JSON]["schema"]


def named_fields(reference: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(required, properties) of an object schema, through $ref and allOf."""
    if "$ref" in schema:
        return named_fields(reference, reference["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    required, properties = set(schema.get("required", ())), set(schema.get("properties", ()))
    for part in schema.get("allOf", ()):
        more_required, more_properties = named_fields(reference, part)
        required |= more_required
        properties |= more_properties
    return required, properties


def holds(reference: dict[str, Any], schema: dict[str, Any], answer: Any) -> None:
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": reference["components"]},
                                                   validate_formats=True)
    assert [error.message for error in validator.iter_errors(answer)] == []


def all_required(reference: dict[str, Any], schema: dict[str, Any], answer: dict[str, Any]) -> None:
    required, properties = named_fields(reference, schema)
    assert set(answer) == required, sorted(set(answer) ^ required)
    assert required <= properties


async def answer(control: TestClient, method: str, url: str, status: int, **kwargs: Any) -> Any:
    resp = await control.request(method, url, **kwargs)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_storage_answers_name_every_field_they_carry(control: TestClient, zone: str) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    storage = "/api/storage/{path}"
    upload = await answer(control, "PUT", f"/api/storage/{zone}/v1/logos/a.svg", 201, data=b"<svg/>", headers=ACCESS)
    batch = await answer(control, "POST", "/api/storage/batch", 201, headers=ACCESS, json={"files": [
        {"path": f"{zone}/v1/icons/b.txt", "content": base64.b64encode(b"b").decode()}]})
    listing = await answer(control, "GET", f"/api/storage/{zone}/v1/", 200, headers=ACCESS)
    files = await answer(control, "GET", f"/api/storage/{zone}/v1/logos/", 200, headers=ACCESS)
    deleted = await answer(control, "DELETE", f"/api/storage/{zone}/v1/logos/a.svg", 200, headers=ACCESS)
    for schema, body in ((documented_schema(reference, storage, "put", 201), upload),
                         (documented_schema(reference, "/api/storage/batch", "post", 201), batch),
                         (documented_schema(reference, storage, "delete", 200), deleted)):
        holds(reference, schema, body)
        all_required(reference, schema, body)
    entry = {"$ref": "#/components/schemas/StorageObject"}
    for item in (*listing, *files):  # directories and a file
        holds(reference, entry, item)
        all_required(reference, entry, item)
    assert {item["IsDirectory"] for item in (*listing, *files)} == {True, False}


async def test_catalog_answers_name_every_field_they_carry(control: TestClient, zone: str) -> None:
    await answer(control, "PUT", f"/api/storage/{zone}/v1/logos/a.svg", 201, data=b"<svg/>", headers=ACCESS)
    reference = await (await control.get("/api/openapi.json")).json()
    listed = await answer(control, "GET", "/api/assets?project=" + zone, 200, headers=ACCESS)
    schema = documented_schema(reference, "/api/assets", "get", 200)
    holds(reference, schema, listed)
    all_required(reference, schema, listed)
    fields = reference["components"]["schemas"]["AssetList"]["properties"]
    for name, body in (("Pagination", listed["Pagination"]), ("Filters", listed["Filters"]),
                       ("Data", listed["Data"][0])):
        part = fields[name]["items"] if name == "Data" else fields[name]
        all_required(reference, part, body)
    metadata = await answer(control, "GET", f"/api/assets/metadata?path={zone}/v1/logos/a.svg", 200, headers=ACCESS)
    schema = documented_schema(reference, "/api/assets/metadata", "get", 200)
    holds(reference, schema, metadata)
    all_required(reference, schema, metadata)


async def test_core_answers_name_every_field_they_carry(control: TestClient) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    created = await answer(control, "POST", "/api/core/zones", 201, json={"Name": "documented"}, headers=ACCOUNT)
    domain = await answer(control, "POST", "/api/core/zones/documented/domains", 201,
                          json={"Hostname": "img.example.com"}, headers=ACCOUNT)
    domains = await answer(control, "GET", "/api/core/zones/documented/domains", 200, headers=ACCOUNT)
    rules = await answer(control, "GET", "/api/core/rules", 200, headers=ACCOUNT)
    changed = await answer(control, "POST", "/api/core/rules", 200, headers=ACCOUNT,
                           json={"File": "_headers", "Content": "/documented/*\n  X-Documented: 1\n"})
    deleted = await answer(control, "DELETE", "/api/core/zones/documented", 200, headers=ACCOUNT)
    for path, method, status, body in (("/api/core/zones", "post", 201, created),
                                       ("/api/core/zones/{id}/domains", "post", 201, domain),
                                       ("/api/core/zones/{id}/domains", "get", 200, domains),
                                       ("/api/core/rules", "get", 200, rules),
                                       ("/api/core/rules", "post", 200, changed),
                                       ("/api/core/zones/{id}", "delete", 200, deleted)):
        schema = documented_schema(reference, path, method, status)
        holds(reference, schema, body)
        all_required(reference, schema, body)
    listed = {"$ref": "#/components/schemas/Domain"}
    all_required(reference, listed, domains["Domains"][0])


async def test_the_audit_log_answer_names_every_field_it_carries(control: TestClient, zone: str) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    logged = await answer(control, "GET", "/api/core/audit-logs?action=zone", 200, headers=ACCOUNT)
    assert logged["Entries"], logged  # the zone's creation
    schema = documented_schema(reference, "/api/core/audit-logs", "get", 200)
    holds(reference, schema, logged)
    all_required(reference, schema, logged)
    fields = schema["properties"]
    all_required(reference, fields["Period"], logged["Period"])
    for entry in logged["Entries"]:
        all_required(reference, fields["Entries"]["items"], entry)


async def test_the_error_envelope_names_every_field_it_carries(control: TestClient, zone: str) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    envelope = {"$ref": "#/components/schemas/StandardError"}
    missing = await answer(control, "GET", f"/api/storage/{zone}/v1/logos/none.svg", 404, headers=ACCESS)
    refused = await answer(control, "POST", "/api/core/zones", 400, json={"Name": "A"}, headers=ACCOUNT)
    for body in (missing, refused):
        holds(reference, envelope, body)
        all_required(reference, envelope, body)
        all_required(reference, reference["components"]["schemas"]["StandardError"]["properties"]["error"],
                      body["error"])


def edge_status_descriptions(node: Any, where: str = "") -> dict[str, str]:
    """Every `EdgeStatus` field the document describes, by where it is."""
    found: dict[str, str] = {}
    if isinstance(node, dict):
        field = node.get("properties", {}).get("EdgeStatus")
        if isinstance(field, dict):
            found[where] = field.get("description", "")
        for key, value in node.items():
            found.update(edge_status_descriptions(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.update(edge_status_descriptions(value, f"{where}/{index}"))
    return found


async def test_edge_status_is_described_as_it_is_answered(control: TestClient, zone: str) -> None:
    """`EdgeStatus` names the kind of change an answer made (`pending`, `purging`), never how far the edges got with
    it, which `EdgeNote` says: an answer whose change every edge holds says `pending` all the same. The document
    described `pending` as lasting "until every edge holds the new generation", which told an operator reading an
    answer every edge had acknowledged that the change had not arrived."""
    reference = await (await control.get("/api/openapi.json")).json()
    rules = {"File": "_headers", "Content": f"/{zone}/*\n  X-Documented: 1\n"}
    await answer(control, "POST", "/api/core/rules", 200, headers=ACCOUNT, json=rules)
    applied = await answer(control, "POST", "/api/core/rules", 200, headers=ACCOUNT, json=rules)
    assert (applied["EdgeStatus"], applied["EdgeNote"]) == (
        "pending", "The content is identical to the stored file; edges already apply it.")
    described = edge_status_descriptions(reference)
    assert len(described) == 7, sorted(described)  # uploads, deletes, batches, zones made and deleted, rules, pipeline
    for where, description in described.items():
        assert "until" not in description and "EdgeNote" in description, (where, description)
