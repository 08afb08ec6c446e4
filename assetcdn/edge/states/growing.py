"""A fill's body while the fill reads it, for the requests that waited for its URL (assetcdn/edge/states/pull.py).

A fill that keeps a body of declared length streams it to its own client as it arrives (`pull.keep`). The requests
for the same URL that arrive meanwhile join its flight. Before this module they waited until the whole body was
stored: for a long video that was the whole download, up to `body_timeout_s` (then each asked the origin itself).
Now they are answered as the fill goes (`pull.deliver_growing`): the head at once, the body's bytes as the fill
has them, each waiting request at its own pace.

- The bytes come from the fill's own copy of the body (its spool, `pull.new_spool`): while it is within
  SPOOL_MEMORY (the spool holding it in memory), from the chunks the fill read (references, not copies); once past
  it, every byte is read back from the spool's temporary file by a descriptor of this object's own (``os.pread``,
  off the event loop), which the fill flushes after each write, and the chunks are let go. A reader never sets the
  fill's pace: the fill reads at the origin's pace whatever its readers take.
- A request joins only a fill that is still being read, and that no purge published since the fill asked the origin
  names (the cache's purge mark, then its purge log, as `store` asks it: the URL, a tag, a prefix, everything):
  after one that does, it waits for what is stored, as before, which the purge keeps out. A purge of anything else
  costs the first request after it one look at the purge log, the ones after it none. A response that varies is
  stored under a key of its variant's, which a purge by key may name: for it any purge is taken to name it.
- A fill that ends short (the origin's body failed, the spool's file failed) ends its readers' answers short too:
  their connections are closed short of the Content-Length, as the fill's own client's is, never an answer that
  looks complete.
- The descriptor and the chunks are let go once the fill is over and its last reader has left, and no thread reads
  the file by that descriptor any more. A descriptor that cannot be had (the worker out of them) ends the readers
  short, not the fill, which goes on into the cache.

On an edge whose workers take turns at a fill (assetcdn/edge/cache/fill_lock.py), the fill's spool is a file of a
name the other workers know (``<cache_dir>/growing/<hash of the flight key>.body``, flushed after each chunk, from a
thread from its first byte), and its head is published beside it (``.head``, written whole, then renamed into
place). A worker whose request waits for that fill (`SiblingGrowing`) opens both once the head is there and reads
the body as it grows, looking every 1 ms at first, then every 20 ms at most (one look of the worker for all its
requests that wait). The fill is over when its body file is removed (the reader's descriptor's link count: no newer
fill's file can be taken for it), or its head file is gone or replaced (the filling worker removes both names at its
end, after its last byte is written), or when the key's byte of the lock is let go (a worker that died); what the
file then holds is all there is. The head names its flight key, its body's inode (a body opened for a head is read
only when it is that one) and the purge mark the fill asked the origin at (the edge's workers share one), and the
variant the answer is when it varies, with the key and tags a purge since is looked up by (`unpurged`). Files a killed worker left are removed by the next fill of the key, and at a
worker's start (a gone worker's fill at once, one whose body has not grown for an hour, any other file once an hour
old; never a fill under way).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from assetcdn.shared.logs import LinePerInterval

log = logging.getLogger(__name__)
PUBLISH_FAILURES = LinePerInterval(log, 60.0)

# A reader's piece of the spool's file: read back this many bytes at a time.
PIECE = 256 * 1024
# Where an edge's workers publish the fills they read (module docstring), in the edge's cache directory.
GROWING_DIR = "growing"
# How often a reader on another worker looks for more of the body: soon after it caught up, then at most every
# POLL_MAX_S (as a request waiting for another worker's fill looks at the lock, pull.py).
POLL_FIRST_S = 0.001
POLL_MAX_S = 0.02
# Files a worker killed mid-fill left, removed at a worker's start once this old.
LEFTOVER_AGE_S = 3600.0


class Purges(Protocol):
    """What `Growing.joinable` asks of the node's cache (assetcdn/edge/cache/store.py)."""

    def purge_mark(self) -> int: ...

    def purged_since(self, mark: int, obj: Any) -> bool: ...


