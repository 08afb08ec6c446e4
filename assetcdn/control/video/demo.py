"""The three demo videos of ``/api/stream``, made on first start and cached in the data dir.

They are synthetic so that nothing is downloaded: ``black``; ``mount_fuji``, a snow-capped
cone panning past a sky gradient with a drifting sun; ``nature``, layered hills and grass
scrolling at different speeds. Frames are built straight in YUV 4:2:0 by slicing a wide
canvas prepared once, and the content is simple on purpose (large flat areas, pure
translation), so x264's ``ultrafast`` preset encodes 1080p at a few times real time.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
import numpy as np
from av.audio.stream import AudioStream

from assetcdn.control.video.outcome import INDEX_FILE, check_stop
from assetcdn.control.video.transcode import transcode_frames
from assetcdn.shared.hls import VIDEOS, VideoIndex

DEMO_WIDTH, DEMO_HEIGHT = 1920, 1080
DEMO_FPS = 10  # x264 costs per frame: a low rate keeps the first start short
DEMO_SECONDS = 12  # a full segment and a short one: enough to see a player move from one to the next
DEMO_PRESET = "ultrafast"
LOOP_SECONDS = 10  # the scenes repeat seamlessly; one segment long
CANVAS_CHUNK = 512  # columns of a scene's canvas built at a time (even: chroma takes column pairs)

Scene = Callable[[int], np.ndarray]  # frame number -> yuv420p array of shape (h * 3 / 2, w)


def ensure_demo_videos(cache_dir: Path, seconds: int = DEMO_SECONDS, *,
                       width: int = DEMO_WIDTH, height: int = DEMO_HEIGHT,
                       fps: int = DEMO_FPS, stop: threading.Event | None = None) -> dict[str, VideoIndex]:
    """HLS renditions of the demo videos under ``cache_dir/<video>/``, made only when missing.

    The scenes' pictures and sound go straight to the renditions' encoders: no source file is
    encoded only to be decoded again. A video whose index or rendition files are missing or
    truncated is made again; complete ones are reused as they are (whatever size they were made
    at: delete the directory to change it). The videos are made side by side, one thread each
    (x264 and the scene drawing run without the GIL): about twice as fast on two cores as one
    after the other. ``stop``, once set, ends the work within a frame (``Stopped``).
    """
    def make(video: str) -> VideoIndex:
        out_dir = cache_dir / video
        index = _cached_index(out_dir)
        if index is None:
            frames = scene_frames(video, seconds=seconds, width=width, height=height, fps=fps,
                                  audio=video != "black", stop=stop)
            index = transcode_frames(frames, out_dir, video=video, width=width, height=height,
                                     fps=Fraction(fps), has_audio=video != "black", preset=DEMO_PRESET,
                                     stop=stop)
        return index

    with ThreadPoolExecutor(len(VIDEOS), thread_name_prefix="demo-video") as pool:
        made = [pool.submit(make, video) for video in VIDEOS]
        try:
            indexes = {video: future.result() for video, future in zip(VIDEOS, made, strict=True)}
        except BaseException:
            if stop is not None:
                stop.set()  # one failed: the others stop too rather than finish for nothing
            raise
    shutil.rmtree(cache_dir / "sources", ignore_errors=True)  # what earlier versions encoded first
    return indexes


def scene_frames(scene: str, *, seconds: float, width: int, height: int, fps: int, audio: bool,
                 loop_seconds: int = LOOP_SECONDS, stop: threading.Event | None = None,
                 ) -> Iterator[av.VideoFrame | av.AudioFrame]:
    """``seconds`` of a named scene as frames in time order: each picture (yuv420p, its time set),
    then, with ``audio``, that picture's share of the sound. ``width`` and ``height`` must be
    multiples of 4."""
    frames, loop, draw = _prepare(scene, seconds, width, height, fps, loop_seconds, stop)
    tone = _tone(scene, 48000 // fps) if audio else None
    for n in range(frames):
        picture = av.VideoFrame.from_ndarray(draw(n % loop), format="yuv420p")
        picture.pts = n
        picture.time_base = Fraction(1, fps)
        yield picture
        if tone is not None:
            yield tone(n)


def _cached_index(out_dir: Path) -> VideoIndex | None:
    try:
        index = VideoIndex.read(out_dir / INDEX_FILE)
    except (OSError, ValueError, KeyError):
        return None
    for rendition in index.renditions:
        path = out_dir / rendition.file
        if not path.is_file() or path.stat().st_size != rendition.size:
            return None
    return index


def write_synthetic_video(path: Path, scene: str, *, seconds: float, width: int, height: int,
                          fps: int, audio: bool, loop_seconds: int = LOOP_SECONDS,
                          audio_codec: str = "aac", stop: threading.Event | None = None) -> Path:
    """Encode ``seconds`` of a named scene (``black``, ``mount_fuji``, ``nature``) to MP4 (or
    whatever container ``path`` names), H.264 with ``audio_codec`` sound.

    The scenes loop every ``loop_seconds``, so only one loop is encoded: later loops reuse
    its packets with shifted timestamps (each loop starts on an IDR frame). ``width`` and
    ``height`` must be multiples of 4 (4:2:0 planes packed as whole rows). ``stop``, once set,
    ends the work within a frame (``Stopped``), leaving ``path`` incomplete.
    """
    frames, loop, draw = _prepare(scene, seconds, width, height, fps, loop_seconds, stop)
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.time_base = Fraction(1, fps)
        video.options = {"preset": "ultrafast", "crf": "20", "x264-params": f"keyint={loop}"}
        sound = None
        if audio:
            sound = cast(AudioStream, container.add_stream(audio_codec, rate=48000))
            sound.layout = "stereo"
        encoded: list[tuple[bytes, int, bool]] = []
        for n in range(loop):
            check_stop(stop)
            frame = av.VideoFrame.from_ndarray(draw(n), format="yuv420p")
            frame.pts = n
            frame.time_base = Fraction(1, fps)
            encoded += _keep(container, video.encode(frame))
        encoded += _keep(container, video.encode(None))
        for n in range(loop, frames):
            data, pts, key = encoded[n % loop]
            copy = av.Packet(data)
            copy.pts = copy.dts = pts + n // loop * loop
            copy.time_base = Fraction(1, fps)
            copy.is_keyframe = key
            copy.stream = video
            container.mux(copy)
        if sound is not None:
            tone = _tone(scene, 48000 // fps)
            for n in range(frames):
                check_stop(stop)
                container.mux(sound.encode(tone(n)))
            container.mux(sound.encode(None))
    return path


def _prepare(scene: str, seconds: float, width: int, height: int, fps: int, loop_seconds: int,
             stop: threading.Event | None) -> tuple[int, int, Scene]:
    """The frame count, the frames of one loop, and the scene's drawing function."""
    if width % 4 or height % 4:
        raise ValueError("width and height must be multiples of 4")
    frames = round(seconds * fps)
    loop = min(frames, loop_seconds * fps)
    check_stop(stop)
    return frames, loop, _SCENES[scene](width, height, loop, stop)


