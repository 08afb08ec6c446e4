"""One edge worker's state: manifest replica, cache, control client and request coalescing.

It applies pushes and purges from control and catches up on its own when it missed some.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from assetcdn.edge.access_log import access_log_from_settings
from assetcdn.edge.cache.applied import GenerationPurge
from assetcdn.edge.cache.coalesce import SingleFlight
from assetcdn.edge.cache.store import EdgeCache
from assetcdn.edge.cache.tags import path_tag, pull_path_tag
from assetcdn.edge.cdn_loop import fleet_id
from assetcdn.edge.control_client import ControlClient, NotFoundAtControl, run_sync_loop
from assetcdn.edge.delivery_log import DeliveryLog
from assetcdn.edge.origin_client import OriginClient, OriginLimits
from assetcdn.edge.replica import ManifestReplica
from assetcdn.edge.shield import Shields
from assetcdn.edge.site_config import EdgeConfig, PullZone
from assetcdn.edge.states.keys import PULL_KEY_PREFIX
from assetcdn.edge.states.recv import PullPath, purge_named, purge_prefix_named
from assetcdn.edge.states.too_large import TooLarge
from assetcdn.edge.tls.state import EdgeTlsState
from assetcdn.shared.config import Settings
from assetcdn.shared.generation_push import GenerationPush, PushedPurge
from assetcdn.shared.manifest import zone_tag
from assetcdn.shared.metrics import Metrics
from assetcdn.shared.published_config import PublishedConfig
from assetcdn.shared.purge_targets import split_target
from assetcdn.shared.tls_state import TlsStateError

log = logging.getLogger(__name__)
FINAL_SHIP_TIMEOUT_S = 2.0
PURGED_REMEMBERED = 64  # generations whose purge counts a late push may still ask for
# How often the TLS state is pulled when control's catch-up answer does not say its serial (a push
# brings changes at once; this is for a missed push, or a control that predates TLS state).
TLS_PULL_INTERVAL_S = 30.0


def store_writer() -> ThreadPoolExecutor:
    """The thread an edge worker writes its pull zone responses to the cache from (`EdgeNode.stores`)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="pull-store")


