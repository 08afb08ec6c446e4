"""The cluster signature: bound to its receiver, inside the time window, and accepted once."""

from __future__ import annotations

import time

from assetcdn.shared.cluster import (
    NONCE_HEADER,
    WINDOW_SECONDS,
    ReplayGuard,
    sign_request,
    verify_request,
)

SECRET = "cluster-secret"
PATH = "/_cluster/push"
BODY = b'{"v":1,"generation":7}'


def _verify(headers: dict[str, str], guard: ReplayGuard, *, body: bytes = BODY, audience: str = "edge-0/0",
            now: float | None = None) -> bool:
    return verify_request(SECRET, "POST", PATH, body, headers, guard=guard, audience=audience, now=now)


def test_a_message_is_accepted_once_and_a_different_one_still_is() -> None:
    guard = ReplayGuard()
    captured = sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0")
    assert _verify(captured, guard)
    assert not _verify(dict(captured), guard)  # the same bytes again: a replay
    assert _verify(sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0"), guard)  # signed anew


def test_a_message_for_one_worker_is_refused_by_another_and_by_control() -> None:
    captured = sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0")
    assert not _verify(captured, ReplayGuard(), audience="edge-0/1")
    assert not _verify(captured, ReplayGuard(), audience="control")
    assert _verify(captured, ReplayGuard(), audience="edge-0/0")


def test_the_nonce_is_signed_and_required() -> None:
    guard = ReplayGuard()
    captured = sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0")
    assert not _verify({**captured, NONCE_HEADER: "0" * 32}, guard)  # a new nonce breaks the signature
    assert not _verify({k: v for k, v in captured.items() if k != NONCE_HEADER}, guard)
    assert not _verify({**captured, NONCE_HEADER: "not-hex"}, guard)
    assert len(guard) == 0  # nothing unsigned is remembered
    assert _verify(captured, guard)


def test_memory_is_bounded_by_the_window() -> None:
    guard = ReplayGuard()
    start = time.time()
    for _ in range(100):
        assert _verify(sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0", now=start), guard, now=start)
    assert len(guard) == 100
    later = start + 2 * WINDOW_SECONDS + 2
    fresh = sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0", now=later)
    assert _verify(fresh, guard, now=later)
    assert len(guard) == 1  # the old nonces were forgotten once their messages could no longer pass


def test_a_replay_outside_the_window_is_refused_by_the_clock() -> None:
    start = time.time()
    captured = sign_request(SECRET, "POST", PATH, BODY, audience="edge-0/0", now=start)
    assert not _verify(captured, ReplayGuard(), now=start + WINDOW_SECONDS + 1)
