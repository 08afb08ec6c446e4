"""Transcode a stock video once into HLS renditions: H.264 + AAC in MPEG-TS, 10-second segments.

Decisions a reader cannot see from the code:
- The source is decoded once; every rendition scales the same decoded frames.
- Keyframes: a frame is forced to an IDR at the first frame at or after every segment
  boundary, and x264 gets ``keyint=infinite`` and ``scenecut=0``, so the forced IDRs are the
  only keyframes and every segment starts on one.
- Each segment is its own MPEG-TS file while encoding (FFmpeg's ``segment`` muxer cuts at
  those keyframes), so every segment begins with PAT/PMT and is decodable on its own;
  timestamps stay continuous across segments. The rendition file ``<quality>.ts`` is their
  concatenation, and a segment's byte range is exactly one of those files.
- Audio is always AAC-LC 48 kHz stereo; a source without audio gets a silent track, so
  every rendition has the same two elementary streams and CODECS is uniform.
- No upscaling: the shorter side is scaled to the quality, capped at the source's shorter
  side. A rendition above the source keeps its quality name (URLs stay valid) and the
  source's size; the index records the real size.
- Renditions of the same size are encoded once (a 720p source's 1080 and 720 share one
  encode, with the lower quality's peak-rate cap); each keeps its own file and index entry.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np
from av.audio.resampler import AudioResampler
from av.video.frame import PictureType

from assetcdn.control.video.outcome import INDEX_FILE, TranscodeError, check_stop
from assetcdn.shared.hls import QUALITIES, SEGMENT_SECONDS, Rendition, Segment, VideoIndex

AUDIO_RATE = 48000
AUDIO_LAYOUT = "stereo"
AUDIO_CODECS = "mp4a.40.2"  # AAC-LC, what FFmpeg's native encoder writes
VIDEO_TIME_BASE = Fraction(1, 90000)  # MPEG-TS clock
DEFAULT_FPS = Fraction(25)
# Peak-rate caps per quality (bits/s) on top of constant quality, so BANDWIDTH stays sane.
MAX_RATES = {1080: 6_000_000, 720: 3_500_000, 480: 1_500_000}
DEFAULT_MAX_RATE = 2_000_000
TS_PACKET = 188


@dataclass(frozen=True, slots=True)
class RenditionPlan:
    quality: int
    width: int
    height: int


def plan_renditions(width: int, height: int, qualities: Sequence[int]) -> list[RenditionPlan]:
    """Scale the shorter side to each quality, never above the source, keeping the aspect."""
    short, long_ = min(width, height), max(width, height)
    plans = []
    for quality in qualities:
        target_short = _even(min(quality, short))
        target_long = _even(long_ * target_short / short)
        w, h = (target_long, target_short) if width >= height else (target_short, target_long)
        plans.append(RenditionPlan(quality, w, h))
    return plans


def _even(n: float) -> int:
    return max(2, math.floor(n / 2 + 0.5) * 2)


def h264_codecs(bitstream: bytes) -> str:
    """RFC 6381 ``avc1.PPCCLL`` from the first SPS in an Annex B bitstream or avcC record."""
    if bitstream[:1] == b"\x01" and len(bitstream) >= 4:  # avcC: version, profile, compat, level
        return f"avc1.{bitstream[1]:02x}{bitstream[2]:02x}{bitstream[3]:02x}"
    for start in _nal_starts(bitstream):
        if start + 3 < len(bitstream) and bitstream[start] & 0x1F == 7:
            profile, compat, level = bitstream[start + 1 : start + 4]
            return f"avc1.{profile:02x}{compat:02x}{level:02x}"
    raise TranscodeError("the encoder wrote no H.264 sequence parameter set")


def _nal_starts(data: bytes) -> Iterator[int]:
    pos = data.find(b"\x00\x00\x01")
    while pos != -1:
        yield pos + 3
        pos = data.find(b"\x00\x00\x01", pos + 3)


class _RenditionEncoder:
    """One output size: scale, encode H.264, mux with the shared AAC packets into TS segments."""

    def __init__(self, plan: RenditionPlan, parts_dir: Path, fps: Fraction,
                 segment_seconds: int, preset: str) -> None:
        self.plan = plan
        self.parts_dir = parts_dir
        parts_dir.mkdir(parents=True, exist_ok=True)
        self.container = av.open(
            str(parts_dir / "%05d.ts"), "w", format="segment",
            options={"segment_time": str(segment_seconds), "segment_format": "mpegts",
                     "reset_timestamps": "0", "break_non_keyframes": "0"},
        )
        max_rate = MAX_RATES.get(plan.quality, DEFAULT_MAX_RATE)
        video = self.container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = plan.width, plan.height, "yuv420p"
        video.time_base = VIDEO_TIME_BASE
        video.codec_context.time_base = VIDEO_TIME_BASE
        video.options = {
            "preset": preset, "crf": "23", "maxrate": str(max_rate),
            "bufsize": str(max_rate * 2),
            "x264-params": "keyint=infinite:scenecut=0:forced-idr=1:bframes=0",
        }
        self.video = video
        audio = self.container.add_stream("aac", rate=AUDIO_RATE)
        audio.layout = AUDIO_LAYOUT
        self.audio = audio
        self.codecs: str | None = None
        self.closed = False

    def encode_video(self, frame: av.VideoFrame, pts: int, keyframe: bool) -> None:
        # Scale from the decoded frame: chaining 1080 -> 720 -> 480 measured slower here. A frame
        # already at the rendition's size and format is encoded as it is (a copy costs a third of a scale).
        if (frame.width, frame.height, frame.format.name) == (self.plan.width, self.plan.height, "yuv420p"):
            scaled = frame
        else:
            scaled = frame.reformat(self.plan.width, self.plan.height, "yuv420p", interpolation="AREA")
        scaled.pts = pts
        scaled.time_base = VIDEO_TIME_BASE
        scaled.pict_type = PictureType.I if keyframe else PictureType.NONE
        self._mux_video(self.video.encode(scaled))

    def mux_audio(self, packet: av.Packet) -> None:
        copy = av.Packet(bytes(packet))
        copy.pts, copy.dts, copy.duration = packet.pts, packet.dts, packet.duration
        copy.time_base = packet.time_base
        copy.stream = self.audio
        self.container.mux(copy)

    def _mux_video(self, packets: list[av.Packet]) -> None:
        for packet in packets:
            if self.codecs is None:
                extradata = self.video.codec_context.extradata
                self.codecs = h264_codecs(extradata if extradata else bytes(packet))
            self.container.mux(packet)

    def close(self) -> list[Path]:
        self._mux_video(self.video.encode(None))
        self.container.close()
        self.closed = True
        return sorted(self.parts_dir.glob("*.ts"))

    def abandon(self) -> None:
        """Release the muxer after a failure (no-op once closed)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(av.error.FFmpegError, OSError):
                self.container.close()


