"""Video ingest: a source uploaded to the stock pool (`stocks/videos/<name>.mp4`, <name> one of the videos
`/api/stream` serves) is transcoded once, off the event loop, into HLS renditions that are committed beside it
(`stocks/videos/<name>/hls/`), so the renditions and their index are part of the manifest and reach edges like any
file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.storage.git_store import CommitResult, GitStore, NothingToCommit
from assetcdn.control.video.outcome import INDEX_FILE, Stopped, TranscodeError
from assetcdn.shared.hls import VIDEOS, VideoIndex
from assetcdn.shared.manifest import ManifestEntry

log = logging.getLogger(__name__)
# Under the data directory: the demo videos, made at the first start and reused by later ones.
DEMO_VIDEO_CACHE = "video-cache"
DEMO_HEIGHTS = range(180, 1080 + 1, 36)  # 16:9 at these heights has a width that is a multiple of 4
# Only the names /api/stream serves (assetcdn/shared/hls.py VIDEOS): another's renditions could never be played.
# The extension in any case: cameras and phones write `.MP4` and `.MOV`.
VIDEO_SOURCE = re.compile(rf"^stocks/videos/({'|'.join(VIDEOS)})\.(?i:mp4|mov|m4v|webm|mkv)\Z")


def demo_video_size(height: int) -> tuple[int, int]:
    """Width and height of the demo videos for `[demo] video_height`."""
    if height not in DEMO_HEIGHTS:
        raise ValueError(f"demo.video_height must be a multiple of 36 from 180 to 1080, not {height}")
    return height * 16 // 9, height


def hls_dir(video: str) -> str:
    return f"stocks/videos/{video}/hls"


def rendition_files(video: str, index: VideoIndex, out_dir: Path) -> dict[str, bytes]:
    """The repository files of one transcoded video: its renditions and index."""
    base = hls_dir(video)
    files = {f"{base}/{r.file}": (out_dir / r.file).read_bytes() for r in index.renditions}
    files[f"{base}/{INDEX_FILE}"] = index.to_json()
    return files


def _transcode_source(data: bytes, work: Path, video: str, blob_id: str,
                      stop: threading.Event) -> tuple[VideoIndex, dict[str, bytes]]:
    """Blocking: write the source, transcode it, read the renditions back (run in a thread)."""
    # PyAV (FFmpeg's libraries) loads at the first video, not at every control start.
    from assetcdn.control.video.transcode import transcode_hls

    work.mkdir(parents=True, exist_ok=True)
    source = work / "source"
    source.write_bytes(data)
    index = replace(transcode_hls(source, work / "hls", video=video, stop=stop), source=blob_id)
    return index, rendition_files(video, index, work / "hls")


class VideoIngester:
    def __init__(self, git: GitStore, publisher: Publisher, work_dir: Path) -> None:
        self.git = git
        self.publisher = publisher
        self.work_dir = work_dir
        self._lock = asyncio.Lock()  # transcodes are CPU-bound: one at a time
        self._tasks: set[asyncio.Task[None]] = set()
        # Set when control stops: work on a thread ends within a frame instead of holding up the exit.
        self._stop = threading.Event()
        self.demo_state: str | None = None   # making | ready | failed, for /api/health; None: no demo asked

    def on_commit(self, result: CommitResult) -> None:
        for change in result.changes:
            match = VIDEO_SOURCE.match(change.path)
            if match and change.new_blob:
                self._spawn(self.transcode(match.group(1), change.new_blob))

    def _spawn(self, coro: object) -> None:
        task = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        self._stop.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def resume(self, entries: Mapping[str, ManifestEntry]) -> None:
        """At start: transcode, in the background, each stock video whose renditions were not made from its source
        (a stop cut its transcode off or left it queued). An index that names no source is the demo's or one made
        before indexes named theirs: the source is transcoded once more. A video with sources of two extensions
        is left as it is (which of them came last is not in the tree)."""
        sources: dict[str, list[str]] = {}
        for path, entry in entries.items():
            if match := VIDEO_SOURCE.match(path):
                sources.setdefault(match.group(1), []).append(entry.blob_id)
        for video, blob_ids in sources.items():
            if len(blob_ids) == 1:
                self._spawn(self._resume(video, blob_ids[0], entries.get(f"{hls_dir(video)}/{INDEX_FILE}")))

    async def _resume(self, video: str, blob_id: str, index_entry: ManifestEntry | None) -> None:
        if index_entry is not None:
            data = await self.git.run(self.git.read_blob, index_entry.blob_id)
            try:
                made_from = VideoIndex.from_json(data).source if data is not None else None
            except (ValueError, KeyError, TypeError):
                made_from = None
            if made_from == blob_id:
                return
        log.info("transcoding %s: its renditions were not made from its stored source (a stop cut its transcode off, "
                 "it failed, or they are older than indexes naming their source)", video)
        await self.transcode(video, blob_id)

    async def transcode(self, video: str, blob_id: str) -> None:
        async with self._lock:
            data = await self.git.run(self.git.read_blob, blob_id)
            if data is None:
                return
            work = self.work_dir / f"{video}-{blob_id[:12]}"
            try:
                index, files = await asyncio.to_thread(_transcode_source, data, work, video, blob_id, self._stop)
                await self.publisher.commit(files, f"Add HLS renditions of {video} "
                                                   f"({', '.join(r.name for r in index.renditions)})")
                log.info("transcoded %s into %d renditions", video, len(index.renditions))
            except TranscodeError as exc:
                log.warning("video %s could not be transcoded: %s", video, exc)
            except Stopped:
                log.info("transcode of %s abandoned: control is stopping (it is made again on upload)", video)
            except NothingToCommit:
                pass
            finally:
                await asyncio.to_thread(shutil.rmtree, work, True)

    def install_demo(self, cache_dir: Path, size: tuple[int, int]) -> None:
        """Make the demo videos (cached in the data dir) at `size` and commit them in one commit, in the
        background; `demo_state` says how far that is."""
        self.demo_state = "making"
        self._spawn(self._install_demo(cache_dir, size))

    async def _install_demo(self, cache_dir: Path, size: tuple[int, int]) -> None:
        started = time.perf_counter()
        # PyAV loads only when demo content is installed.
        from assetcdn.control.video.demo import ensure_demo_videos

        try:
            async with self._lock:
                indexes = await asyncio.to_thread(partial(ensure_demo_videos, cache_dir, width=size[0], height=size[1],
                                                          stop=self._stop))
                files: dict[str, bytes] = {}
                for video, index in indexes.items():
                    files |= await asyncio.to_thread(rendition_files, video, index, cache_dir / video)
                with contextlib.suppress(NothingToCommit):
                    await self.publisher.commit(files, "Add demo videos black, mount_fuji and nature (HLS 1080/720/480)")
        except Stopped:
            log.info("demo videos abandoned: control is stopping (they are made at the next start)")
            return
        except (TranscodeError, OSError):
            self.demo_state = "failed"
            log.exception("the demo videos could not be made")
            return
        self.demo_state = "ready"
        log.info("demo videos ready to stream in %.1f s", time.perf_counter() - started)
