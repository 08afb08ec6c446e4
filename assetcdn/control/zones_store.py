"""Zones: a zone exists while its `clients/<zone>/` tree exists in git; SQLite keeps what git cannot
(created date, Enabled and Suspended flags)."""

from __future__ import annotations

from dataclasses import dataclass

import aiosqlite

from assetcdn.shared.errors import utc_now_iso


@dataclass(frozen=True)
class ZoneMeta:
    name: str
    created_at: str
    enabled: bool
    suspended: bool


class ZoneStore:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def get(self, name: str) -> ZoneMeta | None:
        async with self.db.execute("SELECT name, created_at, enabled, suspended FROM zones WHERE name = ?",
                                   (name,)) as cur:
            row = await cur.fetchone()
        return ZoneMeta(row[0], row[1], bool(row[2]), bool(row[3])) if row else None

    async def ensure(self, name: str, created_at: str | None = None) -> ZoneMeta:
        await self.db.execute("INSERT OR IGNORE INTO zones (name, created_at) VALUES (?, ?)",
                              (name, created_at or utc_now_iso()))
        await self.db.commit()
        meta = await self.get(name)
        assert meta is not None
        return meta

    async def remove(self, name: str) -> None:
        await self.db.execute("DELETE FROM zones WHERE name = ?", (name,))
        await self.db.commit()

    async def all(self) -> dict[str, ZoneMeta]:
        async with self.db.execute("SELECT name, created_at, enabled, suspended FROM zones") as cur:
            rows = await cur.fetchall()
        return {r[0]: ZoneMeta(r[0], r[1], bool(r[2]), bool(r[3])) for r in rows}
