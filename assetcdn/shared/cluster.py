"""The cluster protocol between control and edges: HMAC-signed, versioned JSON messages.

Signature = hex HMAC-SHA256(cluster_secret,
    f"{method}\\n{audience}\\n{path}\\n{timestamp}\\n{nonce}\\n" + sha256(body)),
sent in ``X-Cluster-Timestamp`` / ``X-Cluster-Nonce`` / ``X-Cluster-Signature``.

- A request whose timestamp is more than ``WINDOW_SECONDS`` away from the receiver's clock is refused.
- ``audience`` names the receiver: ``"control"`` for edge->control requests, the edge member name
  (``edge-0/1``) for control's pushes to one edge worker. A message signed for one worker is refused
  by every other worker and by control.
- The sender also names the body's SHA-256 in ``X-Cluster-Content-SHA256``, the hash the signature covers,
  so a receiver can check the signature before it reads any of the body (``verify_headers``) and then hold
  the body to that hash; a forged request is refused unread.
- An edge that forwards a management call to control signs the ``X-Forwarded-For`` it passes on
  (``sign_forwarded``, in ``X-Cluster-Forwarded``): control believes a forwarded client address only so
  signed, or from a proxy its configuration names, never from a peer's address alone.
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
CONTENT_HEADER = "X-Cluster-Content-SHA256"
FORWARDED_HEADER = "X-Cluster-Forwarded"
WINDOW_SECONDS = 60
CONTROL_AUDIENCE = "control"
NONCE_BYTES = 16
_HEX_CHARS = frozenset("0123456789abcdef")
SHA256_HEX_LENGTH = 64


def _message(method: str, audience: str, path: str, timestamp: str, nonce: str, body_sha256: str) -> bytes:
    return f"{method.upper()}\n{audience}\n{path}\n{timestamp}\n{nonce}\n{body_sha256}".encode()


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and _HEX_CHARS.issuperset(text)


def sign_request(secret: str, method: str, path: str, body: bytes = b"", *, audience: str = CONTROL_AUDIENCE,
                 now: float | None = None) -> dict[str, str]:
    """Headers for one request to `audience`; every call has a fresh nonce (sign each send anew)."""
    timestamp = str(int(now if now is not None else time.time()))
    nonce = secrets.token_hex(NONCE_BYTES)
    content = hashlib.sha256(body).hexdigest()
    signature = hmac.new(secret.encode(), _message(method, audience, path, timestamp, nonce, content),
                         hashlib.sha256).hexdigest()
    return {TIMESTAMP_HEADER: timestamp, NONCE_HEADER: nonce, SIGNATURE_HEADER: signature, CONTENT_HEADER: content}


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


def plausible(headers: Mapping[str, str], now: float | None = None) -> bool:
    """Whether the signature headers are well formed and the timestamp inside the window: what a receiver can
    refuse on before reading a body, without the secret."""
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):  # "²".isdigit() is True
        return False
    if not _is_hex(headers.get(NONCE_HEADER, ""), NONCE_BYTES * 2):
        return False
    if not _is_hex(headers.get(SIGNATURE_HEADER, ""), SHA256_HEX_LENGTH):
        return False
    return abs((now if now is not None else time.time()) - int(timestamp)) <= WINDOW_SECONDS


def _verify(secret: str, method: str, path: str, body_sha256: str, headers: Mapping[str, str], guard: ReplayGuard,
            audience: str, now: float | None) -> bool:
    now = now if now is not None else time.time()
    if not plausible(headers, now):
        return False
    timestamp, nonce = headers[TIMESTAMP_HEADER], headers[NONCE_HEADER]
    expected = hmac.new(secret.encode(), _message(method, audience, path, timestamp, nonce, body_sha256),
                        hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, headers[SIGNATURE_HEADER]):
        return False
    return guard.first_use(nonce, int(timestamp), now)


def verify_headers(secret: str, method: str, path: str, headers: Mapping[str, str], *, guard: ReplayGuard,
                   audience: str = CONTROL_AUDIENCE, now: float | None = None) -> bool:
    """True when the request is signed for `audience` over the body hash it declares (CONTENT_HEADER), inside
    the window, and not seen before: checked before the body is read, which must then match that hash."""
    content = headers.get(CONTENT_HEADER, "")
    return _is_hex(content, SHA256_HEX_LENGTH) and _verify(secret, method, path, content, headers, guard, audience,
                                                           now)


def verify_request(secret: str, method: str, path: str, body: bytes, headers: Mapping[str, str], *,
                   guard: ReplayGuard, audience: str = CONTROL_AUDIENCE, now: float | None = None) -> bool:
    """True when the request is signed for `audience`, inside the window, and not seen before."""
    return _verify(secret, method, path, hashlib.sha256(body).hexdigest(), headers, guard, audience, now)


def _forwarded_message(forwarded_for: str, timestamp: str) -> bytes:
    # Four lines where a request's message has six: the one can never be taken for the other. The header's value as
    # its bytes: a client's own X-Forwarded-For, which an edge forwards first, is read with surrogate escapes.
    return f"FORWARDED\n{CONTROL_AUDIENCE}\n{forwarded_for}\n{timestamp}".encode("utf-8", "surrogateescape")


def sign_forwarded(secret: str, forwarded_for: str, *, now: float | None = None) -> str:
    """The FORWARDED_HEADER value of a call an edge forwards to control with `forwarded_for` as its
    X-Forwarded-For: ``<timestamp>:<hex HMAC>``. Not single-use: a replay within the window can only
    repeat an address an edge already vouched for."""
    timestamp = str(int(now if now is not None else time.time()))
    signature = hmac.new(secret.encode(), _forwarded_message(forwarded_for, timestamp), hashlib.sha256).hexdigest()
    return f"{timestamp}:{signature}"


def forwarded_signed(secret: str, forwarded_for: str, value: str, *, now: float | None = None) -> bool:
    """True when `value` (a FORWARDED_HEADER) signs `forwarded_for` with the cluster secret, inside the window."""
    timestamp, _, signature = value.partition(":")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return False
    if not _is_hex(signature, SHA256_HEX_LENGTH):
        return False
    if abs((now if now is not None else time.time()) - int(timestamp)) > WINDOW_SECONDS:
        return False
    expected = hmac.new(secret.encode(), _forwarded_message(forwarded_for, timestamp), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)

