"""Manifest generations as control sends them to the edges, as both sides see them.

One message serves both ways a generation reaches an edge worker: control pushes each new generation
(POST /_cluster/push, from assetcdn/control/publishing/publisher.py) and answers an edge that catches up
with everything after its generation (GET /_cluster/changes, assetcdn/control/routes/cluster.py), or
with a full snapshot when the history it needs is gone. Control builds a `GenerationPush` and sends
`to_json`; the edge decodes it once with `from_json` (assetcdn/edge/routes/cluster.py for a push,
assetcdn/edge/control_client.py for a catch-up) and applies it in assetcdn/edge/node.py.

Wire form (cluster protocol version 1)::

    {"v": 1, "generation": 8, "commit": "<sha>", "config_version": "<hash>", "full": false,
     "changes": [{"path": ..., "entry": {...} | null, "previous_tags": [...], "generation": 7}],
     "purges": [{"tags": [...]} | {"urls": [...]} | {"prefixes": [...]} | {"everything": true},
                each with "generation": 8 and, for a soft purge, "soft": true; a tag purge scoped to one
                zone has "zone": "<zone>" beside its "tags"],
     "tls_serial": 3}

A full snapshot has ``"full": true`` and ``"entries": [<manifest entry>...]`` instead of changes and
purges. ``tls_serial`` is only in catch-up answers. A field a message of an older control lacks takes
its old meaning: no ``v`` is version 1, no ``full`` is a delta, an item without ``generation``
belongs to the message's generation, a purge without ``zone`` is not scoped (its tags are purged in every zone).
An edge older than ``zone`` reads a scoped purge as an unscoped one (it removes more than asked, never less).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from assetcdn.shared.cluster import PROTOCOL_VERSION
from assetcdn.shared.manifest import ManifestChange, ManifestEntry

_ENTRY_TEXT_FIELDS = tuple(f.name for f in fields(ManifestEntry) if f.name not in ("size", "tags"))


class GenerationPushError(ValueError):
    """A push or catch-up answer that is malformed or of another protocol version."""


@dataclass(frozen=True, slots=True)
class PushedChange:
    """One path's change, with the generation that made it (an answer merges several generations)."""

    generation: int
    change: ManifestChange


@dataclass(frozen=True, slots=True)
class PushedPurge:
    """A purge command of one generation: cached copies carrying any of `tags`, those of `urls`, those under
    `prefixes` (URLs or paths, assetcdn/shared/purge_targets.py), or all; `soft`: marked stale, not dropped.
    `zone` scopes `tags` (never given with the others): only the copies of that zone, the ones that also carry its
    tag (assetcdn/shared/manifest.py `zone_tag`); None, every zone's."""

    generation: int
    tags: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    everything: bool = False
    prefixes: tuple[str, ...] = ()
    soft: bool = False
    zone: str | None = None

    @staticmethod
    def of_command(generation: int, command: dict[str, Any]) -> PushedPurge:
        """The purge control recorded (assetcdn/control/routes/purge.py: ``{"tags"|"urls"|"prefixes": [...]}``
        or ``{"everything": true}``, with ``"soft": true`` for a soft purge and ``"zone": "<zone>"`` for a tag purge
        scoped to a zone) as part of `generation`."""
        return _purge(command, generation)

    def to_json(self) -> dict[str, Any]:
        command: dict[str, Any] = {"everything": True} if self.everything else {}
        if self.tags:
            command["tags"] = list(self.tags)
        if self.zone is not None:
            command["zone"] = self.zone
        if self.urls:
            command["urls"] = list(self.urls)
        if self.prefixes:
            command["prefixes"] = list(self.prefixes)
        if self.soft:
            command["soft"] = True
        return {**command, "generation": self.generation}


