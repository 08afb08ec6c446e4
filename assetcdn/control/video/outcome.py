"""How a transcode ends, without loading PyAV: control's ingest loads this at every start, and `transcode`
(PyAV, FFmpeg's libraries) only when a video is uploaded or the demo videos are made."""

from __future__ import annotations

import threading

INDEX_FILE = "index.json"


class TranscodeError(Exception):
    """The source cannot be turned into HLS renditions."""


class Stopped(Exception):
    """The process is stopping: the work was abandoned between two frames, its output left incomplete
    (a half-made index or rendition is never reused: it is made again next time)."""


def check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Stopped()
