"""The edge's replica of the manifest: path -> entry at a generation, persisted so that a restarted
edge still knows what its cache holds while control is unreachable. Each entry's path delivery
(its per-path headers and cache key, assetcdn/edge/states/path_delivery.py) is made once and kept beside it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import orjson

from assetcdn.edge.states.path_delivery import PathDelivery, path_delivery
from assetcdn.shared.manifest import ManifestChange, ManifestEntry


class ManifestReplica:
    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self.entries: dict[str, ManifestEntry] = {}
        self.generation = 0
        self.commit: str | None = None
        self.loaded = False
        self._deliveries: dict[str, PathDelivery] = {}
        self._zones: frozenset[str] | None = None  # the entries' zones, made on first use after a change

    def load_persisted(self) -> bool:
        try:
            data = orjson.loads(self.state_file.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return False
        self.entries = {e["path"]: ManifestEntry.from_json(e) for e in data["entries"]}
        self._deliveries.clear()
        self._zones = None
        self.generation, self.commit = int(data["generation"]), data.get("commit")
        self.loaded = True
        return True

    def persist(self) -> None:
        tmp = self.state_file.with_name(f"{self.state_file.name}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps({"generation": self.generation, "commit": self.commit,
                                      "entries": [e.to_json() for e in self.entries.values()]}))
        os.replace(tmp, self.state_file)

    def apply_changes(self, generation: int, commit: str | None,
                      changes: Iterable[ManifestChange]) -> list[ManifestChange]:
        """Apply changes and return those whose old content must leave the cache."""
        invalidated = []
        self._zones = None
        for change in changes:
            old = self.entries.get(change.path)
            self._deliveries.pop(change.path, None)
            if change.entry is None:
                self.entries.pop(change.path, None)
            else:
                self.entries[change.path] = change.entry
            if old is not None or change.previous_tags:
                if change.entry is None or old is None or old.blob_id != change.entry.blob_id:
                    invalidated.append(change)
        self.generation, self.commit, self.loaded = generation, commit, True
        return invalidated

    def replace(self, generation: int, commit: str | None, entries: Iterable[ManifestEntry]) -> list[str]:
        """Install a full snapshot; return the paths whose content changed or disappeared."""
        new = {e.path: e for e in entries}
        stale = [p for p, old in self.entries.items() if p not in new or new[p].blob_id != old.blob_id]
        self.entries = new
        self._deliveries.clear()
        self._zones = None
        self.generation, self.commit, self.loaded = generation, commit, True
        return stale

    def zones(self) -> frozenset[str]:
        """The zones that hold a file (the stock pool's is ``stocks``): what delivery counts may name."""
        if self._zones is None:
            self._zones = frozenset(entry.zone for entry in self.entries.values())
        return self._zones

    def get(self, path: str) -> ManifestEntry | None:
        return self.entries.get(path)

    def head(self, entry: ManifestEntry) -> PathDelivery:
        """The path delivery of ``entry``, made on first use and kept while the path holds it."""
        head = self._deliveries.get(entry.path)
        if head is None or head.entry is not entry:
            head = path_delivery(entry)
            if self.entries.get(entry.path) is entry:  # never keep one for an entry we do not hold
                self._deliveries[entry.path] = head
        return head