class EndedShort(Exception):
    """The fill ended before the bytes a reader asks for (its origin's body failed, or it was not kept)."""


class Growing:
    """One fill's body as it is read (module docstring). The fill calls `begin` with the stored head, `add` after
    each chunk is in its spool, then `end`; readers `join`, read `pieces`, and `leave`."""

    __slots__ = ("declared", "memory_limit", "stored", "mark", "keyed", "written", "ended", "selected", "_chunks",
                 "_starts", "_memory_end", "_fd", "_readers", "_changed", "_shared", "_published")

    def __init__(self, declared: int, memory_limit: int) -> None:
        self.declared = declared
        self.memory_limit = memory_limit  # the spool's: past it the bytes are in its temporary file
        self.stored: Any = None  # the head as it is stored (pull.StoredResponse), once `begin` has it
        # The cache's purge mark when the fill asked the origin, moved on past purges found not to name it; None once
        # one may have (or none was taken): not joined again.
        self.mark: int | None = None
        self.keyed = False  # stored under the key `stored` names (no Vary): a purge by another key is not its
        self.written = 0  # bytes readers may read
        self.ended: bool | None = None  # None while read; True: whole; False: ended short
        self._chunks: list[bytes] = []
        self._starts: list[int] = []
        self._memory_end = 0
        self._fd: int | None = None
        self._readers = 0
        self._changed: asyncio.Future[None] | None = None
        self.selected: Any = None  # this worker's readers take the variant from `Landing.selected`
        self._shared: tuple[Path, str, Any] | None = None  # its published name, flight key and variant
        self._published: tuple[Path, int, Path, int] | None = None  # head and body paths, and their inodes

    # --- the fill ---------------------------------------------------------------------------------------------------

    def share(self, directory: Path, key: str, selected: Any) -> None:
        """Publish the body for the edge's other workers too (module docstring), under the flight `key`."""
        self._shared = (directory / shared_name(key), key, selected)

    def begin(self, stored: Any, mark: int | None, spool: IO[bytes], keyed: bool = False) -> IO[bytes]:
        """The body is about to be read chunk by chunk into `spool` (still empty): readers may join from now on.
        `stored`'s entry has the key and tags the body is stored with (`keyed`: its key too, else a purge by key is
        taken to name it). Returns the spool to read it into: `spool`, or the published file that replaces it
        (`share`)."""
        self.stored, self.mark, self.keyed = stored, mark, keyed
        if self._shared is not None and stored is not None:
            spool = self._publish(spool)
        self._wake()
        return spool

    def _publish(self, spool: IO[bytes]) -> IO[bytes]:
        """The published body file and head (module docstring); `spool` when they cannot be written (logged)."""
        assert self._shared is not None
        name, key, selected = self._shared
        head_path, body_path = name.with_suffix(".head"), name.with_suffix(".body")
        obj = self.stored.obj
        staged = head_path.with_name(f"{head_path.name}.{os.getpid()}")
        body = None
        try:
            for left in (head_path, body_path):  # a killed worker's, or a fill of the key ended unpublished
                with contextlib.suppress(FileNotFoundError):
                    left.unlink()
            body = os.fdopen(os.open(body_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), "w+b")
            # The body's inode: a reader takes the body it opened for this head's only when it is this one.
            head = orjson.dumps({
                "key": key, "pid": os.getpid(), "body": os.fstat(body.fileno()).st_ino, "selected": selected,
                "mark": self.mark, "keyed": self.keyed, "declared": self.declared, "url_key": obj.key,
                "content_type": obj.content_type, "etag": obj.etag, "tags": obj.tags, "stored_at": obj.stored_at,
                "headers": obj.headers})
            # The worker's own, as the body is (its head names the origin's fields: a zone's cookies, say).
            with open(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb") as out:
                out.write(head)
            os.replace(staged, head_path)
            self._published = (head_path, os.stat(head_path).st_ino, body_path, os.fstat(body.fileno()).st_ino)
        except OSError as exc:
            PUBLISH_FAILURES.log(logging.WARNING, "publish", "a fill under way cannot be published to the edge's "
                                 "other workers (%s): their requests for it wait until it is stored", exc)
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
            if body is not None:
                body.close()
                with contextlib.suppress(OSError):
                    body_path.unlink()
            return spool
        spool.close()
        return body

    def add(self, chunk: bytes, spool: IO[bytes]) -> None:
        """`chunk` is in `spool` (flushed to its file once past `memory_limit`), after the bytes before it."""
        if self.ended is not None:  # ended short already (`_descriptor`): the fill reads on for the cache alone
            return
        start = self.written
        end = start + len(chunk)
        if end <= self.memory_limit:  # in the spool's memory: its readers take it from here
            self._chunks.append(chunk)
            self._starts.append(start)
            self._memory_end = end
        elif self._fd is None:
            # The spool rolled over to its file with this chunk (`pull.spool_write`, flushed): every byte is there
            # now, read back from it, and the chunks are let go: the fill holds no more of its body in memory than
            # its spool does, for however long the origin takes, readers or not.
            if not self._descriptor(spool):
                return
            self._chunks, self._starts, self._memory_end = [], [], 0
        self.written = end
        self._wake()

    def end(self, whole: bool) -> None:
        """The fill is over: every byte read (`whole`), or ended short. Once; later calls do nothing."""
        if self.ended is not None:
            return
        self.ended = whole and self.written == self.declared
        self._unpublish()
        self._wake()
        self._let_go()

    def _unpublish(self) -> None:
        """Remove the published names (the head first: the other workers' readers take it for the end), unless
        a newer fill of the key published its own under them meanwhile."""
        published, self._published = self._published, None
        if published is None:
            return
        head_path, head_ino, body_path, body_ino = published
        for path, inode in ((head_path, head_ino), (body_path, body_ino)):
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == inode:
                    path.unlink()

    # --- the readers ------------------------------------------------------------------------------------------------

    def joinable(self, cache: Purges) -> bool:
        """Whether a request may be answered from this fill now: being read, and no purge published since it asked
        the origin names it (module docstring; `cache`: the node's)."""
        return self.stored is not None and self.ended is None and unpurged(self, cache)

    def join(self) -> None:
        """A reader from now until its `leave` (its bytes stay readable meanwhile)."""
        self._readers += 1

    def leave(self) -> None:
        self._readers -= 1
        self._let_go()

    async def begun_or(self, kept: asyncio.Future[Any]) -> None:
        """Wait until the body is being read (`begin`), or the fill is over (`kept` done, or `end`)."""
        while self.stored is None and self.ended is None and not kept.done():
            waiter = self._waiter()

            # This wait's own callback: `remove_done_callback` removes every one equal to the one it is given, and
            # a bound method is equal to every waiting request's, whose wake-up one giving up would take with it.
            def woken(_kept: asyncio.Future[Any]) -> None:
                self._wake()

            kept.add_done_callback(woken)
            try:
                await asyncio.shield(waiter)
            finally:
                kept.remove_done_callback(woken)

    async def pieces(self, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes `start` to `end` as the fill has them (the caller has joined); EndedShort when it ends first."""
        loop = asyncio.get_running_loop()
        at = start
        while at < end:
            if at >= self.written:
                if self.ended is not None:
                    raise EndedShort(f"the fill ended at byte {self.written} of {self.declared}")
                await asyncio.shield(self._waiter())
                continue
            if at < self._memory_end:
                index = bisect.bisect_right(self._starts, at) - 1
                chunk, offset = self._chunks[index], at - self._starts[index]
                piece = chunk[offset:offset + (end - at)] if offset or len(chunk) > end - at else chunk
            else:
                fd = self._fd
                if fd is None:
                    raise EndedShort("the fill's temporary file is gone")
                size = min(PIECE, end - at, self.written - at)
                # The read holds the descriptor as a reader of its own until its thread is done: a reader that goes
                # meanwhile (cancelled, the edge stopping) never has it closed under that read, its number maybe
                # another file's by then.
                reading = loop.run_in_executor(None, os.pread, fd, size, at)
                self._readers += 1
                reading.add_done_callback(self._read_done)
                piece = await asyncio.shield(reading)
                if not piece:
                    raise EndedShort("the fill's temporary file ended before its length")
            at += len(piece)
            yield piece

    # --- inner --------------------------------------------------------------------------------------------------------

    def _descriptor(self, spool: IO[bytes]) -> bool:
        """Take a descriptor of the spool's file (rolled over to it by now, `pull.spool_write`) for the readers.
        Without one (the worker out of descriptors) they are ended short, not the fill: its own client and the
        cache need none of it, and the requests still to come wait for the body stored."""
        try:
            self._fd = os.dup(spool.fileno())
        except OSError:
            self.end(False)
            return False
        return True

    def _read_done(self, _reading: asyncio.Future[bytes]) -> None:
        self.leave()

    def _waiter(self) -> asyncio.Future[None]:
        changed = self._changed
        if changed is None or changed.done():
            changed = self._changed = asyncio.get_running_loop().create_future()
        return changed

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    def _let_go(self) -> None:
        if self.ended is None or self._readers > 0:
            return
        self._chunks, self._starts, self._memory_end = [], [], 0
        fd, self._fd = self._fd, None
        if fd is not None:
            # From a thread, as `SiblingGrowing` closes its own: a reader that outlived the fill's storing holds the
            # last descriptor of its removed spool file, whose blocks its close frees.
            try:
                asyncio.get_running_loop().run_in_executor(None, close_quietly, fd)
            except RuntimeError:  # no loop, or its executor shut down (the worker stopping): closed here
                close_quietly(fd)


class SiblingGrowing:
    """Another worker's fill of a key as that worker reads it (module docstring): the reader's side of `Growing`'s
    `share`, with the same reader methods. `filling`: whether the other worker still holds the key's byte;
    `stored_of`: the response a published head describes (pull.py's StoredResponse), None for one it cannot read;
    `stall_s`: how long the body may stop growing before a reader gives it up (the fill's own idle timeout is
    shorter: this bounds only a file its worker no longer writes while the key's byte is held for another key).
    A head whose worker is gone (killed before it could remove it) is none."""

    __slots__ = ("key", "stored", "mark", "keyed", "selected", "declared", "_head_path", "_body_path", "_head_ino", "_fd",
                 "_readers", "_filling", "_stored_of", "_stall_s", "_looking", "_grown", "_watching",
                 "_ended")

    def __init__(self, directory: Path, key: str, filling: Callable[[], bool],
                 stored_of: Callable[[dict[str, Any]], Any], stall_s: float) -> None:
        self.key = key
        name = directory / shared_name(key)
        self._head_path, self._body_path = name.with_suffix(".head"), name.with_suffix(".body")
        self.stored: Any = None
        self.mark: int | None = None
        self.keyed = False
        self.selected: Any = None
        self.declared = 0
        self._head_ino: int | None = None
        self._fd: int | None = None
        self._readers = 0
        self._filling = filling
        self._stored_of = stored_of
        self._stall_s = stall_s
        self._looking: asyncio.Task[None] | None = None  # the look for the head this worker's requests wait on
        # What the readers that have every byte there is wait on: done when the body grew, its fill is over, or it
        # stalled (`_grew`); and the one look of the worker that makes it so (`_watch`).
        self._grown: asyncio.Future[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._ended = False  # the fill found over by that look (`_over`): for good

    def joinable(self, cache: Purges) -> bool:
        """Whether a request may be answered from the other worker's fill now: its head is published, it is still
        being read, and no purge published since it asked the origin names it (as `Growing.joinable`; the purge
        mark and log are the node's, its workers' alike)."""
        if self._fd is None and not self._open():
            return False
        if self._over() or not unpurged(self, cache):
            self._close_unread()
            return False
        return True

    def join(self) -> None:
        self._readers += 1

    def leave(self) -> None:
        self._readers -= 1
        self._close_unread()

    async def begun_or(self, kept: asyncio.Future[Any]) -> None:
        """Wait until the other worker publishes the fill's head, or its fill is over (`kept` done). The worker's
        requests waiting for the fill share one look for it (`_look`): most fills are never published (1 MB or
        less), and their waiters would each look every few ms while the fill lasts."""
        looking = self._looking
        if looking is None:
            looking = self._looking = asyncio.get_running_loop().create_task(self._look(kept))
        if not looking.done() and not kept.done():
            await asyncio.wait((looking, kept), return_when=asyncio.FIRST_COMPLETED)

    async def _look(self, kept: asyncio.Future[Any]) -> None:
        delay = POLL_FIRST_S
        while not kept.done() and not self._head_there():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(kept), delay)
            delay = min(delay * 2, POLL_MAX_S)

    async def pieces(self, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes `start` to `end` as the other worker has them (the caller has joined); EndedShort when its fill
        ends first."""
        loop = asyncio.get_running_loop()
        fd = self._fd
        assert fd is not None
        at = start
        stalled_at = loop.time() + self._stall_s
        while at < end:
            body = os.fstat(fd)
            size = body.st_size
            if size <= at:
                # Whether its fill is over is the worker's one look's to say (`_watch`), but for the body's links.
                if not self._ended and body.st_nlink > 0:
                    if loop.time() > stalled_at:
                        raise EndedShort(f"the other worker's fill stopped at byte {size} of {self.declared}")
                    await asyncio.shield(self._grew(size))
                    continue
                size = os.fstat(fd).st_size  # every byte the fill wrote is in before it is over
                if size <= at:
                    raise EndedShort(f"the other worker's fill ended at byte {size} of {self.declared}")
            stalled_at = loop.time() + self._stall_s
            piece = await loop.run_in_executor(None, os.pread, fd, min(PIECE, end - at, size - at), at)
            if not piece:
                raise EndedShort("the other worker's fill file ended before its length")
            at += len(piece)
            yield piece

    def _grew(self, size: int) -> asyncio.Future[None]:
        """Done once the body is longer than `size` (what a reader found), its fill is over, or it has not grown for
        `_stall_s`: one look of the worker for all its readers that wait (`_watch`), as the filling worker's readers
        share one wake-up."""
        grown = self._grown
        if grown is None or grown.done():
            grown = self._grown = asyncio.get_running_loop().create_future()
        if self._watching is None or self._watching.done():
            self._watching = asyncio.get_running_loop().create_task(self._watch(size))
        return grown

    async def _watch(self, size: int) -> None:
        loop = asyncio.get_running_loop()
        delay, stalled_at = POLL_FIRST_S, loop.time() + self._stall_s
        try:
            while (fd := self._fd) is not None and (grown := self._grown) is not None and not grown.done():
                await asyncio.sleep(delay)
                delay = min(delay * 2, POLL_MAX_S)
                try:
                    body = os.fstat(fd)
                except OSError:
                    break
                if body.st_size > size or loop.time() > stalled_at:
                    break
                if self._over(body):
                    self._ended = True
                    break
        finally:
            grown = self._grown
            if grown is not None and not grown.done():
                grown.set_result(None)

    def _head_there(self) -> bool:
        """Whether a head of this key's fill is published under its name (a stat of a small file in the cache
        directory); not when the directory cannot be searched (EACCES: the fill is waited for stored, as one not
        published), nor one a killed worker left, which the fill waited for replaces once its head is in (read,
        then, as long as that one is there: a small file and a signal 0 each look)."""
        try:
            os.stat(self._head_path)
            head = orjson.loads(self._head_path.read_bytes())
            return bool(head.get("key") == self.key and alive(int(head["pid"])))
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def _open(self) -> bool:
        """Read the published head and open the body (the body checked to be of the same fill as the head)."""
        try:
            before = os.stat(self._head_path).st_ino
            head = orjson.loads(self._head_path.read_bytes())
            fd = os.open(self._body_path, os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, orjson.JSONDecodeError):
            return False
        try:
            if os.stat(self._head_path).st_ino != before or head.get("key") != self.key or (
                    self._head_ino is not None and before != self._head_ino) or not alive(int(head["pid"])) or (
                    os.fstat(fd).st_ino != head["body"]):
                raise ValueError("another fill's, or a gone worker's")
            stored = self._stored_of(head)
            if stored is None:
                raise ValueError("no stored head")
        except (OSError, ValueError, KeyError, TypeError):
            os.close(fd)
            return False
        self.stored, self.mark, self.declared = stored, head.get("mark"), int(head["declared"])
        self.keyed = head.get("keyed") is True
        selected = head.get("selected")
        self.selected = None if not selected else (tuple(selected[0]), selected[1])
        self._head_ino, self._fd = before, fd
        return True

    def _over(self, body: os.stat_result | None = None) -> bool:
        """Whether the other worker's fill is over: its body removed (`body`: its status, by the descriptor this
        reader holds, whose inode no newer fill's file can have meanwhile, as a newer head may have the number of
        this fill's removed one), its head gone or replaced, or the key's byte let go."""
        try:
            if body is None and self._fd is not None:
                body = os.fstat(self._fd)
            if (body is not None and body.st_nlink == 0) or os.stat(self._head_path).st_ino != self._head_ino:
                return True
        except OSError:
            return True
        return not self._filling()

    def _close_unread(self) -> None:
        if self._readers > 0:
            return
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.cancel()
        fd, self._fd = self._fd, None
        if fd is not None:
            # From a thread: the last descriptor of a removed body frees its blocks as it closes, up to the object
            # size limit's, which on the event loop would hold every other request of the worker meanwhile.
            try:
                asyncio.get_running_loop().run_in_executor(None, close_quietly, fd)
            except RuntimeError:  # no loop, or its executor shut down (the worker stopping): closed here
                close_quietly(fd)


def close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def unpurged(fill: Growing | SiblingGrowing, cache: Purges) -> bool:
    """Whether no purge published since `fill` asked the origin names it (`Growing.joinable`), as `store` asks it:
    the node's purge mark, then its purge log with the key and tags the body is stored with. A purge found not to
    name it moves its mark past it (one look at the log per purge); one that may name it (any, for a response
    stored under its variant's key) leaves it unjoinable for good."""
    if fill.mark is None:
        return False
    now = cache.purge_mark()  # before the look at the log: a purge published after it is looked at next time
    if now == fill.mark:
        return True
    if not fill.keyed or cache.purged_since(fill.mark, fill.stored.obj):
        fill.mark = None  # named (or may be: its log unread), kept out of the cache: never joined again
        return False
    fill.mark = now
    return True


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a signal 0 to it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: a process all the same
        return True
    return True


def shared_name(key: str) -> str:
    """The published files' name of a flight key (module docstring)."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def sweep_leftovers(directory: Path, age_s: float = LEFTOVER_AGE_S) -> None:
    """Make the directory the workers publish their fills in, and remove what killed workers left there: a fill whose
    worker is gone (its head's pid), or whose body has not grown for `age_s` (its worker's pid since given to another
    process); any other file once `age_s` old (a head staged, a body whose head never came). A fill under way stays,
    however long ago it began."""
    directory.mkdir(exist_ok=True)
    now = time.time()
    for path in directory.iterdir():
        with contextlib.suppress(OSError):
            if path.suffix == ".body" and path.with_suffix(".head").exists():
                continue  # its head's to judge, with it
            if path.suffix != ".head":
                if now - path.stat().st_mtime > age_s:
                    path.unlink()
                continue
            body = path.with_suffix(".body")
            try:
                gone = not alive(int(orjson.loads(path.read_bytes())["pid"]))
            except (ValueError, KeyError, TypeError):  # not a head a worker published: judged by its age
                gone = False
            newest = path.stat().st_mtime
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, body.stat().st_mtime)
            if gone or now - newest > age_s:
                path.unlink()
                body.unlink(missing_ok=True)