def _keep(container: av.container.OutputContainer,
          packets: list[av.Packet]) -> list[tuple[bytes, int, bool]]:
    """Mux packets and keep their bytes, timestamp (frames) and key flag for later loops."""
    kept = [(bytes(p), int(p.pts * p.time_base * p.stream.average_rate), p.is_keyframe)
            for p in packets]
    container.mux(packets)
    return kept


def _tone(scene: str, samples: int) -> Callable[[int], av.AudioFrame]:
    """A quiet chord that swells every 5 s, one video frame's worth of samples per call."""
    base = 220.0 if scene == "mount_fuji" else 330.0

    def chunk(n: int) -> av.AudioFrame:
        t = (np.arange(samples) + n * samples) / 48000
        swell = 0.06 + 0.04 * np.sin(2 * math.pi * t / 5)
        wave = swell * (np.sin(2 * math.pi * base * t) + 0.5 * np.sin(2 * math.pi * base * 1.5 * t))
        pcm = np.vstack([wave, wave]).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(pcm, format="fltp", layout="stereo")
        frame.sample_rate = 48000
        frame.pts = n * samples
        frame.time_base = Fraction(1, 48000)
        return frame

    return chunk


# Scenes: each prepares its canvas once and returns a cheap per-frame slicer. Moving bands
# travel exactly one texture period per loop, so the loop is seamless; per-frame motion is
# a multiple of 18 px at 1080p, i.e. whole pixels at 720p and 480p as well.

