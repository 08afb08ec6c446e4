"""The edge's replica of the manifest: path -> entry at a generation, persisted so that a restarted
edge still knows what its cache holds while control is unreachable."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import orjson

from shared.manifest import ManifestChange, ManifestEntry


class ManifestReplica:
    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self.entries: dict[str, ManifestEntry] = {}
        self.generation = 0
        self.commit: str | None = None
        self.loaded = False

    def load_persisted(self) -> bool:
        try:
            data = orjson.loads(self.state_file.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return False
        self.entries = {e["path"]: ManifestEntry.from_json(e) for e in data["entries"]}
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
        for change in changes:
            old = self.entries.get(change.path)
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
        self.generation, self.commit, self.loaded = generation, commit, True
        return stale

    def get(self, path: str) -> ManifestEntry | None:
        return self.entries.get(path)
