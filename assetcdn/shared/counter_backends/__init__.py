"""The stores limits are counted in (assetcdn/shared/counter_store.py uses them), one module each.

- `sqlite.SqliteCounterStore` ("embedded", the default): one SQLite file every process on the machine
  opens (control, every edge, every worker), `<data_dir>/counters.sqlite3`; each hit is one
  `BEGIN IMMEDIATE` transaction (the write lock is taken before the count is read) under a busy
  timeout, in a file of its own, so other SQLite writers never make a counter write fail.
- `redis.RedisCounterStore` ("redis"): one Lua script per hit (read, start the window with its expiry,
  increment), for edges on several machines.
- `memory.MemoryCounterStore`: this process only; the fallback when the store cannot be reached, and tests.

Each implements `base.CounterStore`, atomically, so concurrent callers in any number of processes never
pass a limit together.
"""
