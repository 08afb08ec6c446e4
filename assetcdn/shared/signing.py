"""Signed URLs: ``sig`` = hex HMAC-SHA256 of ``"{path}:{expires}"`` with the signed-URL secret."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

from assetcdn.shared.paths import InvalidPath, parse_cdn_path


def url_signature(secret: str, path: str, expires: str | int) -> str:
    return hmac.new(secret.encode(), f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()


def signature_matches(secret: str, path: str, expires: str, sig: str) -> bool:
    return hmac.compare_digest(url_signature(secret, path, expires), sig.lower())


def signable_form(path: str) -> bool:
    """Whether /api/signed reads `path` at all, before its signature: a leading ``/``, and no ``..``, NUL or empty
    segment (``//``)."""
    return path.startswith("/") and ".." not in path and "\x00" not in path and "//" not in path


def signable_path(path: str) -> str:
    """``path`` as /api/signed takes it (a leading ``/`` added when absent); ``InvalidPath`` for one it refuses with
    403 ``Invalid path format`` whatever the signature (assetcdn/edge/routes/signed.py): a ``..``, NUL, an empty
    segment, or not a CDN path."""
    if not path.startswith("/"):
        path = "/" + path
    if not signable_form(path):
        raise InvalidPath("a CDN path has no '..', NUL or empty segment ('//').")
    parse_cdn_path(path)
    return path


def signed_url(base_url: str, secret: str, path: str, ttl: int, *, now: float | None = None) -> str:
    if not path.startswith("/"):
        path = "/" + path
    expires = int(now if now is not None else time.time()) + ttl
    query = urlencode({"path": path, "expires": expires, "sig": url_signature(secret, path, expires)})
    return f"{base_url.rstrip('/')}/api/signed?{query}"
