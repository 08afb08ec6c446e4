"""The events a webhook can subscribe to, and the events of a commit.

A commit's events are a pure function of the commit as git records it (its changes, its time and a
trailer naming what kind of change it was), so the events of a commit recorded by a process that
was killed before it wrote them are the same events, with the same ids, when the next process finds
the commit again (``control.webhooks.outbox``).

Data of each event:
- ``asset.created`` / ``asset.updated``: ``{path, size}``; ``asset.deleted``: ``{path}`` (CDN path, one
  event per file, so a batch or a directory delete gives one per file);
- ``zone.created``: ``{zone}``; ``zone.deleted``: ``{zone, filesRemoved}``;
- ``pipeline.completed``: ``{mode, name, zone, commit, files}`` (a client-mode run also creates its zone:
  ``zone.created`` comes first);
- ``rules.updated``: ``{file, action: updated|removed, commit}``;
- ``purge.completed``: ``{purged, mode, soft, zone (a tag purge within one zone only), generation, edges: {total,
  acknowledged, pending, elapsedMs, entriesRemoved}}`` (built by ``control.publishing.publisher`` once the edges
  answered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from assetcdn.control.storage.git_store import LoggedCommit
from assetcdn.control.storage.manifest_store import is_asset_path
from assetcdn.shared.edge_rules import RULE_FILES
from assetcdn.shared.paths import STOCK_ROOT, cdn_path_of

EVENT_TYPES = ("asset.created", "asset.updated", "asset.deleted", "zone.created", "zone.deleted",
               "purge.completed", "pipeline.completed", "rules.updated")
CHANGE_TRAILER = "Assetcdn-Change"
SCAFFOLD_SUFFIX = "/.gitkeep"


@dataclass(frozen=True)
class Change:
    """What kind of change a commit is, when its file changes alone do not say it: kept in the commit
    message as a trailer (``Assetcdn-Change: zone.create akande``). Arguments are validated names."""
    kind: str                 # "zone.create", "zone.delete", "pipeline"
    args: tuple[str, ...] = ()

    def trailer(self) -> str:
        return f"{CHANGE_TRAILER}: {' '.join((self.kind, *self.args))}"


def zone_created(zone: str) -> Change:
    return Change("zone.create", (zone,))


def zone_deleted(zone: str) -> Change:
    return Change("zone.delete", (zone,))


def pipeline_run(mode: str, name: str) -> Change:
    return Change("pipeline", (mode, name))


def with_trailer(message: str, change: Change | None) -> str:
    return message if change is None else f"{message}\n\n{change.trailer()}\n"


def change_of(message: str) -> Change | None:
    for line in reversed(message.strip().splitlines()):
        key, sep, value = line.partition(":")
        if sep and key.strip() == CHANGE_TRAILER:
            words = value.split()
            return Change(words[0], tuple(words[1:])) if words else None
    return None


@dataclass(frozen=True)
class Event:
    id: str
    event: str
    timestamp: str
    data: dict[str, Any]

    def body(self) -> bytes:
        """The bytes a receiver gets (and whose HMAC it checks)."""
        return orjson.dumps({"event": self.event, "timestamp": self.timestamp, "data": self.data})


def _asset_path(repo_path: str) -> str:
    return "/" + cdn_path_of(repo_path)


def commit_events(commit: LoggedCommit) -> list[Event]:
    """The events of one commit, in a fixed order (ids `<commit>-<n>`)."""
    change = change_of(commit.message)
    found: list[tuple[str, dict[str, Any]]] = []
    changes = sorted(commit.changes, key=lambda c: c.path)
    if change is not None and change.kind == "zone.create" and change.args:
        found.append(("zone.created", {"zone": " ".join(change.args)}))
    elif change is not None and change.kind == "zone.delete" and change.args:
        removed = sum(1 for c in changes if c.new_blob is None and not c.path.endswith(SCAFFOLD_SUFFIX))
        found.append(("zone.deleted", {"zone": " ".join(change.args), "filesRemoved": removed}))
    elif change is not None and change.kind == "pipeline" and len(change.args) == 2:
        mode, name = change.args
        zone = name if mode == "client" else STOCK_ROOT
        if mode == "client":
            found.append(("zone.created", {"zone": name}))
        found.append(("pipeline.completed", {"mode": mode, "name": name, "zone": zone, "commit": commit.commit_id,
                                             "files": [c.path for c in changes if c.new_blob is not None]}))
    else:
        for c in changes:
            if c.path in RULE_FILES:
                found.append(("rules.updated", {"file": c.path, "action": "removed" if c.new_blob is None
                                                else "updated", "commit": commit.commit_id}))
            elif is_asset_path(c.path):
                if c.new_blob is None:
                    found.append(("asset.deleted", {"path": _asset_path(c.path)}))
                else:
                    found.append(("asset.created" if c.old_blob is None else "asset.updated",
                                  {"path": _asset_path(c.path), "size": commit.sizes.get(c.path, 0)}))
    return [Event(f"{commit.commit_id}-{index}", name, commit.committed_at, data)
            for index, (name, data) in enumerate(found)]