class EdgeNode:
    def __init__(self, settings: Settings, name: str, control: ControlClient, cache: EdgeCache,
                 state_dir: Path, metrics: Metrics, stores: Executor | None = None) -> None:
        self.settings = settings
        self.name = name
        self.control = control
        self.cache = cache
        # Pull zone responses are written to the cache one at a time, from one thread (assetcdn/edge/states/pull.py):
        # SQLite takes one writer at a time anyway, and writers contending for its lock wait in its busy handler's
        # sleeps (a fill's latency, not CPU). Its owner shuts it down once the cache is closed (assetcdn/edge/app.py).
        self.stores = stores if stores is not None else store_writer()
        self._purged_at: OrderedDict[int, int] = OrderedDict()  # generation -> cache entries its purges removed
        self.metrics = metrics
        self.replica = ManifestReplica(state_dir / "manifest.json")
        self.config = EdgeConfig()
        analytics = settings.section("analytics")
        self.deliveries = DeliveryLog(
            analytics["country_header"], node=name, log_per_s=int(analytics["log_deliveries_per_s"]),
            errors_per_s=int(analytics["log_errors_per_s"]), tail_per_s=int(analytics["log_tail_per_s"]),
            access=access_log_from_settings(settings.section("access_log"), name, state_dir / "access-logs"),
            zones=self.counted_zones, paths_per_hour=int(analytics["paths_per_zone_hour"]))
        self.config_file = state_dir / "edge-config.json"
        # Certificates and ACME answers from control (assetcdn/edge/tls/state.py); pulled on catch-up.
        self.tls = EdgeTlsState(control.cluster_secret, state_dir / "tls-state.json")
        self.fleet = fleet_id(control.cluster_secret)  # in CDN-Loop (assetcdn/edge/cdn_loop.py)
        self._tls_pull_at = 0.0
        self.flight: SingleFlight[Any] = SingleFlight()
        # Pull zones' origins (assetcdn/edge/origin_client.py), and the background revalidations they start.
        self.origins = OriginClient(OriginLimits.from_settings(settings))
        # Pull zone URLs whose chunked body this worker found over `origin.max_object_mb` while reading it
        # (assetcdn/edge/states/pull.py `found_too_large`): answered as bodies declared too large, for a while.
        self.too_large = TooLarge()
        # Which edge a pull zone URL's cache fill asks before its origin (assetcdn/edge/shield.py), with the
        # generation whose purges this node has begun: a sibling's or its own not yet handed back count too.
        self.shields = Shields(settings, name, control.cluster_secret, self.origins, lambda: control.edges,
                               lambda: max(self.applied_generation, self.cache.purge_generation()))
        self.background: set[asyncio.Task[None]] = set()
        self._sync_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._cluster_url = ""  # the address this worker registered with control (`start`)
        self.synced = False  # caught up with control at least once since this process started
        edge = settings.section("edge")
        self.reachability_window_s = max(3 * float(edge["catchup_interval_s"]), float(edge["reachable_for_s"]))
        self.stale_if_error_s = float(edge["stale_if_error_s"])
        self.asset_cache_control = f"public, max-age={int(edge['asset_max_age_s'])}"
        self.confirmed_at = 0.0  # monotonic time this edge last confirmed it holds control's generation
        # The generation whose changes and purges are all applied (the replica's moves first, before the
        # purges run): what health reports, so "at generation N" means N's purges are done here.
        self.applied_generation = 0
        # The config held before the latest one taken, until the generations that came with it are applied: their
        # purges may have been made under it (`_purge_of`). The first one replaced since then is kept.
        self._replaced_config: EdgeConfig | None = None
        # The config saved in `config_file`: its retired origins purged (`_refresh_config`). `config` is taken
        # before that purge; while the purge has not succeeded (`_unsaved`), the next refresh purges again.
        self._saved_config = self.config
        self._unsaved = False

    def load_persisted(self) -> None:
        """What this edge knew before a restart, so it can serve (STALE) while control is unreachable."""
        self.replica.load_persisted()
        self._applied()  # the series from the start, a restarted worker's too: not only once something changes
        self.tls.load_persisted()
        try:
            self.config = self._saved_config = EdgeConfig.from_published(
                PublishedConfig.from_json(orjson.loads(self.config_file.read_bytes())), self.fleet)
        except (FileNotFoundError, ValueError):   # orjson.JSONDecodeError is a ValueError
            pass

    async def _refresh_config(self, version: str | None) -> None:
        """Take control's config when `version` is not the one held, or when the one held is not saved yet (its
        purge failed); the one it replaces is kept for the purges of the generations that come with it
        (`_replaced_config`)."""
        if not version or (version == self.config.version and not self._unsaved):
            return
        published = await self.control.config()
        if self._replaced_config is None:
            self._replaced_config = self.config
        self.config = EdgeConfig.from_published(published, self.fleet)  # from here no fill keeps a retired origin's answer
        self._unsaved = True
        # Against the saved config, not the one held: a purge that failed is made again, until one succeeds.
        retired = retired_origins(self._saved_config.pull_zones, self.config.pull_zones)
        if retired:
            # Control purges such a zone once it has published the change, and the purge runs once per edge: a
            # worker that took the change later may have filled from the old origin into the shared disk tier
            # after it. Each worker purges the zone when it takes the change (every worker's memory too), before
            # the config is saved: a worker stopped in between compares the saved one again when it starts.
            tags = [zone_tag(name) for name in retired]
            await asyncio.get_running_loop().run_in_executor(None, self.cache.purge_tags, tags)
        tmp = self.config_file.with_name(f"{self.config_file.name}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(published.to_json()))
        os.replace(tmp, self.config_file)
        self._saved_config = self.config
        self._unsaved = False

    async def start(self, cluster_url: str) -> None:
        """Start the background work: register with control, heartbeat and catch up on a short timer. Returns once
        the first catch-up is applied (or failed, or `edge.control_probe_timeout_s` has passed): the caller listens
        for clients after it, so that a worker started again does not answer from its disk tier what a purge made
        while it was down removed (a pull zone's answers do not wait for control, and would be HITs)."""
        edge = self.settings.section("edge")
        self.shields.own_url = cluster_url.rstrip("/")
        self._cluster_url = cluster_url
        first_round = asyncio.Event()
        self._tasks.append(asyncio.create_task(run_sync_loop(
            self.control, name=self.name, url=cluster_url, get_generation=lambda: self.replica.generation,
            catch_up=self.catch_up, interval_s=float(edge["catchup_interval_s"]),
            heartbeat_s=float(edge["heartbeat_interval_s"]), retry_s=float(edge["control_retry_s"]),
            first_round=first_round)))
        self._tasks.append(asyncio.create_task(self.deliveries.ship_forever(
            self.control, float(self.settings.get("analytics", "flush_interval_s")))))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(first_round.wait(), float(edge["control_probe_timeout_s"]))

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            # What was served before shutdown still counts, if control is there to take it soon.
            await asyncio.wait_for(self.deliveries.ship(self.control, final=True), timeout=FINAL_SHIP_TIMEOUT_S)
        if self.deliveries.access is not None:
            self.deliveries.access.close()
        for task in [*self._tasks, *self.background]:
            task.cancel()
        for task in [*self._tasks, *self.background]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._tasks and self._cluster_url:  # registered (or trying to): control forgets this worker now, rather
            # than counting it as an edge not heard from lately in every answer until control restarts
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.control.leave(self.name, self._cluster_url), timeout=FINAL_SHIP_TIMEOUT_S)
        self._tasks.clear()
        await self.origins.close()
        await asyncio.get_running_loop().run_in_executor(None, self.cache.flush_writes)  # fills kept in memory

    def counted_zones(self) -> Container[str]:
        """The zones delivery counts may name (assetcdn/edge/delivery_log.py): those that hold a file, and the pull
        zones, which may hold none (their paths are their origin's)."""
        return CountedZones(self.replica.zones(), self.config.pull_zones)

    def control_reachable(self) -> bool:
        return self.control.reachable(self.reachability_window_s)

    def hit_status(self) -> str | None:
        """How a cached file may be served now: "HIT" while control is reachable, "STALE" while it is not
        (stale-if-error: the file cannot be confirmed current) for up to `stale_if_error_s` after the
        last contact with control (or this process's start), then None: not served from cache at all."""
        if self.control.reachable(self.reachability_window_s):  # control_reachable, one call less per batch of hits
            return "HIT"
        if self.stale_if_error_s <= 0 or self.control.seconds_since_contact() <= self.stale_if_error_s:
            return "STALE"
        return None

    def sync_status(self) -> dict[str, Any]:
        """What health reports of this edge's view of control: the breaker, the time since control last
        answered, and how far behind this edge may be (the generation control last reported, and for how
        long this edge has not been able to confirm it is current)."""
        now = time.monotonic()
        behind = max(self.control.generation_seen - self.replica.generation, 0)
        return {"circuit": self.control.breaker.state,
                "lastContactSecondsAgo": round(self.control.seconds_since_contact(), 1),
                "controlGeneration": self.control.generation_seen,
                "generationsBehind": behind,
                "lagSeconds": round(now - self.confirmed_at, 1) if self.confirmed_at else None}

    # --- manifest ---

    async def catch_up(self) -> int:
        """Ask control for the changes since our generation and apply them (and a newer TLS state).
        Returns the generation."""
        async with self._sync_lock:
            answer = await self.control.changes_since(self.replica.generation)
            generation = await self._catch_up(answer)
        await self.refresh_tls(answer.tls_serial)
        return generation

    async def refresh_tls(self, advertised: int | None = None) -> None:
        """Pull control's TLS state when its catch-up answer names a newer serial, or, when it names
        none, at most every TLS_PULL_INTERVAL_S. A control that answers 404 has no TLS state yet."""
        if advertised is not None:
            if advertised <= self.tls.serial:
                return
        elif time.monotonic() < self._tls_pull_at:
            return
        self._tls_pull_at = time.monotonic() + TLS_PULL_INTERVAL_S
        try:
            message = await self.control.tls_state()
        except NotFoundAtControl:
            return
        try:
            await self.tls.apply(message)
        except TlsStateError as exc:
            log.warning("control's TLS state not applied: %s", exc)

    async def _catch_up(self, answer: GenerationPush) -> int:
        """Apply a catch-up answer (under the sync lock)."""
        await self._refresh_config(answer.config_version)
        generation = answer.generation
        if generation == self.replica.generation and answer.entries is None:
            self._replaced_config = None
            self.replica.loaded = True  # confirmed current (an empty repository has generation 0)
            self.synced = True
            self.confirmed_at = time.monotonic()
            return generation
        restart = generation < self.replica.generation  # control's history is gone: numbers start again
        if answer.entries is not None:
            # Too far behind to replay: whatever purges we missed are unknown, so empty the cache (once
            # per node: not when another worker has brought it to this generation already).
            self.replica.replace(generation, answer.commit, answer.entries)
            purged = await self._apply_purges([GenerationPurge(generation, everything=True)], generation,
                                              restart=restart)
            self._remember_purged(generation, purged)
            self._persist()
            self.confirmed_at = time.monotonic()
        else:
            await self._apply_generations(answer, restart=restart)
        self._replaced_config = None
        self.synced = True
        return generation

    async def apply_push(self, push: GenerationPush) -> tuple[int, int]:
        """Apply one pushed generation; returns (generation now held, cache entries purged)."""
        generation = push.generation
        async with self._sync_lock:
            await self._refresh_config(push.config_version)
            if generation == self.replica.generation + 1 and push.entries is None:
                purged = await self._apply_generations(push)
                self._replaced_config = None
                applied = True
            else:
                applied = generation <= self.replica.generation
                if applied:
                    self._replaced_config = None
                # Taken already, by a catch-up that ran between control recording it and pushing it:
                # answer with what that removed, so the purge's report still counts this edge's entries.
                purged = self._purged_at.get(generation, 0)
        if not applied:
            await self.catch_up()  # we missed a generation: fetch everything since ours
            # What that catch-up's purges removed, counted under the last generation it brought (this one's, unless
            # control has moved on meanwhile): the purge's report counts this edge's entries.
            purged = self._purged_at.get(generation, 0)
        return self.replica.generation, purged

    async def _apply_generations(self, delta: GenerationPush, *, restart: bool = False) -> int:
        """Apply the changes and purges of the generations `delta` brings this worker up to (under the sync
        lock); returns the cache entries its purges removed. Each purge runs as part of its own generation."""
        at = {c.change.path: c.generation for c in delta.changes}
        invalidated = self.replica.apply_changes(delta.generation, delta.commit, [c.change for c in delta.changes])
        purges = [GenerationPurge(at[c.path], (path_tag(c.path),)) for c in invalidated]
        replaced = self._replaced_config
        configs = (self.config,) if replaced is None else (self.config, replaced)
        purges += [self._purge_of(command, configs) for command in delta.purges]
        purged = await self._apply_purges(purges, delta.generation, restart=restart)
        if purges:
            self._remember_purged(max(p.generation for p in purges), purged)
        self._persist()
        self.confirmed_at = time.monotonic()
        return purged

    def _remember_purged(self, generation: int, purged: int) -> None:
        self._purged_at[generation] = purged
        while len(self._purged_at) > PURGED_REMEMBERED:
            self._purged_at.popitem(last=False)

    def _persist(self) -> None:
        self.replica.persist()
        self._applied()

    def _applied(self) -> None:
        """The replica's generation is the one applied (and `assetcdn_manifest_generation`)."""
        self.applied_generation = self.replica.generation
        self.metrics.manifest_generation.labels("edge").set(self.replica.generation)

    # --- purges: manifest invalidations and purge commands from control ---

    def _purge_of(self, command: PushedPurge, configs: Sequence[EdgeConfig]) -> GenerationPurge:
        """A purge command as cache tags: its `tags` (within its zone's tag, when it names a zone), the path tags of its `urls`, the path tag prefixes of
        its `prefixes`, or everything; soft or not. URLs and prefixes are read under each of `configs`: the config
        now held and, when it came with the purge, the one it replaced. A purge made while this edge was away
        (stopped, or cut off from control) and learnt on catch-up (or a push that finds generations missed) may name
        a host (a custom domain, a tenant host) that a config change after it took away: under the config it was
        made in, it named that zone's path. A tag purge within a zone names the copies that carry its zone's tag too
        (every copy of a zone does: its files', its pull responses' and their variants')."""
        if command.everything:
            return GenerationPurge(command.generation, everything=True, soft=command.soft)
        if command.zone is not None:
            return GenerationPurge(command.generation, command.tags, soft=command.soft, within=zone_tag(command.zone))
        tags = list(command.tags)
        prefixes: list[str] = []
        for config in configs:
            for url in command.urls:
                tags.extend(url_tags(url, config))
            prefixes += [tag for tag in (prefix_tag(prefix, config) for prefix in command.prefixes) if tag]
        return GenerationPurge(command.generation, tuple(dict.fromkeys(tags)),
                               tag_prefixes=tuple(dict.fromkeys(prefixes)), soft=command.soft)

    async def _apply_purges(self, purges: list[GenerationPurge], generation: int, *, restart: bool = False) -> int:
        """Apply the purges of the generations up to `generation` that this node's cache has not taken yet:
        the disk tier is shared by the node's workers, so each generation's purges run once per node
        (assetcdn/edge/cache/applied.py), whichever worker learns of it first."""
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.cache.purge_generations(purges, upto=generation, restart=restart,
                                                       revalidated=PULL_KEY_PREFIX))


