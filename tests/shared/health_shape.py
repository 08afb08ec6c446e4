"""The published HealthResponse shape (field names and types of the OpenAPI schema), and what the public
health answer must never contain."""

from __future__ import annotations

import re
from typing import Any

REQUIRED = {"status": str, "timestamp": str, "apiVersion": str, "bindings": dict, "checks": list}
BINDINGS = {"assets", "kv", "ai", "vectorize", "rateLimiter", "metrics", "webhookQueue", "auditLogKv"}
CHECK_REQUIRED = {"name": str, "configured": bool, "healthy": bool, "method": str}
CHECK_OPTIONAL = {"latencyMs": int, "optional": bool, "error": str}
CHECK_METHODS = {"shape", "manifest-fetch", "kv-get"}
INTERNAL = re.compile(r"https?://|\b(?:\d{1,3}\.){3}\d{1,3}\b|\[[0-9a-fA-F:]+\]|localhost|/_cluster|/tmp/|"
                      r"\.sqlite3|repo\.git")


def assert_health_shape(body: dict[str, Any]) -> None:
    for field, kind in REQUIRED.items():
        assert isinstance(body[field], kind), (field, body)
    assert body["status"] in ("ok", "degraded")
    assert set(body["bindings"]) == BINDINGS, body["bindings"]
    assert all(isinstance(value, bool) for value in body["bindings"].values()), body["bindings"]
    assert body["checks"]
    for check in body["checks"]:
        for field, kind in CHECK_REQUIRED.items():
            assert isinstance(check[field], kind), (field, check)
        for field, kind in CHECK_OPTIONAL.items():
            if field in check:
                assert type(check[field]) is kind, (field, check)
        assert check["method"] in CHECK_METHODS, check


def assert_no_internal_addresses(text: str, *paths: str) -> None:
    """No URL, IP address, host name, cluster path or file path (such as `paths`) in a public answer."""
    found = INTERNAL.search(text)
    assert found is None, f"public health shows {found.group(0)!r}: {text}"
    for path in paths:
        assert path not in text, f"public health shows {path!r}: {text}"