class _SharedAudio:
    """Encodes AAC once for all renditions, from the source's audio or from silence."""

    def __init__(self) -> None:
        self.encoder = av.CodecContext.create("aac", "w")
        self.encoder.sample_rate = AUDIO_RATE
        self.encoder.layout = AUDIO_LAYOUT
        self.encoder.format = "fltp"
        self.encoder.bit_rate = 96_000
        self.encoder.time_base = Fraction(1, AUDIO_RATE)
        self.encoder.open()
        self.resampler = AudioResampler(format="fltp", layout=AUDIO_LAYOUT, rate=AUDIO_RATE)
        self.samples = 0  # next sample to encode, counted from the first video frame

    def source_frame(self, frame: av.AudioFrame, start: float) -> list[av.Packet]:
        """A decoded source frame starting at ``start`` s (video clock); gaps become silence."""
        packets = self.silence_until(start)
        for resampled in self.resampler.resample(frame):
            if self.samples == 0 and start < 0:  # audio before the first picture is dropped
                skip = min(resampled.samples, round(-start * AUDIO_RATE))
                start += skip / AUDIO_RATE
                if skip == resampled.samples:
                    continue
                resampled = _tail(resampled, skip)
            packets += self._encode(resampled)
        return packets

    def silence_until(self, seconds: float) -> list[av.Packet]:
        packets: list[av.Packet] = []
        end = round(seconds * AUDIO_RATE)
        while self.samples < end:
            count = min(1024, end - self.samples)
            silent = av.AudioFrame.from_ndarray(np.zeros((2, count), np.float32), format="fltp",
                                                layout=AUDIO_LAYOUT)
            silent.sample_rate = AUDIO_RATE
            packets += self._encode(silent)
        return packets

    def flush(self) -> list[av.Packet]:
        return list(self.encoder.encode(None))

    def _encode(self, frame: av.AudioFrame) -> list[av.Packet]:
        frame.pts = self.samples
        frame.time_base = Fraction(1, AUDIO_RATE)
        self.samples += frame.samples
        return list(self.encoder.encode(frame))


