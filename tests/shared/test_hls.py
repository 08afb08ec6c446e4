"""Playlists built from a rendition index, line by line, and /api/stream query validation."""

from __future__ import annotations

import pytest

from assetcdn.shared.errors import LegacyError
from assetcdn.shared.hls import (
    QUALITIES,
    VIDEOS,
    Rendition,
    Segment,
    StreamRequest,
    VideoIndex,
    master_playlist,
    parse_stream_query,
    variant_playlist,
)
from assetcdn.shared.openapi import document


def rendition(quality: int, width: int, height: int, durations: list[float]) -> Rendition:
    segments, offset = [], 0
    for i, duration in enumerate(durations):
        segments.append(Segment(i, offset, 188 * 100 * (i + 1), duration))
        offset += segments[-1].length
    return Rendition(quality=quality, width=width, height=height, bandwidth=quality * 2000,
                     average_bandwidth=quality * 1500, frame_rate=10.0,
                     codecs="avc1.42c028,mp4a.40.2", file=f"{quality}.ts", size=offset,
                     segments=tuple(segments))


@pytest.fixture
def index() -> VideoIndex:
    return VideoIndex("mount_fuji", (
        rendition(480, 854, 480, [10.0, 10.0, 4.2]),
        rendition(1080, 1920, 1080, [10.0, 10.0, 4.2]),
        rendition(720, 1280, 720, [10.0, 10.0, 4.2]),
    ))


def test_master_playlist_lists_every_rendition_highest_first(index: VideoIndex) -> None:
    assert master_playlist("mount_fuji", index).splitlines() == [
        "#EXTM3U",
        "#EXT-X-VERSION:3",
        "#EXT-X-INDEPENDENT-SEGMENTS",
        "",
        "#EXT-X-STREAM-INF:BANDWIDTH=2160000,AVERAGE-BANDWIDTH=1620000,RESOLUTION=1920x1080,"
        'FRAME-RATE=10.000,CODECS="avc1.42c028,mp4a.40.2",NAME="1080p"',
        "/api/stream?video=mount_fuji&quality=1080",
        "#EXT-X-STREAM-INF:BANDWIDTH=1440000,AVERAGE-BANDWIDTH=1080000,RESOLUTION=1280x720,"
        'FRAME-RATE=10.000,CODECS="avc1.42c028,mp4a.40.2",NAME="720p"',
        "/api/stream?video=mount_fuji&quality=720",
        "#EXT-X-STREAM-INF:BANDWIDTH=960000,AVERAGE-BANDWIDTH=720000,RESOLUTION=854x480,"
        'FRAME-RATE=10.000,CODECS="avc1.42c028,mp4a.40.2",NAME="480p"',
        "/api/stream?video=mount_fuji&quality=480",
    ]
    assert master_playlist("mount_fuji", index).endswith("480\n")


def test_master_playlist_uses_the_given_base(index: VideoIndex) -> None:
    lines = master_playlist("mount_fuji", index, base="https://cdn.example/api/stream")
    assert "https://cdn.example/api/stream?video=mount_fuji&quality=720" in lines.splitlines()


def test_variant_playlist_is_a_complete_vod_playlist(index: VideoIndex) -> None:
    text = variant_playlist("mount_fuji", 720, index)
    assert text.endswith("#EXT-X-ENDLIST\n")
    assert text.splitlines() == [
        "#EXTM3U",
        "#EXT-X-VERSION:3",
        "#EXT-X-TARGETDURATION:10",
        "#EXT-X-MEDIA-SEQUENCE:0",
        "#EXT-X-PLAYLIST-TYPE:VOD",
        "",
        "#EXTINF:10.000,",
        "/api/stream?video=mount_fuji&quality=720&segment=0",
        "#EXTINF:10.000,",
        "/api/stream?video=mount_fuji&quality=720&segment=1",
        "#EXTINF:4.200,",
        "/api/stream?video=mount_fuji&quality=720&segment=2",
        "#EXT-X-ENDLIST",
    ]


def test_target_duration_is_the_ceiling_of_the_longest_segment() -> None:
    index = VideoIndex("nature", (rendition(480, 854, 480, [10.1, 9.9, 3.0]),))
    lines = variant_playlist("nature", 480, index).splitlines()
    assert "#EXT-X-TARGETDURATION:11" in lines
    assert [line for line in lines if line.startswith("#EXTINF")] == [
        "#EXTINF:10.100,", "#EXTINF:9.900,", "#EXTINF:3.000,"]