@dataclass(frozen=True, slots=True)
class GenerationPush:
    generation: int
    commit: str | None
    config_version: str | None           # the published config's version (assetcdn/shared/published_config.py)
    changes: tuple[PushedChange, ...] = ()
    purges: tuple[PushedPurge, ...] = ()
    entries: tuple[ManifestEntry, ...] | None = None   # a full snapshot (then no changes or purges)
    tls_serial: int | None = None        # catch-up answers: the TLS state's serial (assetcdn/shared/tls_state.py)

    @property
    def full(self) -> bool:
        return self.entries is not None

    @staticmethod
    def of_generation(generation: int, commit: str | None, config_version: str | None,
                      changes: Iterable[ManifestChange], purge: dict[str, Any] | None) -> GenerationPush:
        """The push of one new generation: its changes and its purge command, if any."""
        return GenerationPush(generation, commit, config_version,
                              tuple(PushedChange(generation, c) for c in changes),
                              (PushedPurge.of_command(generation, purge),) if purge else ())

    def to_json(self) -> dict[str, Any]:
        message: dict[str, Any] = {"v": PROTOCOL_VERSION, "generation": self.generation, "commit": self.commit,
                                   "config_version": self.config_version, "full": self.full}
        if self.entries is not None:
            message["entries"] = [e.to_json() for e in self.entries]
        else:
            message["changes"] = [{**c.change.to_json(), "generation": c.generation} for c in self.changes]
            message["purges"] = [p.to_json() for p in self.purges]
        if self.tls_serial is not None:
            message["tls_serial"] = self.tls_serial
        return message

    @staticmethod
    def from_json(message: object) -> GenerationPush:
        """Decode what control sent; GenerationPushError on anything malformed or of another version."""
        if not isinstance(message, dict):
            raise GenerationPushError("a generation push is a JSON object")
        version = message.get("v", PROTOCOL_VERSION)
        if type(version) is not int or version != PROTOCOL_VERSION:
            raise GenerationPushError(f"generation push version {version!r} is not {PROTOCOL_VERSION}")
        generation = _generation(message.get("generation"), "the push's generation")
        commit, config_version = message.get("commit"), message.get("config_version")
        if commit is not None and not isinstance(commit, str):
            raise GenerationPushError("the push's commit is not text")
        if config_version is not None and not isinstance(config_version, str):
            raise GenerationPushError("the push's config_version is not text")
        full, tls_serial = message.get("full", False), message.get("tls_serial")
        if not isinstance(full, bool):
            raise GenerationPushError("the push's full is not true or false")
        if tls_serial is not None:
            tls_serial = _generation(tls_serial, "the push's tls_serial")
        if full:
            if message.get("changes") or message.get("purges"):
                raise GenerationPushError("a full snapshot carries entries, not changes or purges")
            entries = tuple(_entry(item) for item in _list(message.get("entries"), "entries"))
            return GenerationPush(generation, commit, config_version, entries=entries, tls_serial=tls_serial)
        changes = tuple(_change(item, generation) for item in _list(message.get("changes", []), "changes"))
        purges = tuple(_purge(item, generation) for item in _list(message.get("purges", []), "purges"))
        return GenerationPush(generation, commit, config_version, changes, purges, tls_serial=tls_serial)


def _generation(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GenerationPushError(f"{what} is not a whole number of 0 or more")
    return value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise GenerationPushError(f"the push's {what} is not a list")
    return value


def _texts(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise GenerationPushError(f"{what} is not a list of text")
    return tuple(value)


def _item_generation(item: dict[str, Any], generation: int, what: str) -> int:
    at = _generation(item.get("generation", generation), f"the generation of a {what}")
    if at > generation:
        raise GenerationPushError(f"a {what} of generation {at} in a push of generation {generation}")
    return at


def _entry(item: object) -> ManifestEntry:
    if not isinstance(item, dict):
        raise GenerationPushError("a manifest entry is not an object")
    path = item.get("path")
    if not all(isinstance(item.get(name), str) for name in _ENTRY_TEXT_FIELDS):
        raise GenerationPushError(f"manifest entry {path!r}: {', '.join(_ENTRY_TEXT_FIELDS)} must be text")
    size = item.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise GenerationPushError(f"manifest entry {path!r}: size is not a whole number of 0 or more")
    tags = _texts(item.get("tags"), f"manifest entry {path!r}: tags")
    return ManifestEntry(**{name: item[name] for name in _ENTRY_TEXT_FIELDS}, size=size, tags=tags)


def _change(item: object, generation: int) -> PushedChange:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        raise GenerationPushError("a manifest change is not an object with a path")
    entry = item.get("entry")
    change = ManifestChange(item["path"], None if entry is None else _entry(entry),
                            _texts(item.get("previous_tags", []), f"change {item['path']!r}: previous_tags"))
    return PushedChange(_item_generation(item, generation, "change"), change)


def _purge(item: object, generation: int) -> PushedPurge:
    if not isinstance(item, dict):
        raise GenerationPushError("a purge command is not an object")
    everything, soft = item.get("everything", False), item.get("soft", False)
    if not isinstance(everything, bool) or not isinstance(soft, bool):
        raise GenerationPushError("a purge command's everything or soft is not true or false")
    tags, urls = _texts(item.get("tags", []), "a purge's tags"), _texts(item.get("urls", []), "a purge's urls")
    prefixes, zone = _texts(item.get("prefixes", []), "a purge's prefixes"), item.get("zone")
    if zone is not None:
        # Read as a narrower purge than sent would keep what was meant to go: a scope that is not one zone's
        # name, or beside what names no tag, is refused.
        if not isinstance(zone, str) or not zone:
            raise GenerationPushError("a purge's zone is not a zone name")
        if not tags or urls or prefixes or everything:
            raise GenerationPushError("a purge's zone scopes tags only")
    return PushedPurge(_item_generation(item, generation, "purge"), tags, urls, everything, prefixes, soft, zone)
