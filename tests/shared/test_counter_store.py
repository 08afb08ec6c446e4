"""The counter store's backends (in-process, embedded SQLite, Redis) behave alike: a limit passes at
exactly N whatever the concurrency, windows end, refunds give one back; and `Counters` falls back to
this process's memory while the store is unreachable, reports it, and returns to the store."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from assetcdn.shared.counter_backends.memory import MemoryCounterStore
from assetcdn.shared.counter_backends.redis import RedisCounterStore
from assetcdn.shared.counter_backends.sqlite import SqliteCounterStore
from assetcdn.shared.counter_store import (
    Counters,
    CounterStore,
    CounterStoreUnavailable,
    Limit,
    counter_store_from_settings,
)
from tests.support.redis.server import RedisServer, free_port, start_redis


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


PATIENT_S = 10.0  # a Redis store's timeout where the subject is counting, not giving up on the server


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> RedisServer:  # type: ignore[misc]
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["memory", "embedded", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CounterStore]:
    backend: CounterStore
    if request.param == "memory":
        backend = MemoryCounterStore()
    elif request.param == "embedded":
        backend = SqliteCounterStore(tmp_path / "counters.sqlite3")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        # What these tests check is the counting, not how soon an unreachable Redis is given up on (the tests of
        # that make their own store): a loaded machine can keep the local server from accepting within 1 s.
        backend = RedisCounterStore(server.url, key_prefix=f"{request.node.name}:", timeout_s=PATIENT_S)
    yield backend
    await backend.close()


async def test_a_limit_passes_exactly_n_hits_and_refusals_are_not_counted(store: CounterStore) -> None:
    decisions = [await store.hit("k", 3, 60) for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0, 0]
    assert all(0 < d.reset_at - d.decided_at <= 60 for d in decisions)
    assert decisions[-1].retry_after_s() in range(1, 61)
    assert (await store.peek("k", 5, 60)).remaining == 2  # the refusals were not counted
    assert (await store.hit("other", 3, 60)).remaining == 2  # keys are separate


async def test_refund_gives_back_one_hit_and_never_goes_below_zero(store: CounterStore) -> None:
    decisions = [await store.hit("k", 2, 60) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    await store.refund("k", decisions[0].reset_at)
    assert (await store.peek("k", 2, 60)).remaining == 1
    assert (await store.hit("k", 2, 60)).allowed
    await store.refund("never-hit", decisions[0].reset_at)
    await store.refund("never-hit", decisions[0].reset_at)
    assert (await store.peek("never-hit", 2, 60)).remaining == 2
    assert (await store.hit("never-hit", 2, 60)).remaining == 1


async def test_concurrent_hits_from_several_clients_pass_exactly_the_limit(
        store: CounterStore, tmp_path: Path, redis_server_url: Callable[[], str]) -> None:
    # Three clients of the same store (three processes' connections), 300 hits at once, limit 120.
    if isinstance(store, SqliteCounterStore):
        clients: list[CounterStore] = [store, SqliteCounterStore(store.path), SqliteCounterStore(store.path)]
    elif isinstance(store, RedisCounterStore):
        clients = [store, *(RedisCounterStore(redis_server_url(), key_prefix=store._prefix, timeout_s=PATIENT_S)
                            for _ in range(2))]
    else:
        clients = [store]
    try:
        decisions = await asyncio.gather(*(clients[i % len(clients)].hit("busy", 120, 60) for i in range(300)))
    finally:
        for client in clients[1:]:
            await client.close()
    assert sum(d.allowed for d in decisions) == 120
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(120))  # every count given once


@pytest.fixture
def redis_server_url(request: pytest.FixtureRequest) -> Callable[[], str]:
    return lambda: request.getfixturevalue("redis_server").url


def _hit_many(path: str, count: int, limit: int, allowed: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def run() -> int:
        store = SqliteCounterStore(Path(path))
        try:
            return sum([(await store.hit("processes", limit, 60)).allowed for _ in range(count)])
        finally:
            await store.close()
    allowed.put(asyncio.run(run()))


def test_processes_sharing_the_embedded_file_pass_exactly_the_limit(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    allowed = context.Queue()
    workers = [context.Process(target=_hit_many, args=(str(tmp_path / "counters.sqlite3"), 60, 150, allowed))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    counts = [allowed.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert sum(counts) == 150


async def test_the_embedded_window_ends_and_a_new_one_starts(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteCounterStore(tmp_path / "counters.sqlite3", clock=clock)
    try:
        assert [(await store.hit("k", 2, 60)).allowed for _ in range(3)] == [True, True, False]
        clock.now += 59
        refused = await store.hit("k", 2, 60)
        assert not refused.allowed and refused.retry_after_s() == 1
        clock.now += 1
        fresh = await store.hit("k", 2, 60)
        assert fresh.allowed and fresh.remaining == 1 and fresh.reset_at == clock.now + 60
        await store.refund("k", fresh.reset_at)
        clock.now += 60
        await store.refund("k", fresh.reset_at)  # a refund after the window ended gives nothing to the next one
        assert (await store.peek("k", 2, 60)).remaining == 2
        taken = await store.hit("k", 2, 60)
        clock.now += 60
        assert (await store.hit("k", 2, 60)).remaining == 1  # a new window, opened by another hit
        await store.refund("k", taken.reset_at)  # late: the window it was taken from has ended
        assert (await store.peek("k", 2, 60)).remaining == 1
    finally:
        await store.close()


async def test_a_redis_window_ends_by_expiry(redis_server: RedisServer) -> None:
    store = RedisCounterStore(redis_server.url, key_prefix="expiry:")
    try:
        assert [(await store.hit("k", 1, 0.2)).allowed for _ in range(2)] == [True, False]
        for _ in range(200):  # bounded: the key expires 200 ms after the first hit
            if (await store.hit("k", 1, 0.2)).allowed:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the window never ended")
    finally:
        await store.close()


async def test_a_writer_holding_the_embedded_file_delays_hits_but_never_fails_them(tmp_path: Path) -> None:
    """Another process's long write transaction (as control.sqlite3's writers once held theirs) makes
    hits wait for the lock (BEGIN IMMEDIATE under the busy timeout), not fail with 'database is locked'."""
    path = tmp_path / "counters.sqlite3"
    store = SqliteCounterStore(path)
    counters = Counters(store)
    await counters.hit(Limit("warm", 5))  # the file and its table exist
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO counters (key, count, reset_at) VALUES ('held', 1, 9e18)")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    try:
        release.start()
        decisions = await asyncio.gather(*(counters.hit(Limit("locked", 10)) for _ in range(15)))
    finally:
        release.join()
        holder.close()
        await counters.close()
    assert sum(d.allowed for d in decisions) == 10
    assert not counters.degraded


async def test_processes_opening_a_new_embedded_file_at_the_same_moment_all_count(tmp_path: Path) -> None:
    """As `up` starts control and the edges on a new data directory: every client switching the new file to
    WAL at once. SQLite answered one of two such switches 'database is locked' at once (a deadlock on the lock
    upgrade, so no busy wait) in about one round in ten here, and those first hits failed."""
    for round_ in range(100):
        path = tmp_path / f"counters-{round_}.sqlite3"
        stores = [SqliteCounterStore(path) for _ in range(4)]
        try:
            decisions = await asyncio.gather(*(store.hit("first", 10, 60) for store in stores))
        finally:
            for store in stores:
                await store.close()
        assert sorted(d.remaining for d in decisions) == [6, 7, 8, 9], round_
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


# --- Counters: keys, limits switched off, the fallback -------------------------------------------------

class Switchable:
    """A store wrapper the test can make unreachable."""

    backend = "switchable"

    def __init__(self) -> None:
        self.inner = MemoryCounterStore()
        self.up = True

    def _check(self) -> None:
        if not self.up:
            raise CounterStoreUnavailable("switched off by the test")

    async def hit(self, key: str, limit: int, window_s: float):  # type: ignore[no-untyped-def]
        self._check()
        return await self.inner.hit(key, limit, window_s)

    async def peek(self, key: str, limit: int, window_s: float):  # type: ignore[no-untyped-def]
        self._check()
        return await self.inner.peek(key, limit, window_s)

    async def refund(self, key: str, window_end: float) -> None:
        self._check()
        await self.inner.refund(key, window_end)

    async def ping(self) -> None:
        self._check()

    async def close(self) -> None:
        return None


def test_limit_keys_name_the_subject_and_the_calendar_period() -> None:
    april = datetime(2026, 4, 30, 23, 59, tzinfo=UTC)
    assert Limit("transforms", 5, period="month").key(now=april) == "transforms:2026-04"
    assert Limit("purge:count", 5, period="day").key(now=april) == "purge:count:2026-04-30"
    assert Limit("rl:signed", 300).key("203.0.113.7") == "rl:signed:203.0.113.7"
    assert Limit("transforms", 5, period="month").window_at(april) == 60
    assert Limit("rl:signed", 300, 60).window_at(april) == 60


async def test_a_limit_of_zero_allows_everything_and_sends_no_headers() -> None:
    counters = Counters(MemoryCounterStore())
    decisions = [await counters.hit(Limit("off", 0)) for _ in range(3)]
    assert all(d.allowed for d in decisions) and decisions[0].headers() == {}


async def test_calendar_limits_reset_at_the_period_end_exactly() -> None:
    counters = Counters(MemoryCounterStore())
    decision = await counters.hit(Limit("transforms", 5, period="month"))
    now = datetime.now(UTC)
    first_of_next = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)
    assert decision.headers() == {"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4",
                                  "X-RateLimit-Reset": str(int(first_of_next.timestamp()))}


async def test_an_unreachable_store_falls_back_per_process_from_the_last_count_and_recovers() -> None:
    clock = Clock(1000.0)
    store = Switchable()
    counters = Counters(store, retry_s=5.0, clock=clock)
    limit = Limit("transforms", 5, period="month")
    assert [(await counters.hit(limit)).remaining for _ in range(3)] == [4, 3, 2]
    assert await counters.healthy() and counters.check() == {"backend": "switchable"}

    store.up = False
    fallback = [await counters.hit(limit) for _ in range(3)]
    assert [d.allowed for d in fallback] == [True, True, False]  # continues from the store's count of 3
    assert not await counters.healthy()
    assert counters.check()["fallback"] == "per-process"
    assert (await store.inner.peek(limit.key(), 5, 60)).remaining == 2  # nothing reached the store

    store.up = True
    assert not (await counters.hit(limit)).allowed  # within retry_s: still counted locally (refused)
    assert counters.degraded
    clock.now += 5
    assert (await counters.hit(limit)).remaining == 1  # the store again, from its own count
    assert await counters.healthy() and not counters.degraded


async def test_health_notices_a_store_lost_while_idle() -> None:
    clock = Clock(1000.0)
    store = Switchable()
    counters = Counters(store, retry_s=1.0, clock=clock)
    assert await counters.healthy()
    store.up = False
    clock.now += 10  # nothing used the store for a while: health asks it
    assert not await counters.healthy()


async def test_an_unreachable_redis_is_a_fallback_not_an_error() -> None:
    port = free_port()  # nothing listens there
    counters = Counters(RedisCounterStore(f"redis://127.0.0.1:{port}/0", timeout_s=0.2), retry_s=60)
    try:
        decisions = [await counters.hit(Limit("rl:signed", 2), "198.51.100.1") for _ in range(3)]
        assert [d.allowed for d in decisions] == [True, True, False]
        assert counters.degraded and "redis" in (counters.error_detail() or "")
    finally:
        await counters.close()


def test_the_backend_is_chosen_by_configuration(tmp_path: Path) -> None:
    embedded = counter_store_from_settings({"backend": "embedded", "path": ""}, tmp_path)
    assert isinstance(embedded, SqliteCounterStore) and embedded.path == tmp_path / "counters.sqlite3"
    assert isinstance(counter_store_from_settings({"backend": "memory"}, tmp_path), MemoryCounterStore)
    with pytest.raises(ValueError, match="redis_url"):
        counter_store_from_settings({"backend": "redis", "redis_url": ""}, tmp_path)
    with pytest.raises(ValueError, match="unknown"):
        counter_store_from_settings({"backend": "etcd"}, tmp_path)


async def test_a_refund_while_the_store_is_unreachable_gives_back_exactly_one_hit() -> None:
    clock = Clock(1000.0)
    store = Switchable()
    counters = Counters(store, retry_s=5.0, clock=clock)
    limit = Limit("purge:count", 5, period="day")
    store.up = False
    taken = [await counters.hit(limit) for _ in range(4)]
    assert [d.remaining for d in taken] == [4, 3, 2, 1]
    await counters.refund(taken[-1])
    assert (await counters.peek(limit)).remaining == 2
    store.up = True
    clock.now += 5
    again = await counters.hit(limit)
    assert again.remaining == 4  # the store's own count again (it saw none of them)
    await counters.refund(again)
    assert (await counters.peek(limit)).remaining == 5


class FrozenDateTime(datetime):
    """datetime whose now() is set by the test (the counters name calendar periods from it)."""

    moment = datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)

    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def,override]
        return cls.moment


@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_a_refund_after_the_period_ended_credits_nothing_to_the_new_one(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("assetcdn.shared.counter_store.datetime", FrozenDateTime)
    store: CounterStore = MemoryCounterStore() if backend == "memory" else SqliteCounterStore(tmp_path / "c.sqlite3")
    counters = Counters(store)
    try:
        for limit in (Limit("transforms", 5, period="month"), Limit("purge:count", 5, period="day")):
            FrozenDateTime.moment = datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)
            taken = await counters.hit(limit)  # the last second of November
            FrozenDateTime.moment = datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)
            assert (await counters.hit(limit)).remaining == 4  # December's first
            await counters.refund(taken)  # the work paid in November failed: November's count, not December's
            assert (await counters.peek(limit)).remaining == 4
    finally:
        await counters.close()


async def test_a_refused_hit_and_a_limit_switched_off_refund_nothing() -> None:
    counters = Counters(MemoryCounterStore())
    limit = Limit("rl:x", 1, 60.0)
    taken = await counters.hit(limit, "a")
    refused = await counters.hit(limit, "a")
    assert not refused.allowed
    await counters.refund(refused)
    assert (await counters.peek(limit, "a")).remaining == 0
    await counters.refund(await counters.hit(Limit("rl:x", 0, 60.0), "a"))
    assert (await counters.peek(limit, "a")).remaining == 0
    await counters.refund(taken)
    assert (await counters.peek(limit, "a")).remaining == 1


async def test_recent_answers_from_this_process_for_a_second_then_asks_the_store() -> None:
    clock = Clock(1000.0)
    shared = MemoryCounterStore()
    here, there = Counters(shared, clock=clock), Counters(shared, clock=clock)
    limit = Limit("transforms", 10, period="month")
    assert (await here.hit(limit)).remaining == 9
    assert (await there.hit(limit)).remaining == 8          # another process counts one more
    assert (await here.recent(limit)).remaining == 9        # what this process learnt, under a second old
    clock.now += 1.5
    assert (await here.recent(limit)).remaining == 8        # older than that: the store is asked
    assert (await Counters(shared, clock=clock).recent(Limit("transforms", 0, period="month"))).limit == 0


class _CommitFailsOnce:
    """A connection whose next COMMIT fails as a full disk or an I/O error makes it fail: SQLite then
    leaves the transaction open."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.failed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT" and not self.failed:
            self.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


async def test_a_failed_commit_leaves_the_embedded_store_usable(tmp_path: Path) -> None:
    """A COMMIT that failed left its transaction open, so every later BEGIN IMMEDIATE failed ('cannot
    start a transaction within a transaction') and every process's limits stayed on the in-memory
    fallback until restart. The failed hit is rolled back and the next one is counted."""
    store = SqliteCounterStore(tmp_path / "counters.sqlite3")
    try:
        assert (await store.hit("k", 5, 60)).allowed
        store._db = _CommitFailsOnce(store._connect())  # type: ignore[assignment]
        with pytest.raises(CounterStoreUnavailable):
            await store.hit("k", 5, 60)
        decision = await store.hit("k", 5, 60)
        assert decision.allowed and decision.remaining == 3  # the failed hit was not counted
    finally:
        await store.close()
