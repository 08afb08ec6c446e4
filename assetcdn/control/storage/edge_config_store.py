"""What edges need besides the manifest: the `_headers` / `_redirects` rules (files at the root of the
git repository), the custom-domain map and the pull zones' origins (SQLite). Its version is a hash of its content, so an edge
compares one string on every push or catch-up and fetches the config only when it changed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from assetcdn.control.app_keys import public_url_of
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.git_store import GitStore
from assetcdn.shared.config import Settings
from assetcdn.shared.dashboard_url import dashboard_url
from assetcdn.shared.edge_rules import RULE_FILES
from assetcdn.shared.paths import CLIENT_ROOT
from assetcdn.shared.published_config import PublishedConfig
from assetcdn.shared.pull_origin import PullOrigin, parse_origin
from assetcdn.shared.timestamps import utc_now_iso


async def zone_names(git: GitStore) -> list[str]:
    """The zones that exist: the directories under the clients' root in git (the truth)."""
    children = await git.run(git.list_dir, CLIENT_ROOT) or []
    return sorted(name for name, is_dir, _oid, _size in children if is_dir)


class DomainLimitReached(Exception):
    """Adding a domain would pass a cap: `scope` is "zone" or "installation"."""

    def __init__(self, scope: str, limit: int) -> None:
        super().__init__(scope, limit)
        self.scope, self.limit = scope, limit


@dataclass(frozen=True)
class Domain:
    hostname: str
    zone: str
    created_at: str
    ssl_status: str

    def to_json(self) -> dict[str, str]:
        return {"Hostname": self.hostname, "Zone": self.zone, "SslStatus": self.ssl_status,
                "DateCreated": self.created_at}