def _tail(frame: av.AudioFrame, skip: int) -> av.AudioFrame:
    tail = av.AudioFrame.from_ndarray(np.ascontiguousarray(frame.to_ndarray()[:, skip:]),
                                      format="fltp", layout=AUDIO_LAYOUT)
    tail.sample_rate = AUDIO_RATE
    return tail


def transcode_hls(source: Path, out_dir: Path, *, qualities: Sequence[int] = QUALITIES,
                  segment_seconds: int = SEGMENT_SECONDS, video: str | None = None,
                  preset: str = "veryfast", stop: threading.Event | None = None) -> VideoIndex:
    """Write ``<quality>.ts`` per rendition and ``index.json`` into ``out_dir``; return the index.

    ``video`` names the index (default: the source's stem). ``preset`` is x264's; the demo
    uses ``ultrafast`` to start in seconds. ``stop``, once set, ends the work between two frames
    with ``Stopped``.
    """
    try:
        container = av.open(str(source))
    except (av.error.FFmpegError, OSError) as exc:
        raise TranscodeError(f"cannot open {source.name}: {exc}") from exc
    try:
        if not container.streams.video:
            raise TranscodeError(f"{source.name} has no video stream")
        in_video = container.streams.video[0]
        in_video.thread_type = "AUTO"
        in_audio = container.streams.audio[0] if container.streams.audio else None
        streams = [in_video] + ([in_audio] if in_audio is not None else [])
        decoded = (frame for packet in container.demux(streams) for frame in packet.decode())
        return transcode_frames(
            decoded, out_dir, video=video or source.stem, width=in_video.codec_context.width,
            height=in_video.codec_context.height,
            fps=Fraction(in_video.average_rate or in_video.guessed_rate or DEFAULT_FPS),
            has_audio=in_audio is not None, qualities=qualities, segment_seconds=segment_seconds,
            preset=preset, stop=stop)
    finally:
        container.close()


