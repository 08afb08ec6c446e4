"""Signed URLs: ``sig`` = hex HMAC-SHA256 of ``"{path}:{expires}"`` with the signed-URL secret."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode


def url_signature(secret: str, path: str, expires: str | int) -> str:
    return hmac.new(secret.encode(), f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()


def signature_matches(secret: str, path: str, expires: str, sig: str) -> bool:
    return hmac.compare_digest(url_signature(secret, path, expires), sig.lower())


def signed_url(base_url: str, secret: str, path: str, ttl: int, *, now: float | None = None) -> str:
    if not path.startswith("/"):
        path = "/" + path
    expires = int(now if now is not None else time.time()) + ttl
    query = urlencode({"path": path, "expires": expires, "sig": url_signature(secret, path, expires)})
    return f"{base_url.rstrip('/')}/api/signed?{query}"
