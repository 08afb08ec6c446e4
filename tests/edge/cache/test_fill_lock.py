"""The edge's fill lock (assetcdn/edge/cache/fill_lock.py): one byte per URL that one worker of the edge holds while
it fills the URL, which the others see taken."""

from __future__ import annotations

import errno
import fcntl
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.cache import fill_lock
from assetcdn.edge.cache.fill_lock import FAILURE_SLOTS, NodeFillLock, key_offset


def test_two_opens_of_the_file_see_each_others_bytes(tmp_path: Path) -> None:
    """Each worker's open is its own holder, even in one process (as the tests run several workers)."""
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        offset = key_offset("pulled/a.txt")
        assert first.take(offset) and not second.take(offset) and second.held_elsewhere(offset)
        assert not first.held_elsewhere(offset)  # its own
        assert second.take(key_offset("pulled/b.txt"))  # another URL's byte
        first.release(offset)
        assert not second.held_elsewhere(offset) and second.take(offset) and first.held_elsewhere(offset)
    finally:
        first.close()
        second.close()


def test_two_keys_of_one_worker_on_one_byte_hold_it_till_both_are_done(tmp_path: Path) -> None:
    """Flights of one worker whose keys share a byte (`take` counts them): the byte is the other worker's only once
    both are over."""
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        assert first.take(7) and first.take(7)
        assert not second.take(7) and second.held_elsewhere(7)
        first.release(7)
        assert second.held_elsewhere(7)
        first.release(7)
        assert not second.held_elsewhere(7) and second.take(7) and first.held_elsewhere(7)
    finally:
        first.close()
        second.close()


def test_a_closed_lock_holds_nothing_and_keeps_no_fill_waiting(tmp_path: Path) -> None:
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        assert first.take(9)
        first.close()
        assert not second.held_elsewhere(9) and second.take(9)
        assert first.take(9) and not first.held_elsewhere(9)  # a stopping worker's fills go on
    finally:
        second.close()


def test_a_file_system_without_these_locks_lets_fills_go_on_each_on_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A lock the file system refuses (not busy: unsupported) is given up, logged once: no fill fails for it."""
    lock = NodeFillLock(tmp_path / "fills.lock")

    def refused(*_args: Any) -> bytes:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "fcntl", refused)
    with caplog.at_level(logging.WARNING, logger=fill_lock.__name__):
        assert lock.take(1) and lock.take(2) and not lock.held_elsewhere(3)
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1
    lock.release(1)
    lock.close()


def test_a_byte_the_file_system_will_not_let_go_of_goes_with_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Letting go of a byte fails (a network file system's lock service gone): the flight ending there is not failed
    for it (its `_forget` runs as its leader lands it, in the `finally` of the client's answer), and the lock is
    given up as when it cannot be taken: its file closed, which lets go of every byte this worker held, so the other
    workers do not wait for those URLs until this worker ends."""
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        assert first.take(5) and first.take(6)
        real = fcntl.fcntl

        def unlock_refused(fd: int, command: int, arg: bytes) -> bytes:
            if command == fcntl.F_OFD_SETLK and fill_lock._FLOCK.unpack(arg)[0] == fcntl.F_UNLCK:
                raise OSError(errno.ENOLCK, "No locks available")
            return real(fd, command, arg)

        monkeypatch.setattr(fcntl, "fcntl", unlock_refused)
        with caplog.at_level(logging.WARNING, logger=fill_lock.__name__):
            first.release(5)
        monkeypatch.undo()
        assert "failed" in caplog.text
        assert not second.held_elsewhere(5) and not second.held_elsewhere(6) and second.take(6)
        assert first.take(5)  # its fills go on, each worker on its own
    finally:
        first.close()
        second.close()


def test_a_lock_file_that_cannot_be_opened_leaves_each_worker_filling_on_its_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=fill_lock.__name__):
        assert NodeFillLock.open(tmp_path / "missing" / "fills.lock") is None
    assert "cannot be opened" in caplog.text


def test_a_failed_fill_is_read_by_the_other_workers_waiting_since_before_it(tmp_path: Path) -> None:
    """The record of a fill the origin gave no answer: read for that key's byte, by a wait that began before it; not
    for another key (one of the same slot overwrites it), nor by a wait that began after it."""
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        offset = key_offset("pulled/down.txt")
        began = time.monotonic()
        assert second.failed_since(offset, began) is None  # nothing recorded yet
        first.failed(offset, timeout=True)
        assert second.failed_since(offset, began) is True
        assert second.failed_since(offset, time.monotonic() + 1) is None  # a wait that began later
        assert second.failed_since(offset + FAILURE_SLOTS, began) is None  # another key of the slot
        first.failed(offset + FAILURE_SLOTS, timeout=False)  # that key's failure takes the slot
        assert second.failed_since(offset, began) is None
        assert second.failed_since(offset + FAILURE_SLOTS, began) is False
        assert first.take(offset) and not second.take(offset)  # the records leave the locks alone
    finally:
        first.close()
        second.close()


def test_a_failure_recorded_before_the_host_restarted_is_not_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock file outlives a restart of the host, whose monotonic clock then starts again near 0: a record from
    before (a time far past the clock's now) is no failure of a wait that began since."""
    first, second = NodeFillLock(tmp_path / "fills.lock"), NodeFillLock(tmp_path / "fills.lock")
    try:
        offset = key_offset("pulled/down.txt")
        began = time.monotonic()
        uptime = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: uptime() + 30 * 86400)  # a month of uptime before
        first.failed(offset, timeout=True)
        monkeypatch.setattr(time, "monotonic", uptime)  # restarted since
        assert second.failed_since(offset, began) is None
    finally:
        first.close()
        second.close()
