"""HLS for ``/api/stream``: the rendition index, the playlists built from it, and query parsing.

Control writes a ``VideoIndex`` next to the MPEG-TS renditions when it transcodes a stock
video; the edge reads it to answer the three stream requests (docs/api-guide.md "Video (HLS)"): no
``quality`` gives the master playlist, ``quality`` the variant playlist, ``quality`` and
``segment`` one segment, served as its byte range of the rendition file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from assetcdn.shared.errors import LegacyError

VIDEOS: tuple[str, ...] = ("black", "mount_fuji", "nature")
QUALITIES: tuple[int, ...] = (1080, 720, 480)
SEGMENT_SECONDS = 10
STREAM_PATH = "/api/stream"
# The original served every segment from its one 720p file, so clients may omit quality.
DEFAULT_SEGMENT_QUALITY = 720
INDEX_VERSION = 1
# The playlists name their video's version (``v``, the start of its index's content id) in every URI they
# hold, so a segment's URL, cached immutable for a year, never answers the bytes of another upload of the video.
VERSION_CHARS = 12

PLAYLIST_CONTENT_TYPE = "application/vnd.apple.mpegurl"
SEGMENT_CONTENT_TYPE = "video/mp2t"
PLAYLIST_CACHE_CONTROL = "public, max-age=300"
SEGMENT_CACHE_CONTROL = "public, max-age=31536000, immutable"

INVALID_VIDEO = "Invalid video. Available: " + ", ".join(VIDEOS)
INVALID_QUALITY = "Invalid quality. Available: " + ", ".join(str(q) for q in QUALITIES)
INVALID_SEGMENT = "Invalid segment index"
SEGMENT_OUT_OF_RANGE = "Segment index out of range"
VIDEO_NOT_FOUND = "Video not found"

_SEGMENT_DIGITS = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True, slots=True)
class Segment:
    """One media segment: a byte range of the rendition file, decodable on its own."""

    index: int
    offset: int
    length: int
    duration: float

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "offset": self.offset, "length": self.length,
                "duration": self.duration}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Segment:
        return cls(int(data["index"]), int(data["offset"]), int(data["length"]),
                   float(data["duration"]))


@dataclass(frozen=True, slots=True)
class Rendition:
    """One quality of a video: an MPEG-TS file and its segment index."""

    quality: int
    width: int
    height: int
    bandwidth: int  # peak segment bit rate, bits/s (HLS BANDWIDTH)
    average_bandwidth: int  # whole-file bit rate, bits/s (HLS AVERAGE-BANDWIDTH)
    frame_rate: float
    codecs: str  # RFC 6381 codecs of what was encoded, e.g. "avc1.42c028,mp4a.40.2"
    file: str  # file name relative to the index
    size: int
    segments: tuple[Segment, ...]

    @property
    def duration(self) -> float:
        return sum(s.duration for s in self.segments)

    @property
    def name(self) -> str:
        return f"{self.quality}p"

    def segment(self, index: int) -> Segment:
        if not 0 <= index < len(self.segments):
            raise LegacyError(404, SEGMENT_OUT_OF_RANGE)
        return self.segments[index]

    def to_dict(self) -> dict[str, Any]:
        return {"quality": self.quality, "width": self.width, "height": self.height,
                "bandwidth": self.bandwidth, "average_bandwidth": self.average_bandwidth,
                "frame_rate": self.frame_rate, "codecs": self.codecs, "file": self.file,
                "size": self.size, "segments": [s.to_dict() for s in self.segments]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rendition:
        return cls(
            quality=int(data["quality"]), width=int(data["width"]), height=int(data["height"]),
            bandwidth=int(data["bandwidth"]), average_bandwidth=int(data["average_bandwidth"]),
            frame_rate=float(data["frame_rate"]), codecs=str(data["codecs"]),
            file=str(data["file"]), size=int(data["size"]),
            segments=tuple(Segment.from_dict(s) for s in data["segments"]),
        )


@dataclass(frozen=True, slots=True)
class VideoIndex:
    """Every rendition of one video, as written by the transcoder (``index.json``)."""

    video: str
    renditions: tuple[Rendition, ...]
    source: str | None = None  # the git blob id of the uploaded source (None: the demo's, or an older index)

    def rendition(self, quality: int) -> Rendition:
        for rendition in self.renditions:
            if rendition.quality == quality:
                return rendition
        raise LegacyError(404, VIDEO_NOT_FOUND)

    def to_json(self) -> bytes:
        source = {} if self.source is None else {"source": self.source}
        return orjson.dumps({"version": INDEX_VERSION, "video": self.video, **source,
                             "renditions": [r.to_dict() for r in self.renditions]},
                            option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes | str) -> VideoIndex:
        raw = orjson.loads(data)
        if raw.get("version") != INDEX_VERSION:
            raise ValueError(f"unsupported video index version: {raw.get('version')!r}")
        source = raw.get("source")
        return cls(video=str(raw["video"]),
                   renditions=tuple(Rendition.from_dict(r) for r in raw["renditions"]),
                   source=None if source is None else str(source))

    def write(self, path: Path) -> None:
        """Write atomically, so a reader never sees half an index."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_json())
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> VideoIndex:
        return cls.from_json(path.read_bytes())


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """A validated ``/api/stream`` query. ``segment`` may still be past the end of the index."""

    video: str
    quality: int | None = None
    segment: int | None = None
    version: str | None = None  # ``v``: the video version a playlist named; None from a URI built without one

    @property
    def wants_master(self) -> bool:
        return self.quality is None and self.segment is None

    @property
    def wants_segment(self) -> bool:
        return self.segment is not None


