"""One origin request per URL (assetcdn/edge/states/pull.py `Flights`): a leader lands its own flight only, however
late it lands it again (after a stream of any length), never the newer flight another request leads by then."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from assetcdn.edge.cache.fill_lock import NodeFillLock, key_offset
from assetcdn.edge.origin_client import OriginError, OriginLimits, OriginTimeout
from assetcdn.edge.states.pull import (
    ErrorAnswered,
    Flights,
    Kept,
    Land,
    StoredResponse,
    await_flight,
    body_patience_s,
    flight_patience_s,
    settle,
    through_flight,
)

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
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept)
    joined = flights.join("k")  # landed, its answer still being stored: wait for that
    assert joined is not None and joined.done() and joined.result().kept is kept
    land(None)  # again on the leader's way out: nothing changes
    kept.set_result(None)
    await asyncio.sleep(0)
    assert flights.join("k") is None  # stored: the next miss leads a new flight


async def test_a_revalidation_takes_the_place_of_the_landed_flight_that_brought_its_stale_copy_only() -> None:
    """A flight landed, its answer being stored: a revalidation of an older copy waits for it (that answer replaces
    the copy), while one of the copy the flight brought (stale already, its disk batch still to be written) leads a
    flight of its own, which the requests for the key join from then on."""
    flights = Flights()
    older = time.time() - 1
    assert flights.join("k") is None
    land = flights.landing("k")
    assert flights.lead("k", time.time()) is None  # no answer yet: it may be a newer one
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept)
    assert flights.lead("k", older) is None  # the landed flight's answer replaces the older copy
    revalidation = flights.lead("k", time.time())  # the copy the landed flight brought
    assert revalidation is not None
    waiting = flights.join("k")
    assert waiting is not None and not waiting.done()  # the revalidation's flight
    kept.set_result(True)
    land(None)
    await asyncio.sleep(0)
    assert flights.joined("k") == 1  # the former flight's storing done leaves the revalidation's alone
    revalidation(None)
    assert waiting.done()


async def test_a_request_that_must_validate_the_copy_a_landed_flight_brought_leads_a_flight_of_its_own() -> None:
    """A request that must validate its stored copy waits for a landed flight storing a newer answer, not for the one
    storing that very copy (its disk batch still to be written): it revalidates the copy, the others waiting for it."""
    flights = Flights()
    older = time.time() - 1
    assert flights.join("k") is None
    land = flights.landing("k")
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept)
    landed = flights.join("k", older)  # the landed flight's answer replaces the older copy: waited for
    assert landed is not None and landed.done() and landed.result().kept is kept
    assert flights.join("k", time.time()) is None  # the copy that flight brought: this request leads
    revalidation = flights.landing("k")
    waiting = flights.join("k", time.time())
    assert waiting is not None and not waiting.done()  # the revalidation's flight, not landed yet
    kept.set_result(True)
    revalidation(None)
    assert waiting.done()


LIMITS = OriginLimits(first_byte_timeout_s=5, body_timeout_s=5)


async def test_a_flight_the_origin_failed_gives_its_waiters_that_failure_and_frees_the_key() -> None:
    """Its waiters answer with the failure (502, 504 or a stale copy) instead of each asking the failing origin."""
    flights = Flights()
    assert flights.join("k") is None
    land = flights.landing("k")
    waiting = flights.join("k")
    assert waiting is not None
    waiter = asyncio.create_task(await_flight(waiting, LIMITS))
    failure = OriginTimeout("no answer from the origin within 5 s")
    land(failure)
    assert await waiter is failure
    assert flights.join("k") is None  # the next request leads a new flight


async def test_a_body_stored_or_not_kept_gives_the_waiters_no_failure() -> None:
    flights = Flights()
    assert flights.join("k") is None
    land = flights.landing("k")
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept)
    waiting = flights.join("k")
    assert waiting is not None
    waiter = asyncio.create_task(await_flight(waiting, LIMITS))
    settle(kept)
    assert await waiter is None
    assert flights.join("k") is None
    land2 = flights.landing("k")
    waiting = flights.join("k")
    assert waiting is not None
    land2(None)  # an answer they may not share: each asks for its own
    assert await await_flight(waiting, LIMITS) is None


async def test_a_body_the_origin_fails_once_its_head_is_in_gives_the_waiters_that_failure() -> None:
    """Its waiters answer with it (their stale copy, or one more flight for them all), as with a failure before the
    head, instead of finding nothing stored and each asking the origin again (`through_flight`)."""
    flights = Flights()
    assert flights.join("k") is None
    land = flights.landing("k")
    kept: Kept = asyncio.get_running_loop().create_future()
    land(kept)
    waiting = flights.join("k")
    assert waiting is not None
    waiter = asyncio.create_task(await_flight(waiting, LIMITS))
    failure = OriginError("the origin's body was cut short")
    settle(kept, failure)
    assert await waiter is failure
    assert flights.join("k") is None


@contextmanager
def two_workers(tmp_path: Path, limits: OriginLimits | None = None
                ) -> Iterator[tuple[Flights, Flights, list[NodeFillLock]]]:
    """The flights of two workers of one edge that share their fills (assetcdn/edge/cache/fill_lock.py), and their
    locks (closed at the end)."""
    locks = [NodeFillLock(tmp_path / "fills.lock") for _ in range(2)]
    workers = (Flights(), Flights())
    for flights, lock in zip(workers, locks, strict=True):
        flights.share_fills(lock, limits or OriginLimits())
    try:
        yield workers[0], workers[1], locks
    finally:
        for lock in locks:
            lock.close()


async def test_a_worker_waits_for_the_fill_another_worker_of_the_edge_leads_until_it_is_stored(tmp_path: Path) -> None:
    """The first worker leads the key's fill; the second leads none of its own (the hit path's `lead` gives it none)
    and its requests wait: the flight they join is landed at once, its body kept once the first worker's answer is
    stored and its flight over, not at its head. The key is free for either worker's next miss then."""
    with two_workers(tmp_path) as (here, there, _locks):
        assert here.join("k") is None
        land = here.landing("k")
        assert there.lead("k") is None
        waiting = there.join("k")
        assert waiting is not None and waiting.done()
        sibling_kept = waiting.result().kept
        assert sibling_kept is not None
        kept: Kept = asyncio.get_running_loop().create_future()
        land(kept)  # the head is in, the body being stored
        await asyncio.sleep(0.1)
        assert not sibling_kept.done() and there.join("k") is waiting  # later requests there join the same wait
        kept.set_result(True)
        assert await asyncio.wait_for(await_flight(waiting, OriginLimits()), 5) is None
        assert sibling_kept.result() is True
        assert there.join("k") is None and here.lead("k") is None  # the second worker's next miss leads


