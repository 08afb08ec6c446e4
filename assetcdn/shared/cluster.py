"""The cluster protocol between control and edges: HMAC-signed, versioned JSON messages.

Signature = hex HMAC-SHA256(cluster_secret,
    f"{method}\\n{audience}\\n{path}\\n{timestamp}\\n{nonce}\\n" + sha256(body)),
sent in ``X-Cluster-Timestamp`` / ``X-Cluster-Nonce`` / ``X-Cluster-Signature``.

- A request whose timestamp is more than ``WINDOW_SECONDS`` away from the receiver's clock is refused.
- ``audience`` names the receiver: ``"control"`` for edge->control requests, the edge member name
  (``edge-0/1``) for control's pushes to one edge worker. A message signed for one worker is refused
  by every other worker and by control.
- Each receiver remembers the nonce of every message it accepted until that message's timestamp
  leaves the window (``ReplayGuard``) and refuses the same nonce a second time, so a captured message
  cannot be replayed. Only messages with a valid signature are remembered, so the memory is bounded by
  the legitimate message rate times twice the window.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import secrets
import time
from collections.abc import Mapping

PROTOCOL_VERSION = 1
PREFIX = "/_cluster"
TIMESTAMP_HEADER = "X-Cluster-Timestamp"
NONCE_HEADER = "X-Cluster-Nonce"
SIGNATURE_HEADER = "X-Cluster-Signature"
WINDOW_SECONDS = 60
CONTROL_AUDIENCE = "control"
NONCE_BYTES = 16
_NONCE_CHARS = frozenset("0123456789abcdef")


def _message(method: str, audience: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    return (f"{method.upper()}\n{audience}\n{path}\n{timestamp}\n{nonce}\n"
            f"{hashlib.sha256(body).hexdigest()}").encode()


def sign_request(secret: str, method: str, path: str, body: bytes = b"", *, audience: str = CONTROL_AUDIENCE,
                 now: float | None = None) -> dict[str, str]:
    """Headers for one request to `audience`; every call has a fresh nonce (sign each send anew)."""
    timestamp = str(int(now if now is not None else time.time()))
    nonce = secrets.token_hex(NONCE_BYTES)
    signature = hmac.new(secret.encode(), _message(method, audience, path, timestamp, nonce, body),
                         hashlib.sha256).hexdigest()
    return {TIMESTAMP_HEADER: timestamp, NONCE_HEADER: nonce, SIGNATURE_HEADER: signature}


class ReplayGuard:
    """The nonces a receiver has accepted, each kept until its message can no longer pass the window check.

    One per receiving process: control is one process, and each edge worker has its own private cluster
    port that only its own messages (signed for its member name) are sent to.
    """

    def __init__(self, window_s: int = WINDOW_SECONDS) -> None:
        self._window_s = window_s
        self._seen: set[str] = set()
        self._expiries: list[tuple[int, str]] = []  # min-heap of (forget after, nonce)

    def __len__(self) -> int:
        return len(self._seen)

    def first_use(self, nonce: str, timestamp: int, now: float) -> bool:
        """True (and remembered) the first time `nonce` is offered; False on any later offer."""
        while self._expiries and self._expiries[0][0] < now:
            self._seen.discard(heapq.heappop(self._expiries)[1])
        if nonce in self._seen:
            return False
        self._seen.add(nonce)
        heapq.heappush(self._expiries, (timestamp + self._window_s + 1, nonce))
        return True


def verify_request(secret: str, method: str, path: str, body: bytes, headers: Mapping[str, str], *,
                   guard: ReplayGuard, audience: str = CONTROL_AUDIENCE, now: float | None = None) -> bool:
    """True when the request is signed for `audience`, inside the window, and not seen before."""
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    nonce = headers.get(NONCE_HEADER, "")
    signature = headers.get(SIGNATURE_HEADER, "")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12) or not signature:  # "²".isdigit() is True
        return False
    if len(nonce) != NONCE_BYTES * 2 or not _NONCE_CHARS.issuperset(nonce):
        return False
    now = now if now is not None else time.time()
    if abs(now - int(timestamp)) > WINDOW_SECONDS:
        return False
    expected = hmac.new(secret.encode(), _message(method, audience, path, timestamp, nonce, body),
                        hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return False
    return guard.first_use(nonce, int(timestamp), now)
