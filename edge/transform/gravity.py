"""Gravity step: cut the covering image down to exactly w x h (fit=cover only).

- center: the middle.
- auto: libvips' attention strategy (edges, skin tones and saturation), as smartcrop does.
- face: the box around the faces OpenCV's Haar cascade finds; attention when it finds none.
Animated images are cut per frame at one place, chosen on the first frame, so the
animation does not jitter.
"""

from __future__ import annotations

import pyvips

from edge.transform.context import TransformContext
from edge.transform.faces import detect_faces
from edge.transform.frames import map_frames, split_frames


def _clamp(value: float, low: int, high: int) -> int:
    return int(min(max(value, low), high))


def _offset_around(center_x: float, center_y: float, width: int, height: int,
                   frame_width: int, frame_height: int) -> tuple[int, int]:
    return (_clamp(center_x - width / 2, 0, frame_width - width),
            _clamp(center_y - height / 2, 0, frame_height - height))


def attention_offset(frame: pyvips.Image, width: int, height: int) -> tuple[int, int]:
    _, found = frame.smartcrop(width, height, interesting="attention", attention_x=True, attention_y=True)
    return _offset_around(found["attention_x"], found["attention_y"], width, height, frame.width, frame.height)


def face_offset(frame: pyvips.Image, width: int, height: int) -> tuple[int, int] | None:
    faces = detect_faces(frame)
    if not faces:
        return None
    left = min(x for x, _, _, _ in faces)
    top = min(y for _, y, _, _ in faces)
    right = max(x + w for x, _, w, _ in faces)
    bottom = max(y + h for _, y, _, h in faces)
    return _offset_around((left + right) / 2, (top + bottom) / 2, width, height, frame.width, frame.height)


def gravity(ctx: TransformContext) -> None:
    plan = ctx.plan
    if plan is None or plan.crop_to is None:
        return
    image = ctx.require_image()
    width, height = plan.crop_to
    frame_height = image.get_page_height()
    if (image.width, frame_height) == (width, height):
        return
    if ctx.opts.gravity != "center":
        # Analysis reads the pixels, and the crop reads them again: keep the (covering-size)
        # decode in memory rather than decoding a sequential-access source twice.
        image = image.copy_memory()
        ctx.check_deadline("gravity")
    first = split_frames(image)[0]
    offset: tuple[int, int] | None = None
    if ctx.opts.gravity == "face":
        offset = face_offset(first, width, height)
        ctx.check_deadline("gravity")
    if offset is None and ctx.opts.gravity in ("face", "auto"):
        offset = attention_offset(first, width, height)
    if offset is None:
        offset = ((image.width - width) // 2, (frame_height - height) // 2)
    left, top = offset
    ctx.image = map_frames(image, lambda frame: frame.crop(left, top, width, height))