def _black(width: int, height: int, frames: int, stop: threading.Event | None) -> Scene:
    picture = _pack(np.full((height, width, 3), 0.0, np.float32))
    return lambda n: picture


def _mount_fuji(width: int, height: int, frames: int, stop: threading.Event | None) -> Scene:
    speed = _speed(width, 1)
    period = speed * frames
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    sky = (0.25 + 0.55 * y)[..., None] * np.array([0.7, 0.85, 1.0], np.float32)
    xs = np.arange(width)[None, :] / width
    dx = np.minimum(np.abs(xs - 0.5) / 0.45, 1.0)
    ridge = 0.3 + 0.55 * dx  # the cone's top at 30 % of the height
    cone = y >= ridge

    def still(cols: slice) -> np.ndarray:
        rgb = np.repeat(sky, cols.stop - cols.start, axis=1)
        x, d, r = xs[:, cols], dx[:, cols], ridge[:, cols]
        part = cone[:, cols]
        rgb[part] = (0.25, 0.3, 0.42)
        rgb[part & (y < r + 0.12 * (1 - d))] = (0.95, 0.95, 0.97)  # snow
        rgb[(x - 0.8) ** 2 * (width / height) ** 2 + (y - 0.2) ** 2 < 0.07**2] = (1.0, 0.85, 0.5)  # sun
        rgb[np.broadcast_to(y > 0.86, rgb.shape[:2])] = (0.2, 0.35, 0.2)  # foreground field
        return rgb

    def clouds(cols: slice) -> np.ndarray:
        # Clouds drift across the upper sky, in front of the cone's top.
        rgb = np.repeat(sky, cols.stop - cols.start, axis=1)
        phase = 2 * math.pi * (np.arange(cols.start, cols.stop)[None, :] % period) / period
        puff = (np.sin(phase * 3) * np.sin(phase * 5 + 1) > 0.35) & (np.abs(y - 0.3) < 0.05)
        rgb[puff] = (0.96, 0.96, 0.98)
        return rgb

    still_planes = _canvas_in_chunks(still, height, width, stop)
    cloud_planes = _canvas_in_chunks(clouds, height, width + period, stop)
    cuts = [0, _mult4(height * 0.22), _mult4(height * 0.38), height]

    def draw(n: int) -> np.ndarray:
        fixed = _slice(still_planes, 0, width)
        moving = _slice(cloud_planes, n * speed, width)
        merged = _stack_bands([fixed, moving, fixed], cuts, width, height)
        # Keep the cone where it rises into the cloud band.
        band = slice(cuts[1], cuts[2])
        merged[band] = np.where(cone[band], fixed[band], merged[band])
        return merged

    return draw


def _nature(width: int, height: int, frames: int, stop: threading.Event | None) -> Scene:
    speeds = (0, _speed(width, 1), _speed(width, 2))  # sky, hills, grass (px/frame)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    sky = (0.45 + 0.4 * y)[..., None] * np.array([0.75, 0.9, 1.0], np.float32)

    def layer(period: int) -> Callable[[slice], np.ndarray]:
        def build(cols: slice) -> np.ndarray:
            x = (np.arange(cols.start, cols.stop)[None, :] % period) / period
            rgb = np.repeat(sky, cols.stop - cols.start, axis=1)
            cloud = (np.sin(2 * math.pi * x * 3) * np.sin(2 * math.pi * x * 2) > 0.5) & (np.abs(y - 0.12) < 0.04)
            rgb[cloud] = (0.97, 0.97, 0.97)
            horizon = 0.45 + 0.08 * np.sin(2 * math.pi * x * 2) + 0.04 * np.sin(2 * math.pi * x * 5)
            rgb[np.broadcast_to(y >= horizon, rgb.shape[:2])] = (0.25, 0.5, 0.25)
            stripes = 0.5 + 0.5 * np.sin(2 * math.pi * x * 24)
            near = np.broadcast_to(y >= 0.72, rgb.shape[:2])
            rgb[..., 0] = np.where(near, 0.2 + 0.1 * stripes, rgb[..., 0])
            rgb[..., 1] = np.where(near, 0.55 + 0.2 * stripes, rgb[..., 1])
            rgb[..., 2] = np.where(near, 0.15, rgb[..., 2])
            return rgb
        return build

    layers = [(_canvas_in_chunks(layer(max(speed * frames, width)), height, width + speed * frames, stop), speed)
              for speed in speeds]
    # Row bands of the picture, each taken from its layer (multiples of 4 rows).
    cuts = [0, _mult4(height * 0.3), _mult4(height * 0.72), height]

    def draw(n: int) -> np.ndarray:
        bands = [_slice(planes, n * speed, width) for planes, speed in layers]
        return _stack_bands(bands, cuts, width, height)

    return draw


