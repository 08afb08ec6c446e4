"""Zones: a zone exists while its `clients/<zone>/` tree exists in git; SQLite keeps what git cannot
(created date, Enabled and Suspended flags)."""

from __future__ import annotations

from dataclasses import dataclass

from assetcdn.control.storage.database import Database
from assetcdn.shared.timestamps import utc_now_iso


@dataclass(frozen=True)
class ZoneMeta:
    name: str
    created_at: str
    enabled: bool
    suspended: bool


class ZoneStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, name: str) -> ZoneMeta | None:
        row = await self.db.fetch_one("SELECT name, created_at, enabled, suspended FROM zones WHERE name = ?",
                                      (name,))
        return ZoneMeta(row[0], row[1], bool(row[2]), bool(row[3])) if row else None

    async def ensure(self, name: str, created_at: str | None = None) -> ZoneMeta:
        await self.db.write("INSERT OR IGNORE INTO zones (name, created_at) VALUES (?, ?)",
                            (name, created_at or utc_now_iso()))
        meta = await self.get(name)
        assert meta is not None
        return meta

    async def remove(self, name: str) -> None:
        await self.db.write("DELETE FROM zones WHERE name = ?", (name,))

    async def all(self) -> dict[str, ZoneMeta]:
        rows = await self.db.fetch("SELECT name, created_at, enabled, suspended FROM zones")
        return {r[0]: ZoneMeta(r[0], r[1], bool(r[2]), bool(r[3])) for r in rows}