def transcode_frames(frames: Iterable[av.VideoFrame | av.AudioFrame], out_dir: Path, *, video: str,
                     width: int, height: int, fps: Fraction, has_audio: bool,
                     qualities: Sequence[int] = QUALITIES, segment_seconds: int = SEGMENT_SECONDS,
                     preset: str = "veryfast", stop: threading.Event | None = None) -> VideoIndex:
    """`transcode_hls` for decoded frames: a file's, or pictures and sound made in memory (the demo's
    scenes, which are then never encoded only to be decoded again). Video frames of ``width`` x
    ``height`` and, when ``has_audio``, audio frames, each with its time set, in time order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / ".parts"  # one transcode per out_dir at a time
    shutil.rmtree(work, ignore_errors=True)
    try:
        renditions = _encode_renditions(iter(frames), has_audio, width, height, fps, work, out_dir,
                                        qualities, segment_seconds, preset, stop)
    except av.error.FFmpegError as exc:
        raise TranscodeError(f"cannot transcode {video}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    index = VideoIndex(video=video, renditions=tuple(renditions))
    index.write(out_dir / INDEX_FILE)
    return index


def _encode_renditions(frames: Iterator[av.VideoFrame | av.AudioFrame], has_audio: bool, width: int,
                       height: int, fps: Fraction, work: Path, out_dir: Path, qualities: Sequence[int],
                       segment_seconds: int, preset: str, stop: threading.Event | None) -> list[Rendition]:
    plans = plan_renditions(width, height, qualities)
    encoders: dict[tuple[int, int], _RenditionEncoder] = {}  # one per output size
    try:
        # The lowest quality of a size encodes it: its peak-rate cap is within every other's.
        for plan in sorted(plans, key=lambda p: p.quality):
            if (plan.width, plan.height) not in encoders:
                encoders[plan.width, plan.height] = _RenditionEncoder(
                    plan, work / str(plan.quality), fps, segment_seconds, preset)
        starts, end = _encode_all(frames, has_audio, list(encoders.values()), _SharedAudio(),
                                  segment_seconds, fps, stop)
        parts = {size: encoder.close() for size, encoder in encoders.items()}
    finally:
        for encoder in encoders.values():
            encoder.abandon()
    return [_assemble(plan, encoders[plan.width, plan.height], parts[plan.width, plan.height],
                      starts, end, out_dir, fps)
            for plan in plans]


def _encode_all(frames: Iterator[av.VideoFrame | av.AudioFrame], has_audio: bool,
                encoders: list[_RenditionEncoder], audio: _SharedAudio, segment_seconds: int,
                fps: Fraction, stop: threading.Event | None) -> tuple[list[float], float]:
    """Feed every rendition each picture once. Returns segment start times and the video's end (s)."""
    origin: float | None = None  # time of the first picture; the output clock starts there
    last_pts = -1
    decoded = 0
    starts: list[float] = []
    end = 0.0

    def deliver(packets: list[av.Packet]) -> None:
        for packet in packets:
            for encoder in encoders:
                encoder.mux_audio(packet)

    for frame in frames:
        check_stop(stop)
        if isinstance(frame, av.VideoFrame):
            t = frame.time if frame.time is not None else float(decoded / fps)
            decoded += 1
            if origin is None:
                origin = t
            pts = round((t - origin) * 90000)
            if pts <= last_pts:
                continue  # duplicate or out-of-order timestamp: keep the clock monotonic
            seconds = pts / 90000
            # The segment muxer cuts at the first keyframe at or after each multiple of
            # segment_seconds: force exactly those frames to be (the only) keyframes.
            boundary = not starts or seconds >= (math.floor(starts[-1] / segment_seconds)
                                                 + 1) * segment_seconds
            if boundary:
                starts.append(seconds)
            for encoder in encoders:
                encoder.encode_video(frame, pts, boundary)
            last_pts = pts
            end = seconds + float(1 / fps)  # the last picture lasts one nominal frame
            if not has_audio:
                deliver(audio.silence_until(end))
        elif isinstance(frame, av.AudioFrame) and origin is not None and frame.time is not None:
            deliver(audio.source_frame(frame, frame.time - origin))
    if not starts:
        raise TranscodeError("the source has no decodable video frames")
    deliver(audio.silence_until(end))
    deliver(audio.flush())
    return starts, end


def _assemble(plan: RenditionPlan, encoder: _RenditionEncoder, parts: list[Path], starts: list[float],
              end: float, out_dir: Path, fps: Fraction) -> Rendition:
    """Concatenate the segment files of ``plan``'s size into ``<quality>.ts`` and index their byte ranges."""
    if len(parts) != len(starts):
        raise TranscodeError(f"{plan.quality}p: muxer cut {len(parts)} segments, "
                             f"expected {len(starts)}")
    name = f"{plan.quality}.ts"
    tmp = out_dir / (name + ".tmp")
    segments = []
    offset = 0
    with tmp.open("wb") as out:
        for i, part in enumerate(parts):
            data = part.read_bytes()
            if len(data) % TS_PACKET:
                raise TranscodeError(f"segment {i} is not a whole number of TS packets")
            out.write(data)
            stop = starts[i + 1] if i + 1 < len(starts) else end
            segments.append(Segment(i, offset, len(data), round(stop - starts[i], 6)))
            offset += len(data)
    tmp.replace(out_dir / name)
    duration = end - starts[0]
    peak = max(s.length * 8 / s.duration for s in segments)
    return Rendition(
        quality=plan.quality, width=plan.width, height=plan.height,
        bandwidth=math.ceil(peak), average_bandwidth=math.ceil(offset * 8 / duration),
        frame_rate=round(float(fps), 3),
        codecs=f"{encoder.codecs},{AUDIO_CODECS}", file=name, size=offset,
        segments=tuple(segments),
    )
