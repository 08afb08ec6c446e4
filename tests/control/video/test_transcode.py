"""The HLS transcoder: every segment of every rendition is a real, independently decodable
MPEG-TS byte range, starting on a keyframe, with the durations the index and playlist claim."""

from __future__ import annotations

import io
import threading
from fractions import Fraction
from pathlib import Path

import av
import pytest

from assetcdn.control.video.demo import (
    ensure_demo_videos,
    write_synthetic_video,
)
from assetcdn.control.video.outcome import INDEX_FILE, Stopped, TranscodeError
from assetcdn.control.video.transcode import h264_codecs, plan_renditions, transcode_hls
from assetcdn.shared.hls import QUALITIES, VIDEOS, Rendition, Segment, VideoIndex, variant_playlist

FPS = 4  # x264 costs per frame: a low rate keeps the file short, every check holds at any rate
SECONDS = 22  # two full segments and a short last one
H264_PROFILES = {"Baseline": 0x42, "Constrained Baseline": 0x42, "Main": 0x4D, "High": 0x64}


@pytest.fixture(scope="session")
def transcoded(tmp_path_factory: pytest.TempPathFactory) -> tuple[VideoIndex, Path]:
    work = tmp_path_factory.mktemp("hls")
    source = write_synthetic_video(work / "nature.mp4", "nature", seconds=SECONDS, width=1280,
                                   height=720, fps=FPS, audio=True)
    out = work / "nature"
    return transcode_hls(source, out), out


def segment_bytes(out: Path, rendition: Rendition, segment: Segment) -> bytes:
    with (out / rendition.file).open("rb") as f:
        f.seek(segment.offset)
        return f.read(segment.length)


def decode_segment(data: bytes) -> tuple[list[av.VideoFrame], int, av.codec.context.CodecContext]:
    """Decode one byte range on its own: video frames, audio frame count, video codec."""
    with av.open(io.BytesIO(data), format="mpegts") as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
        video = list(container.decode(video=0))
        codec = container.streams.video[0].codec_context
    with av.open(io.BytesIO(data), format="mpegts") as container:
        audio = sum(1 for _ in container.decode(audio=0))
    return video, audio, codec


def test_index_lists_every_quality_at_its_size(transcoded: tuple[VideoIndex, Path]) -> None:
    index, out = transcoded
    assert index.video == "nature"
    assert [r.quality for r in index.renditions] == list(QUALITIES)
    # 1080 is not upscaled from a 720p source; 480 keeps 16:9 with even sides.
    assert [(r.width, r.height) for r in index.renditions] == [(1280, 720), (1280, 720),
                                                             (854, 480)]
    # The two 720p-sized renditions come from one encode: same bytes, same segments.
    assert (out / "1080.ts").read_bytes() == (out / "720.ts").read_bytes()
    assert index.renditions[0].segments == index.renditions[1].segments
    assert VideoIndex.read(out / INDEX_FILE) == index
    for r in index.renditions:
        assert r.file == f"{r.quality}.ts"
        assert (out / r.file).stat().st_size == r.size
        assert r.frame_rate == FPS
        assert r.codecs.endswith(",mp4a.40.2")
        assert 0 < r.average_bandwidth <= r.bandwidth
    assert not (out / ".parts").exists()


def test_segments_tile_the_file_on_ts_packet_boundaries(
        transcoded: tuple[VideoIndex, Path]) -> None:
    index, out = transcoded
    for r in index.renditions:
        assert [s.index for s in r.segments] == [0, 1, 2]
        offset = 0
        for s in r.segments:
            assert s.offset == offset and s.length > 0
            assert s.offset % 188 == 0 and s.length % 188 == 0
            offset += s.length
        assert offset == r.size
        assert [s.duration for s in r.segments] == [10.0, 10.0, 2.0]


def test_every_segment_decodes_alone_from_a_keyframe(transcoded: tuple[VideoIndex, Path]) -> None:
    index, out = transcoded
    for r in index.renditions:
        starts = []
        for s in r.segments:
            data = segment_bytes(out, r, s)
            # Tables first: the muxer writes SDT, PAT and PMT before any media packet.
            pids = [(data[i + 1] & 0x1F) << 8 | data[i + 2] for i in range(0, 3 * 188, 188)]
            assert all(data[i] == 0x47 for i in range(0, len(data), 188))
            assert 0 in pids and 0x1000 in pids  # PAT, and FFmpeg's first PMT PID
            frames, audio_frames, codec = decode_segment(data)
            assert frames and frames[0].key_frame
            assert not any(f.key_frame for f in frames[1:])  # one keyframe per segment
            assert (frames[0].width, frames[0].height) == (r.width, r.height)
            # Frame count times the frame interval is the indexed duration.
            assert len(frames) * Fraction(1, FPS) == pytest.approx(s.duration, abs=1e-6)
            assert audio_frames >= s.duration * 48000 / 1024 - 2
            assert r.codecs.startswith(f"avc1.{H264_PROFILES[codec.profile]:02x}")
            starts.append(float(frames[0].pts * frames[0].time_base))
        # Timestamps run on across segments: each starts where the previous one ended.
        for s, (a, b) in zip(r.segments, zip(starts, starts[1:], strict=False), strict=False):
            assert b - a == pytest.approx(s.duration, abs=1e-4)


def test_playlist_durations_add_up_to_the_decoded_frames(
        transcoded: tuple[VideoIndex, Path]) -> None:
    index, out = transcoded
    for r in index.renditions:
        lines = variant_playlist("nature", r.quality, index).splitlines()
        total = sum(float(line[len("#EXTINF:"):-1]) for line in lines
                    if line.startswith("#EXTINF:"))
        frames = sum(len(decode_segment(segment_bytes(out, r, s))[0]) for s in r.segments)
        assert total == pytest.approx(frames / FPS, abs=1 / FPS)
        assert total == pytest.approx(SECONDS, abs=1 / FPS)


