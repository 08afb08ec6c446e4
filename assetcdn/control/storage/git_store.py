"""Files live in a bare git repository (branch `main`, no working tree), written with pygit2.

Every mutation is exactly one commit. All repository access runs on one dedicated thread, which
serialises writers and keeps libgit2 objects off the event loop; fsync of objects and refs is on,
so a commit is durable when `commit` returns.

The control plane is the repository's only writer, and it proves it: opening a `GitStore` takes an
exclusive lock (`flock` on `WRITER_LOCK` inside the repository) for the life of the process, and a
second control plane on the same repository fails to start instead of writing beside the first.
Holding that lock, whatever a dead writer left behind is its own debris and is cleared
(`recover_dead_writer`): libgit2 writes every ref through `<ref>.lock` and every loose object through
`objects/tmp_object_git2_*`, renaming each into place only once complete, so a kill -9 can leave
those behind (a stale `refs/heads/main.lock` fails every later commit) but never a half-written
object or ref under its real name. A ref damaged some other way (an empty file after a power loss)
is set back to the newest commit the caller knows was complete (`restore_branch`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pygit2
from pygit2.enums import DeltaStatus, FileMode, ObjectType, Option

from assetcdn.shared.timestamps import from_unix

T = TypeVar("T")
BRANCH = "refs/heads/main"
WRITER_LOCK = "assetcdn-writer"  # flock()ed by the process that writes; holds its pid
# What libgit2 (and git) leave when a writer dies mid-update: lock files beside the refs and files
# it rewrites, and temporary object files not yet renamed to their object id.
LOCKED_FILES = ("packed-refs.lock", "HEAD.lock", "config.lock", "index.lock", "shallow.lock")
TEMP_OBJECT_PREFIXES = ("tmp_object_git2_", "tmp_obj_")
TEMP_PACK_PREFIXES = ("pack_git2_", "tmp_pack_", "tmp_idx_")

log = logging.getLogger(__name__)

pygit2.option(Option.ENABLE_FSYNC_GITDIR, True)


@dataclass(frozen=True)
class FileChange:
    path: str
    old_blob: str | None   # None: the path did not exist
    new_blob: str | None   # None: the path was deleted


@dataclass(frozen=True)
class CommitResult:
    commit_id: str
    committed_at: str
    changes: tuple[FileChange, ...]
    parent_id: str | None = None   # the HEAD it was made on (None: the first commit, or not known)


@dataclass(frozen=True)
class LoggedCommit:
    """A commit as history records it: what a process that died before finishing its bookkeeping left."""
    commit_id: str
    message: str
    committed_at: str
    changes: tuple[FileChange, ...]
    sizes: dict[str, int]   # size in bytes of each written file, by path


@dataclass(frozen=True)
class TreeFile:
    path: str
    blob_id: str
    size: int


class NothingToCommit(Exception):
    """The requested change leaves the tree as it is."""


class RepositoryInUse(Exception):
    """Another live process holds the repository's writer lock."""


def take_writer_lock(path: Path) -> int:
    """Hold the repository's writer lock for as long as the returned descriptor stays open (the kernel
    drops it when the process ends, however it ends). Raises RepositoryInUse if a live process holds it."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / WRITER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RepositoryInUse(f"the repository {path} is being written by another control plane "
                              f"(pid {holder}); only one may run on a data directory") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def recover_dead_writer(path: Path) -> list[str]:
    """Remove the lock and temporary files a dead writer left in the repository at `path`; returns them
    (relative paths). Only call it holding the writer lock: a live writer's files look the same."""
    removed: list[Path] = []
    refs = path / "refs"
    if refs.is_dir():
        removed += [p for p in refs.rglob("*.lock") if p.is_file()]
    removed += [path / name for name in LOCKED_FILES if (path / name).is_file()]
    objects = path / "objects"
    if objects.is_dir():
        removed += [p for p in objects.iterdir() if p.is_file() and p.name.startswith(TEMP_OBJECT_PREFIXES)]
        for fan_out in objects.iterdir():
            if fan_out.is_dir() and len(fan_out.name) == 2:
                removed += [p for p in fan_out.iterdir() if p.is_file() and p.name.startswith(TEMP_OBJECT_PREFIXES)]
        pack = objects / "pack"
        if pack.is_dir():
            removed += [p for p in pack.iterdir() if p.is_file() and p.name.startswith(TEMP_PACK_PREFIXES)]
    names = []
    for leftover in removed:
        leftover.unlink(missing_ok=True)
        names.append(str(leftover.relative_to(path)))
    if names:
        log.warning("recovered the repository after a writer died: removed %s", ", ".join(names))
    return names


