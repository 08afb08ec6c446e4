"""`assetcdn up` acts on a stop signal at once: its waits (for health, between supervision rounds) end when
the signal arrives, not when their sleep would have."""

from __future__ import annotations

import os
import signal
import threading
import time

from assetcdn.supervisor import _StopRequest
from tests.support.wait import WAIT_S


def test_a_stop_signal_ends_the_supervisors_wait_at_once() -> None:
    stop = _StopRequest()
    previous = signal.signal(signal.SIGUSR1, stop)
    sender = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        began = time.monotonic()
        sender.start()
        stop.wait(10 * WAIT_S)
        waited = time.monotonic() - began
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
    assert stop.requested
    assert waited < WAIT_S, f"the wait went on for {waited:.1f}s after the stop signal"
    began = time.monotonic()
    stop.wait(10 * WAIT_S)  # a stop already requested: no wait at all
    assert time.monotonic() - began < WAIT_S