def parse_stream_query(query: Mapping[str, str]) -> StreamRequest:
    """Validate ``video``, ``quality`` and ``segment``, in that order (legacy envelope errors).

    A parameter that is present but empty is invalid, like any other bad value. A segment
    without a quality refers to the 720p rendition, as the original's one file did. ``v`` is
    kept as it came: the route compares it with the video's version.
    """
    video = query.get("video")
    if video not in VIDEOS:
        raise LegacyError(400, INVALID_VIDEO)
    quality: int | None = None
    raw_quality = query.get("quality")
    if raw_quality is not None:
        if raw_quality not in {str(q) for q in QUALITIES}:
            raise LegacyError(400, INVALID_QUALITY)
        quality = int(raw_quality)
    version = query.get("v")
    raw_segment = query.get("segment")
    if raw_segment is None:
        return StreamRequest(video, quality, version=version)
    if not raw_segment.isascii() or not raw_segment.isdigit():
        raise LegacyError(400, INVALID_SEGMENT)
    if not _SEGMENT_DIGITS.fullmatch(raw_segment):
        raise LegacyError(404, SEGMENT_OUT_OF_RANGE)  # a valid integer, but no video is that long
    return StreamRequest(video, quality or DEFAULT_SEGMENT_QUALITY, int(raw_segment), version)


def stream_uri(video: str, quality: int | None = None, segment: int | None = None,
               base: str = STREAM_PATH, version: str | None = None) -> str:
    uri = f"{base}?video={video}"
    if quality is not None:
        uri += f"&quality={quality}"
    if segment is not None:
        uri += f"&segment={segment}"
    if version is not None:
        uri += f"&v={version}"
    return uri


def master_playlist(video: str, index: VideoIndex, base: str = STREAM_PATH, version: str | None = None) -> str:
    """All renditions, highest first. NAME is kept from the original for its clients."""
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-INDEPENDENT-SEGMENTS", ""]
    for r in sorted(index.renditions, key=lambda r: r.quality, reverse=True):
        lines.append(
            f"#EXT-X-STREAM-INF:BANDWIDTH={r.bandwidth},AVERAGE-BANDWIDTH={r.average_bandwidth},"
            f'RESOLUTION={r.width}x{r.height},FRAME-RATE={r.frame_rate:.3f},'
            f'CODECS="{r.codecs}",NAME="{r.name}"'
        )
        lines.append(stream_uri(video, r.quality, base=base, version=version))
    return "\n".join(lines) + "\n"


def variant_playlist(video: str, quality: int, index: VideoIndex,
                     base: str = STREAM_PATH, version: str | None = None) -> str:
    """One rendition's media playlist: exact segment durations from the index, VOD, ended."""
    rendition = index.rendition(quality)
    target = max((math.ceil(round(s.duration, 3)) for s in rendition.segments), default=0)
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{target}",
             "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD", ""]
    for s in rendition.segments:
        lines.append(f"#EXTINF:{s.duration:.3f},")
        lines.append(stream_uri(video, quality, s.index, base=base, version=version))
    lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"