@dataclass(frozen=True, slots=True)
class CountedZones(Container[str]):
    """`EdgeNode.counted_zones`: the two collections asked in turn, neither copied (a scan counted past the
    delivery log's MAX_KEYS asks once per delivery)."""

    stored: Container[str]
    pull: Mapping[str, PullZone]

    def __contains__(self, zone: object) -> bool:
        return zone in self.stored or zone in self.pull


def retired_origins(before: dict[str, PullZone], after: dict[str, PullZone]) -> list[str]:
    """The pull zones whose origin a config change retired: another URL or Host header (as control purges them,
    assetcdn/control/routes/zones.py), no origin, or no zone. Their cached answers are the old origin's. So are
    those of a zone that no longer stores answers that set cookies (`StoreSetCookie` turned off): some may."""
    return sorted(name for name, zone in before.items()
                  if (new := after.get(name)) is None
                  or (new.origin.url, new.origin.host_header) != (zone.origin.url, zone.origin.host_header)
                  or (zone.store_set_cookie and not new.store_set_cookie))


def url_tags(url: str, config: EdgeConfig) -> list[str]:
    """The path tags of what a purge URL names (assetcdn/edge/states/recv.py reads it as a request, `purge_named`):
    an absolute URL on a zone's tenant host or custom domain, on another host, or a path; percent-encoded or not.
    Empty if it names nothing cached."""
    target = split_target(url)
    named = purge_named(config, target) if target is not None else []
    return [pull_path_tag(found.zone.name, found.path) if isinstance(found, PullPath) else path_tag(found)
            for found in named]


def prefix_tag(prefix: str, config: EdgeConfig) -> str | None:
    """The path tag prefix of a purge prefix: every path tag of its zone that starts with its path."""
    target = split_target(prefix)
    named = purge_prefix_named(config, target) if target is not None else None
    if named is None:
        return None
    zone, path, pulled = named
    return pull_path_tag(zone, path) if pulled else path_tag(f"{zone}{path}")
