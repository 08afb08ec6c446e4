"""The cluster signature: bound to its receiver, inside the time window, and accepted once."""

from __future__ import annotations

import time

from assetcdn.shared.cluster import (
    CONTENT_HEADER,
    NONCE_HEADER,
    WINDOW_SECONDS,
    ReplayGuard,
    forwarded_signed,
    sign_forwarded,
    sign_request,
    verify_headers,
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


def test_the_headers_alone_are_verified_against_the_declared_body_hash() -> None:
    signed = sign_request(SECRET, "POST", PATH, BODY)
    assert verify_headers(SECRET, "POST", PATH, signed, guard=ReplayGuard())
    assert not verify_headers("another", "POST", PATH, signed, guard=ReplayGuard())
    other = sign_request(SECRET, "POST", PATH, b"{}")[CONTENT_HEADER]
    assert not verify_headers(SECRET, "POST", PATH, {**signed, CONTENT_HEADER: other}, guard=ReplayGuard())
    assert not verify_headers(SECRET, "POST", PATH, {k: v for k, v in signed.items() if k != CONTENT_HEADER},
                              guard=ReplayGuard())
    guard = ReplayGuard()
    assert verify_headers(SECRET, "POST", PATH, signed, guard=guard)
    assert not verify_request(SECRET, "POST", PATH, BODY, signed, guard=guard)  # one nonce, whichever check


def test_a_forwarded_address_is_signed_for_its_value_and_the_window() -> None:
    value = sign_forwarded(SECRET, "203.0.113.9")
    assert forwarded_signed(SECRET, "203.0.113.9", value)
    assert not forwarded_signed(SECRET, "203.0.113.10", value)
    assert not forwarded_signed("another", "203.0.113.9", value)
    late = time.time() + WINDOW_SECONDS + 5
    assert not forwarded_signed(SECRET, "203.0.113.9", value, now=late)
    for broken in ("", ":", value.split(":")[1], "x:" + value.split(":")[1], value + "0", "\u00b2:" + "0" * 64):
        assert not forwarded_signed(SECRET, "203.0.113.9", broken)