class GitStore:
    def __init__(self, path: Path, author: str = "assetcdn", email: str = "assetcdn@localhost") -> None:
        self.path = Path(path)
        self._writer_fd = take_writer_lock(self.path)
        try:
            self.recovered = recover_dead_writer(self.path)
            if (self.path / "HEAD").exists():
                self._repo = pygit2.Repository(str(self.path))
            else:
                self._repo = pygit2.init_repository(str(self.path), bare=True, initial_head="main")
        except BaseException:
            os.close(self._writer_fd)
            raise
        self._author = (author, email)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="git")
        self._write_lock = asyncio.Lock()

    async def run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._writer_fd >= 0:
            os.close(self._writer_fd)
            self._writer_fd = -1

    def branch_damaged(self) -> bool:
        """True when `main` exists as a file but names no readable commit (an empty or garbled ref)."""
        ref_file = self.path / BRANCH
        if not ref_file.exists():
            return False
        try:
            commit = self._repo.revparse_single(BRANCH).peel(pygit2.Commit)
            commit.peel(pygit2.Tree)
        except (KeyError, ValueError, pygit2.GitError):
            return True
        return False

    def restore_branch(self, known_commits: Iterable[str]) -> str | None:
        """Point a damaged `main` back at the first of `known_commits` (newest first) that is a readable
        commit; returns it, or None when the branch is sound or none of them can be read."""
        if not self.branch_damaged():
            return None
        for commit_id in known_commits:
            try:
                commit = self._repo.get(commit_id)
            except ValueError:
                continue
            if commit is None or commit.type != ObjectType.COMMIT:
                continue
            (self.path / BRANCH).unlink(missing_ok=True)
            self._repo.references.create(BRANCH, commit.id, force=True)
            log.warning("the branch main was damaged; restored it to %s, the newest complete commit", commit_id)
            return commit_id
        log.error("the branch main is damaged and no known commit can be read; writes will fail")
        return None

    # --- reads (call through `run` from async code) ---

    def head_commit_id(self) -> str | None:
        try:
            return str(self._repo.revparse_single(BRANCH).id)
        except KeyError:
            return None

    def _head_tree(self) -> pygit2.Tree | None:
        try:
            return self._repo.revparse_single(BRANCH).peel(pygit2.Tree)
        except KeyError:
            return None

    def _head_blob(self, path: str) -> pygit2.Object | None:
        """The blob at `path` in HEAD's tree; None when there is none (or a directory is there)."""
        tree = self._head_tree()
        if tree is None:
            return None
        try:
            obj = tree[path]
        except KeyError:
            return None
        return obj if obj.type == ObjectType.BLOB else None

    def read_file(self, path: str) -> tuple[str, bytes] | None:
        obj = self._head_blob(path)
        return None if obj is None else (str(obj.id), obj.data)

    def file_size(self, path: str) -> int | None:
        """Size of the file at `path` from its tree entry, without reading the content."""
        obj = self._head_blob(path)
        return None if obj is None else obj.size

    def read_blob(self, blob_id: str) -> bytes | None:
        try:
            obj = self._repo.get(blob_id)
        except (ValueError, KeyError):
            return None
        if obj is None or obj.type != ObjectType.BLOB:
            return None
        return obj.data

    def blob_size(self, blob_id: str) -> int:
        return self._repo.get(blob_id).size

    def iter_files(self, prefix: str = "") -> Iterator[TreeFile]:
        tree = self._head_tree()
        if tree is None:
            return
        if prefix:
            try:
                sub = tree[prefix]
            except KeyError:
                return
            if sub.type != ObjectType.TREE:
                return
            yield from self._walk(sub, prefix + "/")
        else:
            yield from self._walk(tree, "")

    def _walk(self, tree: pygit2.Tree, base: str) -> Iterator[TreeFile]:
        for obj in tree:
            path = base + obj.name
            if obj.type == ObjectType.TREE:
                yield from self._walk(obj, path + "/")
            elif obj.type == ObjectType.BLOB:
                yield TreeFile(path, str(obj.id), obj.size)

    def list_dir(self, path: str) -> list[tuple[str, bool, str, int]] | None:
        """Direct children of a directory as (name, is_dir, object id, size), or None if it is no directory."""
        tree = self._head_tree()
        if tree is None:
            return None
        if path:
            try:
                tree = tree[path]
            except KeyError:
                return None
            if tree.type != ObjectType.TREE:
                return None
        return [(obj.name, obj.type == ObjectType.TREE, str(obj.id),
                 obj.size if obj.type == ObjectType.BLOB else 0) for obj in tree]

    def is_dir(self, path: str) -> bool:
        tree = self._head_tree()
        if tree is None:
            return False
        if path == "":
            return True
        try:
            return tree[path].type == ObjectType.TREE
        except KeyError:
            return False

    def commit_time(self, commit_id: str) -> str:
        commit = self._repo.get(commit_id)
        return from_unix(commit.commit_time)

    def diff_files(self, old_commit: str | None, new_commit: str | None) -> list[FileChange]:
        """Changed files between two commits (for a manifest rebuilt after the repository moved)."""
        def files(commit: str | None) -> dict[str, str]:
            if commit is None:
                return {}
            tree = self._repo.get(commit).peel(pygit2.Tree)
            return {f.path: f.blob_id for f in self._walk(tree, "")}
        old, new = files(old_commit), files(new_commit)
        return [FileChange(p, old.get(p), new.get(p)) for p in sorted(old.keys() | new.keys())
                if old.get(p) != new.get(p)]

    def commits_since(self, since: str | None, limit: int) -> list[LoggedCommit] | None:
        """The commits after `since` (None: since the start) up to HEAD along first parents, oldest first,
        each with its changes. None when `since` is not among the last `limit` commits (history rewritten)."""
        head = self.head_commit_id()
        if head is None or head == since:
            return []
        chain: list[pygit2.Commit] = []
        commit = self._repo.get(head)
        while str(commit.id) != since:
            if len(chain) >= limit:
                return None
            chain.append(commit)
            if not commit.parent_ids:
                if since is None:
                    break
                return None
            commit = self._repo.get(commit.parent_ids[0])
        return [self._logged(c) for c in reversed(chain)]

    def _logged(self, commit: pygit2.Commit) -> LoggedCommit:
        tree = commit.peel(pygit2.Tree)
        if commit.parent_ids:
            diff = self._repo.get(commit.parent_ids[0]).peel(pygit2.Tree).diff_to_tree(tree)
        else:
            diff = tree.diff_to_tree(swap=True)  # the first commit: everything is added
        changes: list[FileChange] = []
        sizes: dict[str, int] = {}
        for delta in diff.deltas:
            old = None if delta.status == DeltaStatus.ADDED else str(delta.old_file.id)
            new = None if delta.status == DeltaStatus.DELETED else str(delta.new_file.id)
            path = delta.new_file.path if new is not None else delta.old_file.path
            if old == new:
                continue
            changes.append(FileChange(path, old, new))
            if new is not None:
                sizes[path] = self._repo.odb.read_header(new)[1]  # the size without reading the content
        return LoggedCommit(str(commit.id), commit.message, from_unix(commit.commit_time), tuple(changes), sizes)

    # --- writes ---

    async def commit(self, changes: Mapping[str, bytes | None], message: str) -> CommitResult:
        """Apply {path: bytes (write) | None (delete)} as one commit. Serialised across callers."""
        async with self._write_lock:
            return await self.run(self._commit_sync, dict(changes), message)

    def _commit_sync(self, changes: dict[str, bytes | None], message: str) -> CommitResult:
        repo = self._repo
        parent_tree = self._head_tree()
        blobs: dict[str, pygit2.Oid | None] = {}
        for path, data in changes.items():
            blobs[path] = None if data is None else repo.create_blob(data)
        file_changes: list[FileChange] = []
        for path, oid in blobs.items():
            old = None
            if parent_tree is not None:
                try:
                    entry = parent_tree[path]
                    old = str(entry.id) if entry.type == ObjectType.BLOB else None
                except KeyError:
                    old = None
            new = None if oid is None else str(oid)
            if old != new:
                file_changes.append(FileChange(path, old, new))
        if not file_changes:
            raise NothingToCommit(message)
        nested: dict[tuple[str, ...], pygit2.Oid | None] = {tuple(p.split("/")): o for p, o in blobs.items()}
        tree_id = self._build_tree(parent_tree, nested)
        if tree_id is None:
            tree_id = repo.TreeBuilder().write()
        signature = pygit2.Signature(*self._author)
        parents = [] if (head := self.head_commit_id()) is None else [pygit2.Oid(hex=head)]
        commit_id = repo.create_commit(BRANCH, signature, signature, message, tree_id, parents)
        return CommitResult(str(commit_id), self.commit_time(str(commit_id)), tuple(file_changes), head)

    def _build_tree(self, tree: pygit2.Tree | None,
                    changes: dict[tuple[str, ...], pygit2.Oid | None]) -> pygit2.Oid | None:
        """Return the id of `tree` with `changes` applied, or None when the result is empty."""
        builder = self._repo.TreeBuilder(tree) if tree is not None else self._repo.TreeBuilder()
        by_child: dict[str, dict[tuple[str, ...], pygit2.Oid | None]] = {}
        for parts, oid in changes.items():
            if len(parts) == 1:
                name = parts[0]
                if oid is None:
                    if builder.get(name) is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, oid, FileMode.BLOB)
            else:
                by_child.setdefault(parts[0], {})[parts[1:]] = oid
        for name, sub_changes in by_child.items():
            existing = builder.get(name)
            subtree = None
            if existing is not None and existing.type == ObjectType.TREE:
                subtree = self._repo.get(existing.id)
            sub_id = self._build_tree(subtree, sub_changes)
            if sub_id is None:
                if existing is not None:
                    builder.remove(name)
            else:
                builder.insert(name, sub_id, FileMode.TREE)
        if len(builder) == 0:
            return None
        return builder.write()
