"""Where a fit=cover crop sits (assetcdn/edge/transform/options/resize.py cuts it).

- center: the middle.
- the eight other compass points: the named edge or corner is kept (north: top edge, centred
  across; southeast: bottom-right corner).
- auto: libvips' attention strategy (edges, skin tones and saturation), as smartcrop does.
- face: the box around the faces assetcdn/shared/faces.py finds; attention when it finds none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyvips

# Where the crop sits along each axis: 0 = left/top edge, 0.5 = middle, 1 = right/bottom edge.
COMPASS: dict[str, tuple[float, float]] = {
    "center": (0.5, 0.5), "north": (0.5, 0.0), "south": (0.5, 1.0), "east": (1.0, 0.5), "west": (0.0, 0.5),
    "northeast": (1.0, 0.0), "northwest": (0.0, 0.0), "southeast": (1.0, 1.0), "southwest": (0.0, 1.0),
}


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
    # Imported on first use: the detector's library loads with it, and the edge's own process parses
    # `gravity=face` without ever running it (its image workers do).
    from assetcdn.shared.faces import face_boxes  # noqa: PLC0415

    faces = face_boxes(frame)
    if not faces:
        return None
    left = min(x for x, _, _, _ in faces)
    top = min(y for _, y, _, _ in faces)
    right = max(x + w for x, _, w, _ in faces)
    bottom = max(y + h for _, y, _, h in faces)
    return _offset_around((left + right) / 2, (top + bottom) / 2, width, height, frame.width, frame.height)


def compass_offset(gravity_name: str, frame_width: int, frame_height: int,
                   width: int, height: int) -> tuple[int, int]:
    along_x, along_y = COMPASS[gravity_name]
    return int((frame_width - width) * along_x), int((frame_height - height) * along_y)
