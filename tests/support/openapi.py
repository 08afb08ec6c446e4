"""The API reference's operations (assetcdn/shared/openapi.json), as the route and fuzz tests read them."""

from __future__ import annotations

from typing import Any

from assetcdn.shared.openapi import document

METHODS = ("get", "head", "post", "put", "delete", "options", "patch")


def documented() -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): operation for path, operations in document()["paths"].items()
            for method, operation in operations.items() if method in METHODS}