def test_index_survives_a_json_round_trip(index: VideoIndex) -> None:
    assert VideoIndex.from_json(index.to_json()) == index


def test_index_of_another_version_is_refused(index: VideoIndex) -> None:
    with pytest.raises(ValueError):
        VideoIndex.from_json(index.to_json().replace(b'"version": 1', b'"version": 9'))


def test_missing_rendition_and_segment_past_the_end_are_404(index: VideoIndex) -> None:
    with pytest.raises(LegacyError) as missing:
        index.rendition(360)
    assert (missing.value.status, missing.value.error) == (404, "Video not found")
    with pytest.raises(LegacyError) as past:
        index.rendition(720).segment(3)
    assert (past.value.status, past.value.error) == (404, "Segment index out of range")
    assert index.rendition(720).segment(2).duration == 4.2


@pytest.mark.parametrize(("query", "expected"), [
    ({"video": "black"}, StreamRequest("black")),
    ({"video": "nature", "quality": "480"}, StreamRequest("nature", 480)),
    ({"video": "mount_fuji", "quality": "1080", "segment": "2"},
     StreamRequest("mount_fuji", 1080, 2)),
    ({"video": "black", "segment": "0"}, StreamRequest("black", 720, 0)),
    ({"video": "black", "quality": "720", "segment": "999999"}, StreamRequest("black", 720, 999999)),
])
def test_valid_queries(query: dict[str, str], expected: StreamRequest) -> None:
    assert parse_stream_query(query) == expected


def test_master_and_segment_requests_are_told_apart() -> None:
    assert parse_stream_query({"video": "black"}).wants_master
    assert not parse_stream_query({"video": "black", "quality": "480"}).wants_master
    assert parse_stream_query({"video": "black", "segment": "1"}).wants_segment


@pytest.mark.parametrize(("query", "status", "message"), [
    ({}, 400, "Invalid video. Available: black, mount_fuji, nature"),
    ({"video": ""}, 400, "Invalid video. Available: black, mount_fuji, nature"),
    ({"video": "Black"}, 400, "Invalid video. Available: black, mount_fuji, nature"),
    ({"video": "../black"}, 400, "Invalid video. Available: black, mount_fuji, nature"),
    ({"video": "nature", "quality": "360"}, 400, "Invalid quality. Available: 1080, 720, 480"),
    ({"video": "nature", "quality": "720p"}, 400, "Invalid quality. Available: 1080, 720, 480"),
    ({"video": "nature", "quality": ""}, 400, "Invalid quality. Available: 1080, 720, 480"),
    ({"video": "nature", "quality": " 720"}, 400, "Invalid quality. Available: 1080, 720, 480"),
    ({"video": "nature", "quality": "720", "segment": "-1"}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": "abc"}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": "1.5"}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": ""}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": "+1"}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": "\u0661"}, 400, "Invalid segment index"),
    ({"video": "nature", "quality": "720", "segment": "9" * 40}, 404,
     "Segment index out of range"),
    # Video is checked first, then quality, then segment.
    ({"video": "x", "quality": "1", "segment": "-1"}, 400,
     "Invalid video. Available: black, mount_fuji, nature"),
    ({"video": "black", "quality": "1", "segment": "-1"}, 400,
     "Invalid quality. Available: 1080, 720, 480"),
])
def test_bad_queries_raise_legacy_errors(query: dict[str, str], status: int, message: str) -> None:
    with pytest.raises(LegacyError) as raised:
        parse_stream_query(query)
    assert (raised.value.status, raised.value.error) == (status, message)


@pytest.mark.parametrize("method", ["get", "head"])
def test_the_api_reference_names_the_values_the_stream_route_takes(method: str) -> None:
    """A client built from /api/openapi.json sends what the route reads: `quality=720p` would be 400."""
    parameters = {p["name"]: p for p in document()["paths"]["/api/stream"][method]["parameters"]}
    assert set(parameters) == {"video", "quality", "segment", "v"}
    assert parameters["video"]["schema"]["enum"] == list(VIDEOS)
    assert parameters["quality"]["schema"]["enum"] == [str(q) for q in QUALITIES]
    for video in parameters["video"]["schema"]["enum"]:
        for quality in parameters["quality"]["schema"]["enum"]:
            assert parse_stream_query({"video": video, "quality": quality, "segment": "0"}).quality == int(quality)