async def landed_for_the_other_worker(tmp_path: Path, landed: OriginError | None) -> OriginError | None:
    """What a request of the second worker that waits for the first worker's fill gets once that fill lands `landed`
    (`await_flight`: a failure, or None when it finds its own way)."""
    with two_workers(tmp_path) as (here, there, _locks):
        assert here.join("k") is None
        land = here.landing("k")
        waiting = there.join("k")
        assert waiting is not None
        land(landed)
        return await asyncio.wait_for(await_flight(waiting, OriginLimits()), 5)


async def test_a_fill_that_keeps_nothing_lets_the_other_workers_ask_at_once(tmp_path: Path) -> None:
    """The first worker's answer is not kept (landed with nothing): the key is let go at its head, and the second
    worker's waiting requests look up (nothing) and ask the origin themselves."""
    assert await landed_for_the_other_worker(tmp_path, None) is None


async def test_a_worker_gone_mid_fill_leaves_no_key_held(tmp_path: Path) -> None:
    """A worker killed in the middle of a fill holds no key: its open of the lock file goes with it."""
    with two_workers(tmp_path) as (here, there, locks):
        assert here.join("k") is None
        waiting = there.join("k")
        assert waiting is not None
        locks[0].close()  # as the process's end closes it
        assert await asyncio.wait_for(await_flight(waiting, OriginLimits()), 5) is None
        assert there.join("other") is None and there.join("k") is None


