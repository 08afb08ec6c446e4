"""Several machines: counters in Redis."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from assetcdn.shared.counter_backends.base import (
    SAME_WINDOW_S,
    CounterStoreUnavailable,
    Decision,
    decision,
)

T = TypeVar("T")
REDIS_CONNECTIONS = 8     # per process

# KEYS[1]; ARGV: limit, window in ms. A key without an expiry (absent, or left by hand) starts a window.
_HIT = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  count = 0
  ttl = tonumber(ARGV[2])
  redis.call('SET', KEYS[1], 0, 'PX', ttl)
end
if count >= tonumber(ARGV[1]) then
  return {0, count, ttl}
end
return {1, redis.call('INCR', KEYS[1]), ttl}
"""
_PEEK = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return {0, -1} end
return {tonumber(redis.call('GET', KEYS[1]) or '0'), ttl}
"""
# ARGV[1]: the longest the taken window may still have to run, in ms (a later window runs longer).
_REFUND = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 or ttl > tonumber(ARGV[1]) then return 0 end
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 0
"""


class RedisCounterStore:
    """The counters in Redis: each operation one Lua script, atomic on the server. Windows end by
    Redis's own expiry, so the machines' clocks do not have to agree."""

    backend = "redis"

    def __init__(self, url: str, *, key_prefix: str = "", timeout_s: float = 1.0) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        self._prefix = key_prefix
        self._timeout_s = timeout_s
        # A few connections, reused: a burst of requests queues for one, first come first served (each
        # script takes microseconds), instead of opening one connection per request. One retry: a pooled
        # connection broken by a Redis restart fails once, then reconnects.
        pool = aioredis.ConnectionPool.from_url(
            url, max_connections=REDIS_CONNECTIONS, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1))
        self._redis = aioredis.Redis(connection_pool=pool)
        self._turns = asyncio.Semaphore(REDIS_CONNECTIONS)
        self._hit = self._redis.register_script(_HIT)
        self._peek = self._redis.register_script(_PEEK)
        self._refund = self._redis.register_script(_REFUND)

    async def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s * 3):  # a turn, connecting, the command
                async with self._turns:
                    return await work()
        except self._errors as exc:
            raise CounterStoreUnavailable(f"redis: {type(exc).__name__}: {exc}") from exc

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        window_ms = max(int(window_s * 1000), 1)
        allowed, used, ttl = await self._call(lambda: self._hit(keys=[self._prefix + key], args=[limit, window_ms]))
        now = time.time()
        return decision(bool(allowed), limit, int(used), now + int(ttl) / 1000, now)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        used, ttl = await self._call(lambda: self._peek(keys=[self._prefix + key]))
        now = time.time()
        if int(ttl) < 0:
            return decision(limit > 0, limit, 0, now + window_s, now)
        return decision(int(used) < limit, limit, int(used), now + int(ttl) / 1000, now)

    async def refund(self, key: str, window_end: float) -> None:
        left_ms = max(int((window_end + SAME_WINDOW_S - time.time()) * 1000), 0)
        await self._call(lambda: self._refund(keys=[self._prefix + key], args=[left_ms]))

    async def ping(self) -> None:
        await self._call(self._redis.ping)

    async def close(self) -> None:
        with contextlib.suppress(*self._errors):
            await self._redis.aclose()