def test_codecs_string_is_read_from_the_sps(transcoded: tuple[VideoIndex, Path]) -> None:
    index, out = transcoded
    r = index.renditions[0]
    data = segment_bytes(out, r, r.segments[0])
    with av.open(io.BytesIO(data), format="mpegts") as container:
        packet = next(p for p in container.demux(video=0) if p.size)
        assert r.codecs.split(",")[0] == h264_codecs(bytes(packet))


def test_source_without_audio_gets_a_silent_aac_track(tmp_path: Path) -> None:
    source = write_synthetic_video(tmp_path / "black.mp4", "black", seconds=4, width=320,
                                   height=180, fps=FPS, audio=False)
    index = transcode_hls(source, tmp_path / "out", segment_seconds=2)
    assert [(r.width, r.height) for r in index.renditions] == [(320, 180)] * 3
    for r in index.renditions:
        assert [s.duration for s in r.segments] == [2.0, 2.0]
        assert r.codecs.endswith(",mp4a.40.2")
        for s in r.segments:
            frames, audio_frames, _ = decode_segment(segment_bytes(tmp_path / "out", r, s))
            assert frames[0].key_frame and len(frames) == 2 * FPS
            assert audio_frames >= 2 * 48000 / 1024 - 2


def test_plan_scales_the_short_side_and_never_upscales() -> None:
    assert [(p.width, p.height) for p in plan_renditions(1920, 1080, QUALITIES)] == [
        (1920, 1080), (1280, 720), (854, 480)]
    assert [(p.width, p.height) for p in plan_renditions(1080, 1920, (720,))] == [(720, 1280)]
    assert [(p.width, p.height) for p in plan_renditions(640, 360, (1080, 480))] == [
        (640, 360), (640, 360)]


def test_h264_codecs_from_annex_b_and_avcc() -> None:
    sps = b"\x00\x00\x00\x01\x67\x64\x00\x28\xac"
    assert h264_codecs(b"\x00\x00\x00\x01\x09\xf0" + sps) == "avc1.640028"
    assert h264_codecs(b"\x01\x42\xc0\x1f\xff") == "avc1.42c01f"
    with pytest.raises(TranscodeError):
        h264_codecs(b"\x00\x00\x01\x65\x88")


def test_a_file_that_is_not_a_video_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.mp4"
    bogus.write_bytes(b"not a video at all" * 100)
    with pytest.raises(TranscodeError):
        transcode_hls(bogus, tmp_path / "out")
    assert not (tmp_path / "out" / ".parts").exists()
    assert not (tmp_path / "out" / INDEX_FILE).exists()


def test_synthetic_videos_of_the_three_scenes(tmp_path: Path) -> None:
    for video in VIDEOS:
        path = write_synthetic_video(tmp_path / f"{video}.mp4", video, seconds=3, width=320, height=180, fps=FPS,
                                     audio=video != "black")
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            assert (stream.codec_context.width, stream.codec_context.height) == (320, 180)
            assert sum(1 for _ in container.decode(video=0)) == 3 * FPS
            assert bool(container.streams.audio) == (video != "black")


def test_demo_videos_are_made_once_and_remade_when_damaged(tmp_path: Path) -> None:
    first = ensure_demo_videos(tmp_path, seconds=3, width=320, height=180, fps=FPS)
    assert sorted(first) == sorted(VIDEOS)
    for video, index in first.items():   # drawn frames made into renditions as a file's would be
        for r in index.renditions:
            (segment,) = r.segments
            frames, audio_frames, _ = decode_segment(segment_bytes(tmp_path / video, r, segment))
            assert frames[0].key_frame and len(frames) == 3 * FPS and segment.duration == 3.0
            assert audio_frames >= 3 * 48000 / 1024 - 2   # the scenes' sound, or silence for black
    made = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.ts")}
    assert len(made) == 9
    assert ensure_demo_videos(tmp_path, seconds=3, width=320, height=180, fps=FPS) == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.ts")} == made
    damaged = tmp_path / "nature" / "480.ts"
    damaged.write_bytes(damaged.read_bytes()[:1000])
    again = ensure_demo_videos(tmp_path, seconds=3, width=320, height=180, fps=FPS)
    assert again["nature"].rendition(480).size == (tmp_path / "nature" / "480.ts").stat().st_size
    assert (tmp_path / "black" / "480.ts").stat().st_mtime_ns == made[tmp_path / "black" / "480.ts"]


def test_a_stop_ends_the_work_between_two_frames_and_nothing_half_made_is_reused(tmp_path: Path) -> None:
    stop = threading.Event()
    source = write_synthetic_video(tmp_path / "nature.mp4", "nature", seconds=2, width=320, height=180, fps=FPS,
                                   audio=True)
    stop.set()
    with pytest.raises(Stopped):
        transcode_hls(source, tmp_path / "out", stop=stop)
    assert not (tmp_path / "out" / INDEX_FILE).exists() and not (tmp_path / "out" / ".parts").exists()
    with pytest.raises(Stopped):
        write_synthetic_video(tmp_path / "again.mp4", "mount_fuji", seconds=2, width=320, height=180, fps=FPS,
                              audio=True, stop=stop)
    with pytest.raises(Stopped):
        ensure_demo_videos(tmp_path / "cache", seconds=2, width=320, height=180, fps=FPS, stop=stop)
    assert not list((tmp_path / "cache").rglob(INDEX_FILE))
    # Not stopped, the same cache directory gives complete videos.
    indexes = ensure_demo_videos(tmp_path / "cache", seconds=2, width=320, height=180, fps=FPS)
    assert sorted(indexes) == sorted(VIDEOS)