async def test_a_fill_of_another_worker_is_waited_for_no_longer_than_one_of_this_workers(tmp_path: Path) -> None:
    """A fill the other worker never ends (its client paces a long body): this worker's requests wait for it as long
    as for one of its own flights to land and keep its body, then look up and ask the origin themselves."""
    limits = OriginLimits(first_byte_timeout_s=0.02, body_timeout_s=0.02)
    with two_workers(tmp_path, limits) as (here, there, locks):
        assert here.join("k") is None
        waiting = there.join("k")
        assert waiting is not None
        kept = waiting.result().kept
        assert kept is not None
        began = time.monotonic()
        assert await asyncio.wait_for(asyncio.shield(kept), 5) is True
        assert time.monotonic() - began >= flight_patience_s(limits) + body_patience_s(limits) - 0.01
        assert locks[0].held_elsewhere(key_offset("k")) is False and locks[1].held_elsewhere(key_offset("k"))


async def test_a_fill_of_another_worker_slower_than_a_body_wait_is_still_waited_for(tmp_path: Path) -> None:
    """The other worker's fill takes longer than `body_patience_s` in all (its head late: a shield that failed, then
    the origin), but less than a flight of this worker may take to land and keep its body: this worker's request
    still waits for it and answers with what it stored, not asking the origin a second time. (A flight of this
    worker is waited for `flight_patience_s` to land, then `body_patience_s` for its body; another worker's is
    landed at once, so its body's wait must cover both.)"""
    limits = OriginLimits(first_byte_timeout_s=0.1, body_timeout_s=0.1)
    on_disk: list[str] = []
    asked: list[str] = []

    async def cached(_since: float | None) -> tuple[str | None, StoredResponse | None]:
        return (on_disk[0] if on_disk else None), None

    async def fill(stored: StoredResponse | None, land: Land, *, whole_first: bool = False) -> str:
        del stored, land, whole_first
        asked.append("origin")
        return "the origin's own answer"

    async def failed(_stored: StoredResponse | None, failure: OriginError) -> str:
        raise AssertionError(f"no failure here: {failure}")

    with two_workers(tmp_path, limits) as (here, there, _locks):
        assert here.join("k") is None
        land = here.landing("k")
        waiter = asyncio.create_task(through_flight(there, "k", limits, cached, fill, failed))
        # Past body_patience_s (0.2 s), within flight_patience_s + body_patience_s (0.5 s).
        await asyncio.sleep(body_patience_s(limits) + 0.12)
        kept: Kept = asyncio.get_running_loop().create_future()
        land(kept)  # its head in at last, and its body stored at once: the key let go
        on_disk.append("what the first worker stored")
        kept.set_result(True)
        assert await asyncio.wait_for(waiter, 5) == "what the first worker stored"
        assert asked == []


@pytest.mark.parametrize("failure", [OriginTimeout("no head in time"), OriginError("refused")])
async def test_a_fill_of_another_worker_the_origin_failed_is_the_waiters_failure(
        tmp_path: Path, failure: OriginError) -> None:
    """The first worker's fill got no answer from the origin: the second worker's waiting requests take that failure
    (a 504 or 502, or their stale copy) rather than each ask the failing origin again."""
    got = await landed_for_the_other_worker(tmp_path, failure)
    assert isinstance(got, OriginError) and got.timeout is failure.timeout


async def test_an_error_answered_with_a_stale_copy_is_not_the_other_workers_failure(tmp_path: Path) -> None:
    """The origin answered the first worker's fill with an error status its stale copy answered (ErrorAnswered): the
    origin did answer, so the second worker's requests find nothing stored and ask it themselves."""
    assert await landed_for_the_other_worker(tmp_path, ErrorAnswered(503)) is None


async def test_a_failure_recorded_before_the_wall_clock_stepped_back_is_not_a_later_fills(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker's fill of a URL got no answer from the origin; then the host's wall clock stepped back (a
    time sync) and its next fill of that URL was stored: the second worker's requests that waited for that fill find
    it stored (no failure), never the earlier failure, whose record looked newer than their wait on the wall clock."""
    with two_workers(tmp_path) as (here, there, _locks):
        assert here.join("k") is None
        here.landing("k")(OriginTimeout("no head in time"))  # recorded for the waiters of that fill; the key let go
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() - 3600)  # the clock steps back an hour
        assert here.join("k") is None
        land = here.landing("k")
        waiting = there.join("k")
        assert waiting is not None
        kept: Kept = asyncio.get_running_loop().create_future()
        land(kept)
        kept.set_result(True)  # stored: the key let go
        assert await asyncio.wait_for(await_flight(waiting, OriginLimits()), 5) is None
