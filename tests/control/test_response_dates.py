"""Every date-time a client reads from storage, zones, batch, pipeline, rules and domains has one form:
UTC with milliseconds and ``Z`` (``2026-04-04T12:00:00.000Z``, as the OpenAPI examples), whether it
came from the clock, a git commit (whole seconds) or a row an older version stored."""

from __future__ import annotations

import base64
import re
from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import DB
from tests.support.control import ACCESS, ACCOUNT

ONE_FORM = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><rect width="20" height="20"/></svg>'


def date_times(value: Any, path: str = "") -> dict[str, str]:
    """Every Date*/LastChanged field anywhere in a JSON answer, by its path."""
    found: dict[str, str] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            if (key.startswith("Date") or key == "LastChanged") and isinstance(item, str):
                found[f"{path}.{key}"] = item
            found |= date_times(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found |= date_times(item, f"{path}[{i}]")
    return found


async def answer(resp: Any, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def test_every_date_time_has_milliseconds_and_z(control: TestClient) -> None:
    answers = {
        "zone create": await answer(await control.post("/api/core/zones", json={"Name": "akande"},
                                                       headers=ACCOUNT), 201),
        "upload": await answer(await control.put("/api/storage/akande/v1/logos/a.svg", data=SVG,
                                                 headers=ACCESS), 201),
        "batch": await answer(await control.post("/api/storage/batch", headers=ACCESS, json={"files": [
            {"path": "akande/v1/icons/b.svg", "content": base64.b64encode(SVG).decode()}]}), 201),
        "pipeline": await answer(await control.post("/api/pipeline", headers=ACCOUNT, json={
            "mode": "stock", "stockName": "dot", "svg": base64.b64encode(SVG).decode(), "generateIcons": False,
            "generateFavicon": False}), 201),
        "rules update": await answer(await control.post("/api/core/rules", headers=ACCOUNT, json={
            "File": "_headers", "Content": "/*\n  X-Test: 1\n"})),
        "rules": await answer(await control.get("/api/core/rules", headers=ACCOUNT)),
        "domain add": await answer(await control.post("/api/core/zones/akande/domains", headers=ACCOUNT,
                                                      json={"Hostname": "cdn.example.com"}), 201),
        "domains": await answer(await control.get("/api/core/zones/akande/domains", headers=ACCOUNT)),
        "zones": await answer(await control.get("/api/core/zones", headers=ACCOUNT)),
        "zone": await answer(await control.get("/api/core/zones/akande", headers=ACCOUNT)),
        "listing": await answer(await control.get("/api/storage/akande/v1/logos/", headers=ACCESS)),
    }
    seen = {f"{name}{where}": value for name, body in answers.items() for where, value in date_times(body).items()}
    for name in answers:  # each answer carries at least one date-time
        assert any(where.startswith(name) for where in seen), name
    assert {where: value for where, value in seen.items() if not ONE_FORM.fullmatch(value)} == {}


async def test_a_created_date_stored_in_whole_seconds_is_answered_with_milliseconds(control: TestClient,
                                                                                   zone: str) -> None:
    db = control.app[DB]
    await db.write("UPDATE zones SET created_at = ? WHERE name = ?", ("2026-04-04T12:00:00Z", zone))
    for url in ("/api/core/zones", f"/api/core/zones/{zone}"):
        body = await answer(await control.get(url, headers=ACCOUNT))
        created = body[0]["DateCreated"] if isinstance(body, list) else body["DateCreated"]
        assert created == "2026-04-04T12:00:00.000Z"
