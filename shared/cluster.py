"""The cluster protocol between control and edges: HMAC-signed, versioned JSON messages.

Signature = hex HMAC-SHA256(cluster_secret, f"{method}\\n{path}\\n{timestamp}\\n" + sha256(body)),
sent in ``X-Cluster-Timestamp`` / ``X-Cluster-Signature``; a request outside the window is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

PROTOCOL_VERSION = 1
PREFIX = "/_cluster"
TIMESTAMP_HEADER = "X-Cluster-Timestamp"
SIGNATURE_HEADER = "X-Cluster-Signature"
WINDOW_SECONDS = 60


def _message(method: str, path: str, timestamp: str, body: bytes) -> bytes:
    return f"{method.upper()}\n{path}\n{timestamp}\n{hashlib.sha256(body).hexdigest()}".encode()


def sign_request(secret: str, method: str, path: str, body: bytes = b"", *, now: float | None = None) -> dict[str, str]:
    timestamp = str(int(now if now is not None else time.time()))
    signature = hmac.new(secret.encode(), _message(method, path, timestamp, body), hashlib.sha256).hexdigest()
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature}


def verify_request(secret: str, method: str, path: str, body: bytes, headers: Mapping[str, str],
                   *, now: float | None = None) -> bool:
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    signature = headers.get(SIGNATURE_HEADER, "")
    if not (timestamp.isascii() and timestamp.isdigit()) or not signature:  # "²".isdigit() is True
        return False
    if abs((now if now is not None else time.time()) - int(timestamp)) > WINDOW_SECONDS:
        return False
    expected = hmac.new(secret.encode(), _message(method, path, timestamp, body), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)

