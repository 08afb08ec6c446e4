"""The manifest's files by directory, so that a storage listing (a zone's files, an asset's siblings) costs what the
directory holds, and a zone's sums what it has directories.

A listing dates each subdirectory by the newest file below it (docs/api-guide.md, "Storage"). The index is a tree of
the CDN paths' directories: each holds its own files (by name, the entries themselves) and its subdirectories, and
keeps the time of the newest file below it, and how many files and bytes are below it. A file added raises the times on its way down; a file removed that was
the newest of a directory forgets that directory's time (and its parents'), found again from its children when a
listing asks for it. A directory left without files is removed, as no path names it any more.
"""

from __future__ import annotations

from collections.abc import Iterable

from assetcdn.shared.manifest import ManifestEntry


class _Directory:
    __slots__ = ("count", "dirs", "files", "newest", "size")

    def __init__(self) -> None:
        self.files: dict[str, ManifestEntry] = {}   # by `entry.name` (its path's last part): no string of its own
        self.dirs: dict[str, _Directory] = {}
        self.newest: str | None = ""                # None: not known since its newest file went
        self.count = 0                              # files below it, and their bytes
        self.size = 0

    def newest_below(self) -> str:
        """The time of the newest file below this directory ("" when it holds none)."""
        if self.newest is None:
            times = [entry.modified for entry in self.files.values()]
            times.extend(child.newest_below() for child in self.dirs.values())
            self.newest = max(times, default="")  # one ISO form (from_unix): text order is time order
        return self.newest

    def collect(self, into: list[ManifestEntry]) -> None:
        into.extend(self.files.values())
        for child in self.dirs.values():
            child.collect(into)


class DirectoryIndex:
    def __init__(self, entries: Iterable[ManifestEntry] = ()) -> None:
        self._root = _Directory()
        for entry in entries:
            self.add(entry)

    def add(self, entry: ManifestEntry) -> None:
        """Index `entry`, a path not indexed (`remove` the one it replaces first)."""
        directory = self._root
        modified = entry.modified
        for part in entry.path.split("/")[:-1]:
            directory.count += 1
            directory.size += entry.size
            if directory.newest is not None and modified > directory.newest:
                directory.newest = modified
            child = directory.dirs.get(part)
            if child is None:
                child = directory.dirs[part] = _Directory()
            directory = child
        directory.count += 1
        directory.size += entry.size
        if directory.newest is not None and modified > directory.newest:
            directory.newest = modified
        directory.files[entry.name] = entry

    def remove(self, entry: ManifestEntry) -> None:
        """Forget `entry`, an indexed path's entry."""
        parts = entry.path.split("/")[:-1]
        trail = [self._root]
        for part in parts:
            child = trail[-1].dirs.get(part)
            if child is None:
                return
            trail.append(child)
        if trail[-1].files.pop(entry.name, None) is None:
            return
        for directory in trail:
            directory.count -= 1
            directory.size -= entry.size
            if directory.newest is not None and entry.modified >= directory.newest:
                directory.newest = None
        for parent, part, directory in zip(reversed(trail[:-1]), reversed(parts), reversed(trail[1:]), strict=True):
            if directory.files or directory.dirs:
                break
            del parent.dirs[part]

    def _directory(self, path: str) -> _Directory | None:
        directory = self._root
        for part in path.split("/") if path else ():
            child = directory.dirs.get(part)
            if child is None:
                return None
            directory = child
        return directory

    def newest_below(self, path: str) -> dict[str, str]:
        """{subdirectory of directory `path` (a CDN path, "" the root): the time of the newest file below it}."""
        directory = self._directory(path)
        if directory is None:
            return {}
        return {name: child.newest_below() for name, child in directory.dirs.items()}

    def totals(self, path: str) -> tuple[int, int]:
        """(files, bytes) below directory `path` (a CDN path)."""
        directory = self._directory(path)
        return (0, 0) if directory is None else (directory.count, directory.size)

    def subdirectories(self, path: str) -> list[str]:
        """The directories in directory `path` (a CDN path): each holds a file, or a directory that does."""
        directory = self._directory(path)
        return [] if directory is None else list(directory.dirs)

    def files_in(self, path: str) -> list[ManifestEntry]:
        """The entries of the files directly in directory `path` (a CDN path, "" the root)."""
        directory = self._directory(path)
        return [] if directory is None else list(directory.files.values())

    def entries_below(self, path: str) -> list[ManifestEntry]:
        """The entries of every file below directory `path` (a CDN path)."""
        found: list[ManifestEntry] = []
        if (directory := self._directory(path)) is not None:
            directory.collect(found)
        return found