class EdgeConfigStore:
    def __init__(self, git: GitStore, db: Database, base_domain: str, own_hosts: frozenset[str] = frozenset()) -> None:
        self.git = git
        self.db = db
        self.base_domain = base_domain
        # The CDN's own hosts are never published as a zone's, even from a row stored before they were refused.
        self.own_hosts = own_hosts
        self._snapshot: dict[str, Any] | None = None
        self._epoch = 0  # bumped by every change, so a snapshot built across a change is not kept
        # Held across a zone's origin change (the zone's existence checked, the origin read, written, published,
        # and the cache purged when it changed) and a zone's deletion of its origin, so none of them interleave; and
        # across a custom domain's addition (the zone checked again), which a zone's deletion waits for before it
        # removes the zone's domains.
        self.origin_changes = asyncio.Lock()

    def invalidate(self) -> None:
        self._snapshot = None
        self._epoch += 1

    async def rules(self) -> dict[str, str | None]:
        found = {}
        for name in RULE_FILES:
            item = await self.git.run(self.git.read_file, name)
            found[name] = item[1].decode("utf-8") if item else None
        return found

    async def snapshot(self) -> dict[str, Any]:
        if self._snapshot is not None:
            return self._snapshot
        epoch = self._epoch
        rules = await self.rules()
        # Only the origins and domains of zones that exist: a deletion stopped between its commit and the removal of
        # its origin and domains (control killed) must not leave the deleted zone's paths pulled on every edge, nor
        # its names mapped to it.
        zones = set(await zone_names(self.git))
        domains = {d.hostname: d.zone for d in await self.domains()
                   if d.hostname not in self.own_hosts and d.zone in zones}
        origins = {zone: origin for zone, origin in (await self.origins()).items() if zone in zones}
        # The edges read `<label>.<base domain>` as a zone's tenant host: not those of the CDN's own hosts.
        base = "." + self.base_domain.strip(".").lower()
        own = tuple(sorted(host for host in self.own_hosts if base != "." and host.endswith(base)))
        snapshot = PublishedConfig.build(headers=rules["_headers"], redirects=rules["_redirects"], domains=domains,
                                         base_domain=self.base_domain, origins=origins, own_hosts=own).to_json()
        if epoch == self._epoch:  # nothing changed while we read: safe to keep
            self._snapshot = snapshot
        return snapshot

    async def version(self) -> str:
        return (await self.snapshot())["version"]

    # --- domains ---

    async def domains(self, zone: str | None = None) -> list[Domain]:
        query = "SELECT hostname, zone, created_at, ssl_status FROM domains"
        args: tuple[str, ...] = ()
        if zone is not None:
            query += " WHERE zone = ?"
            args = (zone,)
        rows = await self.db.fetch(query + " ORDER BY hostname", args)
        return [Domain(r[0], r[1], r[2], r[3]) for r in rows]

    async def domain(self, hostname: str) -> Domain | None:
        row = await self.db.fetch_one("SELECT hostname, zone, created_at, ssl_status FROM domains WHERE hostname = ?",
                                      (hostname,))
        return Domain(row[0], row[1], row[2], row[3]) if row else None

    async def add_domain(self, hostname: str, zone: str, *, max_per_zone: int = 0, max_total: int = 0) -> Domain:
        """Insert a domain; DomainLimitReached when the zone or the installation already has its cap (0 = none),
        counted in the insert's own transaction so concurrent adds cannot pass it together."""
        domain = Domain(hostname, zone, utc_now_iso(), "provisioning")
        async with self.db.transaction() as tx:
            if max_per_zone:
                ((in_zone,),) = await tx.fetch("SELECT COUNT(*) FROM domains WHERE zone = ?", (zone,))
                if in_zone >= max_per_zone:
                    raise DomainLimitReached("zone", max_per_zone)
            if max_total:
                ((in_all,),) = await tx.fetch("SELECT COUNT(*) FROM domains")
                if in_all >= max_total:
                    raise DomainLimitReached("installation", max_total)
            await tx.execute("INSERT INTO domains (hostname, zone, created_at, ssl_status) VALUES (?, ?, ?, ?)",
                             (domain.hostname, domain.zone, domain.created_at, domain.ssl_status))
        self.invalidate()
        return domain

    async def remove_domain(self, hostname: str) -> bool:
        removed = await self.db.write("DELETE FROM domains WHERE hostname = ?", (hostname,))
        self.invalidate()
        return removed > 0

    async def remove_zone_domains(self, zone: str) -> None:
        await self.db.write("DELETE FROM domains WHERE zone = ?", (zone,))
        self.invalidate()

    # --- pull zones' origins ---

    async def origins(self) -> dict[str, PullOrigin]:
        rows = await self.db.fetch("SELECT zone, origin FROM zone_origins ORDER BY zone")
        return {zone: parse_origin(orjson.loads(origin)) for zone, origin in rows}

    async def origin(self, zone: str) -> PullOrigin | None:
        row = await self.db.fetch_one("SELECT origin FROM zone_origins WHERE zone = ?", (zone,))
        return parse_origin(orjson.loads(row[0])) if row else None

    async def set_origin(self, zone: str, origin: PullOrigin) -> None:
        await self.db.write("INSERT INTO zone_origins (zone, origin, updated_at) VALUES (?, ?, ?) "
                            "ON CONFLICT (zone) DO UPDATE SET origin = excluded.origin, updated_at = excluded.updated_at",
                            (zone, orjson.dumps(origin.to_json()).decode(), utc_now_iso()))
        self.invalidate()

    async def remove_origin(self, zone: str) -> bool:
        removed = await self.db.write("DELETE FROM zone_origins WHERE zone = ?", (zone,))
        self.invalidate()
        return removed > 0


def canonical_host(host: str) -> str:
    """A host as domain records are kept: lower case, without the trailing dot of an absolute name."""
    return host.strip().lower().rstrip(".")


def url_host(url: str) -> str:
    return canonical_host(urlsplit(url).hostname or "")


def own_hosts(settings: Settings, origins: Iterable[str] = ()) -> dict[str, str]:
    """The hosts this installation answers on by configuration, each with the setting that names it: the
    public URL's, the dashboard's (its URL and origins), control's listening host and the CNAME target."""
    named = {
        url_host(public_url_of(settings)): "server.public_url",
        canonical_host(settings.get("server", "host")): "server.host",
        url_host(dashboard_url(settings)): "dashboard.public_url",
        canonical_host(settings.get("domains", "cname_target")): "domains.cname_target",
    }
    for origin in origins:
        named.setdefault(url_host(origin), "dashboard.origins")
    named.pop("", None)
    return named
