"""One origin request per URL (assetcdn/edge/states/pull.py `Flights`): a leader lands its own flight only, however
late it lands it again (after a stream of any length), never the newer flight another request leads by then."""

from __future__ import annotations

import asyncio

import pytest

from assetcdn.edge.states.pull import Flights

pytestmark = pytest.mark.asyncio


async def test_a_leader_landing_again_late_leaves_a_newer_flight_for_the_key_alone() -> None:
    flights = Flights()
    assert flights.join("k") is None  # the first request leads
    first = flights.landing("k")
    first(None)  # its answer is not kept: the waiters ask for their own at once, the key is free
    assert flights.join("k") is None  # a later request leads a new flight
    second = flights.landing("k")
    waiting = flights.join("k")
    assert waiting is not None and not waiting.done()
    first(None)  # the first leader's way out, its stream over
    assert not waiting.done()  # the new flight's waiters still wait for their leader
    second(None)
    assert waiting.done()


async def test_a_flight_landed_with_what_is_kept_is_joined_until_that_is_stored() -> None:
    flights = Flights()
    assert flights.join("k") is None
    land = flights.landing("k")
    kept: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    land(kept)
    joined = flights.join("k")  # landed, its answer still being stored: wait for that
    assert joined is not None and joined.done() and joined.result().kept is kept
    land(None)  # again on the leader's way out: nothing changes
    kept.set_result(None)
    await asyncio.sleep(0)
    assert flights.join("k") is None  # stored: the next miss leads a new flight
