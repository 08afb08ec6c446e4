"""The source pictures of the transform benchmarks, made here the same way on every run (no downloads).

Photos start from the colour photographs scikit-image ships (astronaut, coffee, rocket...), enlarged
to 2000-4000 px and given what an enlargement lacks: fine texture (scikit-image's grass, gravel
and brick, tiled), sensor grain (seeded Gaussian noise) and a few hard-edged shapes, so the
encoders have real detail to spend bits on. PNGs with alpha are photo cut-outs (a soft-edged
ellipse and discs of full transparency); the animated GIF is a photo panned over 8 frames.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyvips
import skimage

_DATA = os.path.join(os.path.dirname(skimage.__file__), "data")
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png")
TEXTURES = ("grass.png", "gravel.png", "brick.png")
# width, height of each photo: 3:2, 4:3, portrait 2:3, 16:9 and square, 2000-4000 px on the long side
PHOTO_SIZES = ((3000, 2000), (4000, 3000), (2000, 3000), (3840, 2160), (2400, 1600), (2048, 2048),
               (3264, 2448), (2500, 1667), (2000, 1333), (3600, 2400), (2160, 3840), (2800, 2100),
               (4000, 2667), (2200, 1467), (3000, 3000), (2600, 1733))
ALPHA_SIZES = ((2400, 1600), (2000, 2000), (3000, 2000))
GIF_SIZE, GIF_FRAMES = (1000, 667), 8


@dataclass(frozen=True, slots=True)
class SourcePicture:
    name: str          # file name, e.g. "photo-03.jpg"
    data: bytes
    width: int
    height: int        # of one frame
    kind: str          # "photo", "alpha" or "animated"


def _load(name: str) -> pyvips.Image:
    image = pyvips.Image.new_from_file(os.path.join(_DATA, name))
    if image.bands == 1:
        image = image.bandjoin([image, image])
    if image.bands == 4:
        image = image.flatten(background=[255, 255, 255])
    return image.cast("uchar").copy(interpretation="srgb")


def _texture(index: int, width: int, height: int) -> pyvips.Image:
    """Fine detail at full resolution: a tiled grey texture, centred on zero."""
    tile = pyvips.Image.new_from_file(os.path.join(_DATA, TEXTURES[index % len(TEXTURES)]))
    if tile.bands > 1:
        tile = tile[0]
    across, down = width // tile.width + 1, height // tile.height + 1
    return tile.replicate(across, down).crop(0, 0, width, height).cast("float") - tile.avg()


def photo(index: int, width: int, height: int) -> pyvips.Image:
    """An 8-bit sRGB photo-like picture of `width` x `height`."""
    base = _load(PHOTOS[index % len(PHOTOS)])
    # Cover the target size, then cut it out of the middle.
    scale = max(width / base.width, height / base.height)
    base = base.resize(scale, kernel="lanczos3")
    base = base.crop((base.width - width) // 2, (base.height - height) // 2, width, height)
    grain = pyvips.Image.gaussnoise(width, height, sigma=4.0, mean=0, seed=index + 1)
    image = base.cast("float") + _texture(index, width, height) * 0.35 + grain
    for disc in range(6):  # hard edges, as buildings and signs give real photos
        colour = [(disc * 83 + index * 29) % 256, (disc * 41 + 100) % 256, (index * 67 + disc * 13) % 256]
        image = image.draw_circle(colour, (disc * 977 + index * 131) % width, (disc * 613 + index * 71) % height,
                                  max(width, height) // (18 + disc), fill=disc % 2 == 0)
    return image.cast("uchar").copy(interpretation="srgb")


def _alpha_mask(width: int, height: int, index: int) -> pyvips.Image:
    xy = pyvips.Image.xyz(width, height).cast("float")
    dx = (xy[0] - width / 2) / (width * 0.45)
    dy = (xy[1] - height / 2) / (height * 0.45)
    ellipse = (1 - (dx * dx + dy * dy)) * 255 * 4     # soft edge about an eighth of the radius wide
    mask = ellipse.cast("uchar", shift=False)
    for hole in range(3):  # fully transparent holes with hard edges
        mask = mask.draw_circle(0, width // 4 + hole * width // 4, height // 2 + (hole - 1) * height // 6 + index,
                                min(width, height) // 14, fill=True)
    return mask


def _gif(index: int) -> bytes:
    width, height = GIF_SIZE
    wide = photo(index, width + GIF_FRAMES * 40, height)
    frames = [wide.crop(frame * 40, 0, width, height) for frame in range(GIF_FRAMES)]
    strip = pyvips.Image.arrayjoin(frames, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", height)
    strip.set_type(pyvips.GValue.array_int_type, "delay", [120] * GIF_FRAMES)
    strip.set_type(pyvips.GValue.gint_type, "loop", 0)
    data: bytes = strip.gifsave_buffer(effort=1)
    return data


def srcset_sources() -> list[SourcePicture]:
    """The 20 pictures of the srcset workload: 16 JPEG photos, 3 PNGs with alpha, 1 animated GIF."""
    pictures = []
    for index, (width, height) in enumerate(PHOTO_SIZES):
        pictures.append(SourcePicture(f"photo-{index:02d}.jpg", photo(index, width, height).jpegsave_buffer(Q=90),
                                      width, height, "photo"))
    for index, (width, height) in enumerate(ALPHA_SIZES):
        rgba = photo(index + 3, width, height).bandjoin(_alpha_mask(width, height, index))
        pictures.append(SourcePicture(f"cutout-{index:02d}.png", rgba.pngsave_buffer(compression=6), width, height,
                                      "alpha"))
    pictures.append(SourcePicture("pan.gif", _gif(5), *GIF_SIZE, "animated"))
    return pictures


def single_photo() -> SourcePicture:
    """The every-width-new workload's source: one 2000x1333 JPEG."""
    return SourcePicture("single.jpg", photo(8, 2000, 1333).jpegsave_buffer(Q=90), 2000, 1333, "photo")