def _canvas_in_chunks(build: Callable[[slice], np.ndarray], height: int, width: int,
                      stop: threading.Event | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Y, U, V planes of a canvas `width` columns wide, built and converted a few hundred columns
    at a time (`build(columns)` gives their RGB): a stop is seen between two pieces, and the float
    arrays stay small."""
    y = np.empty((height, width), np.uint8)
    u = np.empty((height // 2, width // 2), np.uint8)
    v = np.empty((height // 2, width // 2), np.uint8)
    for start in range(0, width, CANVAS_CHUNK):
        check_stop(stop)
        cols = slice(start, min(start + CANVAS_CHUNK, width))
        y[:, cols], u[:, cols.start // 2:cols.stop // 2], v[:, cols.start // 2:cols.stop // 2] = _canvas(build(cols))
    return y, u, v


def _speed(width: int, factor: int) -> int:
    """Pixels per frame: 18 at 1920 wide (whole pixels at 720p and 480p too), at least 2."""
    return max(2, round(width * 18 / 1920 / 2) * 2) * factor


_SCENES: dict[str, Callable[[int, int, int, threading.Event | None], Scene]] = {
    "black": _black, "mount_fuji": _mount_fuji, "nature": _nature,
}


def _mult4(value: float) -> int:
    return int(value) // 4 * 4


def _canvas(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RGB (0-1) to limited-range BT.709 Y, U, V planes, chroma subsampled 2x2."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    luma = 0.2126 * r + 0.7152 * g + 0.0722 * b
    cb = (b - luma) / 1.8556
    cr = (r - luma) / 1.5748
    y = np.clip(16 + 219 * luma, 0, 255).astype(np.uint8)
    h, w = cb.shape
    cb = cb[: h // 2 * 2, : w // 2 * 2].reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
    cr = cr[: h // 2 * 2, : w // 2 * 2].reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
    u = np.clip(128 + 224 * cb, 0, 255).astype(np.uint8)
    v = np.clip(128 + 224 * cr, 0, 255).astype(np.uint8)
    return y, u, v


def _slice(canvas: tuple[np.ndarray, np.ndarray, np.ndarray], offset: int,
           width: int) -> np.ndarray:
    y, u, v = canvas
    offset -= offset % 2  # chroma columns are pairs of luma columns
    half = offset // 2
    return _pack_planes(y[:, offset : offset + width], u[:, half : half + width // 2],
                        v[:, half : half + width // 2])


def _stack_bands(bands: list[np.ndarray], cuts: list[int], width: int,
                 height: int) -> np.ndarray:
    out = np.empty((height * 3 // 2, width), np.uint8)
    chroma = height // 4  # rows of the packed U (then V) plane
    for band, top, bottom in zip(bands, cuts, cuts[1:], strict=False):
        out[top:bottom] = band[top:bottom]
        for plane in (0, 1):
            start = height + plane * chroma
            out[start + top // 4 : start + bottom // 4] = band[start + top // 4 : start + bottom // 4]
    return out


def _pack(rgb: np.ndarray) -> np.ndarray:
    return _pack_planes(*_canvas(rgb))


def _pack_planes(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Y then U then V as one (h * 3 / 2, w) array, the layout PyAV's yuv420p expects."""
    h, w = y.shape
    return np.concatenate([y, np.ascontiguousarray(u).reshape(h // 4, w),
                           np.ascontiguousarray(v).reshape(h // 4, w)])
