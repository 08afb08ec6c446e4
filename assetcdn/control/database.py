"""The control plane's SQLite database (aiosqlite, WAL): zones' metadata, tokens, manifest history,
sign-in state (failed attempts, signed-out sessions, passkeys and their pending challenges),
webhooks with their event outbox and deliveries (``control.webhooks``).

Other modules (analytics, audit, the request log) open their own tables in the same file.
"""

from __future__ import annotations

from pathlib import Path

import aiosqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS zones (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    suspended INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    last_used_at TEXT,
    revoked_at TEXT
);
CREATE TABLE IF NOT EXISTS manifest_generations (
    generation INTEGER PRIMARY KEY,
    commit_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    changes BLOB NOT NULL,
    purge BLOB
);
-- Limits are counted in the shared counter store (assetcdn/shared/counter_store.py) since it
-- replaced these tables; an older database loses them here.
DROP TABLE IF EXISTS daily_counters;
CREATE TABLE IF NOT EXISTS domains (
    hostname TEXT PRIMARY KEY,
    zone TEXT NOT NULL,
    created_at TEXT NOT NULL,
    ssl_status TEXT NOT NULL DEFAULT 'provisioning'
);
CREATE TABLE IF NOT EXISTS webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    created_at TEXT NOT NULL,
    secret_ciphertext BLOB NOT NULL,  -- AES-GCM under a key derived from ASSETCDN_WEBHOOK_SECRET_KEY
    secret_nonce BLOB NOT NULL,
    secret_last_four TEXT NOT NULL,
    after_seq INTEGER NOT NULL        -- receives the events recorded after it was registered
);
CREATE TABLE IF NOT EXISTS webhook_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,          -- a commit's events: '<commit>-<n>', so re-deriving them is idempotent
    event TEXT NOT NULL,
    body BLOB NOT NULL,               -- the exact bytes posted and signed, the same on every attempt
    created_at REAL NOT NULL,
    state TEXT NOT NULL,              -- 'ready', or 'held' while its data is completed (purge acks)
    dispatched INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS webhook_events_undispatched ON webhook_events (dispatched, state, seq);
CREATE TABLE IF NOT EXISTS webhook_outbox_cursor (
    name TEXT PRIMARY KEY,
    commit_id TEXT                    -- the last commit whose events are in webhook_events
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id TEXT PRIMARY KEY,
    webhook_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    state TEXT NOT NULL,              -- pending, delivered or dead
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    delivered_at REAL,
    last_status INTEGER,
    last_error TEXT,
    UNIQUE (webhook_id, event_seq)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (webhook_id, state, next_attempt_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_state ON webhook_deliveries (state, updated_at);
CREATE TABLE IF NOT EXISTS blob_hashes (
    blob_id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL
);
DROP TABLE IF EXISTS login_attempts;
CREATE TABLE IF NOT EXISTS ended_sessions (
    nonce TEXT PRIMARY KEY,
    expires INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS passkeys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    public_key BLOB NOT NULL,
    algorithm INTEGER NOT NULL,
    sign_count INTEGER NOT NULL,
    transports TEXT NOT NULL,
    device_type TEXT,
    backed_up INTEGER NOT NULL DEFAULT 0,
    aaguid TEXT,
    created_at TEXT NOT NULL,
    last_used_at TEXT
);
CREATE TABLE IF NOT EXISTS webauthn_challenges (
    challenge TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    ip TEXT NOT NULL,
    expires REAL NOT NULL
);
"""


async def open_database(path: Path) -> aiosqlite.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(str(path))
    try:
        db.row_factory = aiosqlite.Row
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=5000")
        await db.executescript(SCHEMA)
        await db.commit()
    except BaseException:
        # Its worker thread is not a daemon: an unclosed connection would keep the process alive.
        await db.close()
        raise
    return db


async def open_connection(path: Path) -> aiosqlite.Connection:
    """A second connection to the same file for a module that writes on its own (analytics, the
    request log): autocommit mode, so each write opens its own explicit transaction."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(str(path), isolation_level=None)
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=5000")
    except BaseException:
        await db.close()
        raise
    return db
